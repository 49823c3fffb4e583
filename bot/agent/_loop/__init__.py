"""The agent loop's internals (not public API): turns, tool calls, claims, saves, resumes, stops, history."""
