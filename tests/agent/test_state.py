"""RunState: exact JSON round trips, every released version's frozen fixture, refusal of unknown versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.agent.state import SCHEMA_VERSION, Answer, PendingCall, RunFailure, RunState, ToolCall, utcnow
from bot.errors import StoreCorrupt, UnknownSchemaVersion

FIXTURES = Path(__file__).parent.parent / "fixtures"
FIXTURE = FIXTURES / "run_state_v1.json"


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
            expires_at=now,
            resume=Answer(tool_call_id="c2", resume_data=["a", "b"], answered_by="U1", answered_at=now),
        ),
        queued=[ToolCall(id="c3", name="other", arguments='{"x": [1, {}]}', extra={"extra_content": {"k": "v"}})],
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


def test_frozen_v1_fixture_loads_as_the_current_version() -> None:
    raw = FIXTURE.read_text().strip()
    state = RunState.from_json(raw)
    assert state.schema_version == SCHEMA_VERSION and state.status == "suspended"
    assert state.pending is not None and state.pending.tool_call_id == "call_1"
    assert state.pending.expires_at is None  # version 1 had no deadline: none beyond the record's retention
    assert [c.id for c in state.queued] == ["call_2"]
    assert state.metadata["slack"]["thread_ts"] == "1700000000.000100"
    assert RunState.from_json(state.to_json()) == state


def test_every_frozen_fixture_loads() -> None:
    """A fixture per released schema version (``run_state_v<N>.json``); the current one round-trips byte-exact."""
    found = sorted(FIXTURES.glob("run_state_v*.json"))
    versions = {int(p.stem.removeprefix("run_state_v")) for p in found}
    assert versions == set(range(1, SCHEMA_VERSION + 1)), "add a frozen fixture for each released version"
    for path in found:
        raw = path.read_text().strip()
        state = RunState.from_json(raw)
        assert state.schema_version == SCHEMA_VERSION
        if path.stem == f"run_state_v{SCHEMA_VERSION}":
            assert state.to_json() == raw


def test_unknown_schema_version_or_unexpected_fields_are_refused() -> None:
    data = json.loads(FIXTURE.read_text())
    data["schema_version"] = 99
    with pytest.raises(UnknownSchemaVersion):
        RunState.from_json(json.dumps(data))
    data["schema_version"] = 1
    data["surprise"] = True
    with pytest.raises(StoreCorrupt):
        RunState.from_json(json.dumps(data))
    with pytest.raises(StoreCorrupt):
        RunState.from_json("[1, 2]")
