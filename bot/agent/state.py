"""The persisted state of one agent run: :class:`RunState`, versioned, JSON round-trips exactly.

Shape (``schema_version`` 6)::

    {"schema_version": 6, "run_id": "run_...", "agent_id": "assistant", "revision": 3,
     "status": "running" | "suspended" | "completed" | "failed" | "expired",
     "messages": [ ...Chat Completions messages (user / assistant with tool_calls / tool), assistant
                   messages keeping the provider fields that must be sent back (e.g. reasoning_content)... ],
     "pending": {kind: "question" | "approval", tool_call_id, tool_name, args, suspend_payload, suspended_at,
                 expires_at, executing_since, interrupted, live_owner, resume,
                 batch: [{...a pending approval of the same turn, same fields, its batch empty...}, ...]} | null,
     "queued": [{id, name, arguments, extra}, ...],   # tool calls of the last assistant turn not run yet
     "answers": [{tool_call_id, answered_by, answered_at, resume_data, reason, outcome, arguments, scope,
                  edited_by}, ...],
     "error": {kind: "model" | "max_turns" | "tool" | "internal", message} | null, "turns": 2,
     "require_tool_approval": false, "metadata": {...caller's...},
     "created_at": "...", "updated_at": "..."}

Versions: 1 (first release) had no ``expires_at``, no ``extra`` on queued calls and no ``expired`` status; 2 had
no tool approvals (``pending.kind``, ``executing_since``, ``interrupted``, ``answers[].reason``,
``require_tool_approval``); 3 had no ``pending.live_owner`` (a question asked over a live MCP session) and no
``answers[].outcome`` (every answer of version 3 is a person's); 4 had no ``pending.batch`` (several approvals of
one turn asked together) and no ``answers[].arguments`` / ``answers[].scope`` (an approval with edited arguments,
and the scope its approver gave); 5 had no ``error.kind`` ``internal`` (a run the runtime failed, recorded as failed
instead of left ``running``) and no ``answers[].edited_by``.
:meth:`RunState.from_json` upgrades older records on load (:data:`MIGRATIONS`).
Every released version has a frozen
fixture under ``tests/fixtures/`` that must keep loading and resuming.

The system prompt is not stored: it is the agent's, prepended at each model call. ``revision`` is the
compare-and-set counter the store checks (see :mod:`bot.store.redis_store`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.errors import StoreCorrupt, UnknownSchemaVersion

SCHEMA_VERSION: Literal[6] = 6

RunStatus = Literal["running", "suspended", "completed", "failed", "expired"]
ResumeData = str | list[str]


def utcnow() -> datetime:
    """Timezone-aware now in UTC."""
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Model):
    """One tool call of an assistant message, as Chat Completions names it (``arguments`` is raw JSON text).

    ``extra``: fields the provider returned on this call beside ``id``/``type``/``function`` that must be sent
    back with it in later requests (e.g. Gemini's ``extra_content`` carrying a thought signature).
    """

    id: str
    name: str
    arguments: str
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_message_part(self) -> dict[str, Any]:
        """The ``tool_calls[]`` entry of an assistant message (provider extras included)."""
        part: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return {**self.extra, **part}


AnswerOutcome = Literal["answer", "no_answer", "cancelled"]


class Answer(_Model):
    """A claimed answer to a suspended tool call (who, when, the resume data as given). For an approval the
    resume data is ``"approved"`` or ``"declined"`` and ``reason`` says why (optional).

    ``outcome``: ``answer`` (a person answered), ``no_answer`` (the deadline passed and the run went on without
    one: ``Agent.time_out``) or ``cancelled`` (the person withdrew the question: ``Agent.cancel_question``,
    ``answered_by`` says who); the last two carry ``""`` as resume data (a declined approval for an approval).

    An approval may also carry ``arguments``: the arguments the approver changed the call's to (validated against
    the tool's schema; the call runs with them and the model is told), and ``scope``: what the approver's OK covers
    (``once``, the default, or a standing grant's scope such as ``thread``; the runtime only records it: the
    deployment keeps the grant, see docs/approvals.md). ``edited_by``: who changed the arguments, when it was not
    the approver (an Edit before a quorum completed by another), so the model is told who did.
    """

    tool_call_id: str
    resume_data: ResumeData
    answered_by: str | None = None
    answered_at: datetime
    reason: str | None = None
    outcome: AnswerOutcome = "answer"
    arguments: dict[str, Any] | None = None
    scope: str | None = None
    edited_by: str | None = None


class PendingCall(_Model):
    """The tool call a run is suspended on: a ``question`` (the tool suspended itself, e.g. ``ask_user``) or an
    ``approval`` (the tool waits for a person's OK before it runs).

    ``resume`` is set by the claim that won; the tool then re-runs with it (a question) or runs (an approved
    approval). A pending call whose ``resume`` is set belongs to a running (or failed) run, never to a suspended
    one. ``executing_since`` is saved just before an approved tool runs, so a process that dies mid-call leaves
    a trace: the call is then asked again with ``interrupted`` set (it may or may not have run).

    ``live_owner``: set when the question was asked from inside a tool call that is still running (an MCP server's
    question on the older protocol generation, see :mod:`bot.agent.mcp.elicitation`): the run stays ``running``, the
    answer is claimed like any other and handed to that process (owner id) through the store. If that process is
    gone, the call is asked again as an ``interrupted`` approval instead.

    ``batch``: the other approvals the same assistant turn waits for, asked together with this one (each a pending
    call of kind ``approval``, its own ``batch`` empty; see :mod:`bot.agent.decisions`). Each is decided on its own
    (its answer joins the run's ``answers`` while the run stays suspended); the run goes on once every call of the
    batch, this one included, is decided.
    """

    kind: Literal["question", "approval"] = "question"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    suspend_payload: dict[str, Any]
    suspended_at: datetime
    expires_at: datetime | None = None  # the answer's deadline (None: none beyond the record's retention)
    executing_since: datetime | None = None
    interrupted: bool = False
    live_owner: str | None = None
    resume: Answer | None = None
    batch: list[PendingCall] = Field(default_factory=list)

    def calls(self) -> list[PendingCall]:
        """This call and its batch, in the order the model made them."""
        return [self, *self.batch]

    def replacing(self, call: PendingCall) -> PendingCall:
        """This call and its batch with ``call`` in the place of the one of them whose ``tool_call_id`` it has (an
        edited or extended call of the batch: the rest stays as it is)."""
        if call.tool_call_id == self.tool_call_id:
            return call.model_copy(update={"batch": self.batch})
        batch = [call if c.tool_call_id == call.tool_call_id else c for c in self.batch]
        return self.model_copy(update={"batch": batch})


class RunFailure(_Model):
    """Why a run stopped early: ``kind`` is ``model`` (the model call failed), ``max_turns``, ``tool`` or
    ``internal`` (the runtime itself failed: a bug; Retry continues from the run's last save)."""

    kind: Literal["model", "max_turns", "tool", "internal"]
    message: str


class RunState(_Model):
    """Everything needed to continue a run in any process. See the module docstring for the JSON shape."""

    schema_version: Literal[6] = SCHEMA_VERSION
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
    require_tool_approval: bool = False  # every tool call but questions waits for approval in this run
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    def to_json(self) -> str:
        """Serialize for storage (compact JSON)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> RunState:
        """Parse stored JSON of any released version (older ones are upgraded, see :data:`MIGRATIONS`).

        Raises :class:`bot.errors.UnknownSchemaVersion` for a version this release does not know (e.g. written
        by a newer release) and :class:`bot.errors.StoreCorrupt` for anything else unreadable.
        """
        try:
            raw = json.loads(data)
        except ValueError:
            raise StoreCorrupt("the record is not JSON") from None
        if not isinstance(raw, dict):
            raise StoreCorrupt("the record is not a JSON object")
        version = raw.get("schema_version")
        while version != SCHEMA_VERSION:
            upgrade = MIGRATIONS.get(version) if isinstance(version, int) else None
            if upgrade is None:
                raise UnknownSchemaVersion(version)
            raw = upgrade(raw)
            version = raw.get("schema_version")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise StoreCorrupt(
                f"the record does not fit schema version {SCHEMA_VERSION} ({exc.error_count()} problems)"
            ) from None

    @property
    def asks_live(self) -> bool:
        """Whether a tool call's question asked live (:mod:`bot.agent._loop.live_questions`) waits for an answer:
        the run is ``running`` but waits for a person, as a suspended one (answered, the call works on)."""
        pending = self.pending
        return pending is not None and pending.live_owner is not None and pending.resume is None

    def waiting_call(self, tool_call_id: str | None) -> PendingCall | None:
        """The pending call whose id is ``tool_call_id``: the run's pending call, or one of its ``batch`` (decided
        or not); None when neither is."""
        if self.pending is None or tool_call_id is None:
            return None
        return next((c for c in self.pending.calls() if c.tool_call_id == tool_call_id), None)

    def last_text(self) -> str:
        """The text of the run's last assistant message that has any (its reply, once it completed); ``""``."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant" and message.get("content"):
                return str(message["content"])
        return ""

    def answer_for(self, tool_call_id: str | None) -> Answer | None:
        """The latest claimed answer for ``tool_call_id`` (or the latest of all when ``None``)."""
        for answer in reversed(self.answers):
            if tool_call_id is None or answer.tool_call_id == tool_call_id:
                return answer
        return None


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: new fields all have defaults (``expires_at``, ``ToolCall.extra``); only the number moves."""
    return {**raw, "schema_version": 2}


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3: the approval fields all have defaults (a pending call of version 2 is a question)."""
    return {**raw, "schema_version": 3}


def _v3_to_v4(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 3 -> 4: ``pending.live_owner`` defaults to none (every question of version 3 suspended its run)."""
    return {**raw, "schema_version": 4}


def _v4_to_v5(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 4 -> 5: ``pending.batch`` defaults to empty (one approval at a time), ``answers[].arguments`` and
    ``answers[].scope`` to none (approved as asked, once)."""
    return {**raw, "schema_version": 5}


def _v5_to_v6(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 5 -> 6: a new ``error.kind`` (``internal``) only; no record of version 5 has it."""
    return {**raw, "schema_version": 6}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
}
"""``{version: upgrade}``: each turns a record of that version into the next version's shape."""
