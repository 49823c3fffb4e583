"""RunState: exact JSON round trips, the frozen version-1 fixture, refusal of unknown versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.agent.state import Answer, PendingCall, RunFailure, RunState, ToolCall, utcnow

FIXTURE = Path(__file__).parent.parent / "fixtures" / "run_state_v1.json"


def full_state() -> RunState:
    now = utcnow()
    return RunState(
        run_id="run_x",
        agent_id="assistant",
        revision=4,
        status="failed",
        messages=[
            {"role": "user", "content": "héllo ✓"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ask_user", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"answer": 1.5}'},
        ],
        pending=PendingCall(
            tool_call_id="c2",
            tool_name="ask_user",
            args={"question": "q", "n": 1.25},
            suspend_payload={"question": "q"},
            suspended_at=now,
            resume=Answer(tool_call_id="c2", resume_data=["a", "b"], answered_by="U1", answered_at=now),
        ),
        queued=[ToolCall(id="c3", name="other", arguments='{"x": [1, {}]}')],
        answers=[Answer(tool_call_id="c1", resume_data="x", answered_at=now)],
        error=RunFailure(kind="model", message="HTTP 500"),
        turns=3,
        metadata={"slack": {"channel_id": "C1", "empty": [], "nested": {}}},
    )


def test_json_round_trip_is_exact() -> None:
    state = full_state()
    text = state.to_json()
    again = RunState.from_json(text)
    assert again == state
    assert again.to_json() == text


def test_frozen_v1_fixture_loads_and_round_trips() -> None:
    raw = FIXTURE.read_text().strip()
    state = RunState.from_json(raw)
    assert state.schema_version == 1 and state.status == "suspended"
    assert state.pending is not None and state.pending.tool_call_id == "call_1"
    assert [c.id for c in state.queued] == ["call_2"]
    assert state.metadata["slack"]["thread_ts"] == "1700000000.000100"
    assert state.to_json() == raw  # byte-exact: version 1 records written earlier stay readable as they are


def test_unknown_schema_version_is_refused() -> None:
    data = json.loads(FIXTURE.read_text())
    data["schema_version"] = 2
    with pytest.raises(ValidationError):
        RunState.model_validate(data)
    data["schema_version"] = 1
    data["surprise"] = True
    with pytest.raises(ValidationError):
        RunState.model_validate(data)
