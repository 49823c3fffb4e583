"""The persisted state of one agent run: :class:`RunState`, versioned, JSON round-trips exactly.

Shape (``schema_version`` 1)::

    {"schema_version": 1, "run_id": "run_...", "agent_id": "assistant", "revision": 3,
     "status": "running" | "suspended" | "completed" | "failed",
     "messages": [ ...Chat Completions messages (user / assistant with tool_calls / tool)... ],
     "pending": {tool_call_id, tool_name, args, suspend_payload, suspended_at, resume} | null,
     "queued": [{id, name, arguments}, ...],          # tool calls of the last assistant turn not run yet
     "answers": [{tool_call_id, answered_by, answered_at, resume_data}, ...],
     "error": {kind, message} | null, "turns": 2, "metadata": {...caller's...},
     "created_at": "...", "updated_at": "..."}

The system prompt is not stored: it is the agent's, prepended at each model call. ``revision`` is the
compare-and-set counter the store checks (see :mod:`bot.store.redis_store`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1

RunStatus = Literal["running", "suspended", "completed", "failed"]
ResumeData = str | list[str]


def utcnow() -> datetime:
    """Timezone-aware now in UTC."""
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Model):
    """One tool call of an assistant message, as Chat Completions names it (``arguments`` is raw JSON text)."""

    id: str
    name: str
    arguments: str

    def to_message_part(self) -> dict[str, Any]:
        """The ``tool_calls[]`` entry of an assistant message."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class Answer(_Model):
    """A claimed answer to a suspended tool call (who, when, the resume data as given)."""

    tool_call_id: str
    resume_data: ResumeData
    answered_by: str | None = None
    answered_at: datetime


class PendingCall(_Model):
    """The tool call a run is suspended on.

    ``resume`` is set by the claim that won; the tool then re-runs with it. A pending call whose
    ``resume`` is set belongs to a running (or failed) run, never to a suspended one.
    """

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    suspend_payload: dict[str, Any]
    suspended_at: datetime
    resume: Answer | None = None


class RunFailure(_Model):
    """Why a run stopped early: ``kind`` is ``model`` (call failed) or ``max_turns``."""

    kind: Literal["model", "max_turns", "tool"]
    message: str


class RunState(_Model):
    """Everything needed to continue a run in any process. See the module docstring for the JSON shape."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    agent_id: str
    revision: int = 0
    status: RunStatus = "running"
    messages: list[dict[str, Any]] = Field(default_factory=list)
    pending: PendingCall | None = None
    queued: list[ToolCall] = Field(default_factory=list)
    answers: list[Answer] = Field(default_factory=list)
    error: RunFailure | None = None
    turns: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    def to_json(self) -> str:
        """Serialize for storage (compact JSON)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> RunState:
        """Parse stored JSON. Raises ``pydantic.ValidationError`` on a malformed or unknown-version record."""
        return cls.model_validate_json(data)

    def answer_for(self, tool_call_id: str | None) -> Answer | None:
        """The latest claimed answer for ``tool_call_id`` (or the latest of all when ``None``)."""
        for answer in reversed(self.answers):
            if tool_call_id is None or answer.tool_call_id == tool_call_id:
                return answer
        return None
