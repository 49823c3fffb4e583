"""What a framework's run waits on, kept inside our stored run: :class:`FrameworkRecord`, versioned.

It lives in ``RunState.metadata["framework"]`` (so :class:`~bot.agent.state.RunState`'s own schema does not move),
is saved with every save of the run (the claim that takes an answer is the run's compare-and-set, so every rule of
exactly-once resume holds for it), and JSON round-trips exactly. Shape (``schema_version`` 1)::

    {"schema_version": 1, "framework": "pydantic-ai" | "openai-agents" | "langgraph",
     "state": <the framework's own serialised state: Pydantic AI's message history (ModelMessagesTypeAdapter
               JSON), the Agents SDK's RunState JSON (RunState.to_json()), LangGraph's thread id>,
     "requests": [{tool_call_id, kind: "approval" | "question", tool_name, args, description, question,
                  parameters}, ...],
     "decisions": [{tool_call_id, kind, approved, answer, reason, answered_by, outcome, args, note}, ...]}

(``parameters`` and ``note`` came later in version 1, optional: a record without them reads as before.)

``requests`` are everything the framework's last run stopped on (several at once: Pydantic AI and the Agents SDK
can stop on more than one tool call); the run asks them one at a time, and the framework runs again once each has
its decision. A decision's ``outcome`` is the answer's (:data:`bot.agent.state.AnswerOutcome`): ``answer``,
``no_answer`` (the deadline passed) or ``cancelled``.

Every released version has a frozen fixture under ``tests/fixtures/frameworks/``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.agent.state import AnswerOutcome, ResumeData, RunState
from bot.errors import StoreCorrupt, UnknownSchemaVersion

KEY = "framework"
"""``RunState.metadata`` key of the record."""

Framework = Literal["pydantic-ai", "openai-agents", "langgraph"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Request(_Model):
    """One thing a framework's run stopped on: a tool call that waits for ``approval`` (``tool_name``, ``args``,
    ``description``; ``parameters``: the JSON schema of its arguments when the framework runs a call with edited
    ones, else None: no Edit in Slack), or a ``question`` (``question``: the ``ask_user`` shape,
    :class:`bot.agent.AskUserPayload`'s JSON) whose answer goes back as the call's result (LangGraph: as the
    interrupt's resume value)."""

    tool_call_id: str
    kind: Literal["approval", "question"]
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    question: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None  # the JSON schema of the tool's arguments, where edits are taken


class Decision(_Model):
    """A person's (or the approval policy's) decision on one :class:`Request`: ``approved`` (approvals), ``answer``
    (questions), ``reason`` (why declined), ``args`` (edited arguments of an approved call, where a framework takes
    them), ``note`` (what the model is told of an edit: who changed the arguments, before and after,
    :func:`bot.agent.approvals.edit_note`), ``answered_by`` (e.g. a Slack user id), ``outcome``."""

    tool_call_id: str
    kind: Literal["approval", "question"]
    approved: bool | None = None
    answer: ResumeData | None = None
    reason: str | None = None
    answered_by: str | None = None
    outcome: AnswerOutcome = "answer"
    args: dict[str, Any] | None = None
    note: str | None = None  # what the model is told of the decision besides (an edit: who changed what)


class FrameworkRecord(_Model):
    """The framework's serialised state and what its run waits on (see the module docstring)."""

    schema_version: Literal[1] = 1
    framework: Framework
    state: Any = None
    requests: list[Request] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)

    @classmethod
    def of(cls, state: RunState) -> FrameworkRecord | None:
        """The record stored in ``state`` (None: the framework has not run yet). Raises
        :class:`~bot.errors.UnknownSchemaVersion` (a newer release's record) or :class:`~bot.errors.StoreCorrupt`."""
        raw = state.metadata.get(KEY)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise StoreCorrupt("the framework record is not a JSON object")
        if raw.get("schema_version") != 1:
            raise UnknownSchemaVersion(raw.get("schema_version"))
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise StoreCorrupt(f"the framework record does not fit its schema ({exc.error_count()} problems)") from None

    def put(self, state: RunState) -> None:
        """Store this record in ``state`` (saved with the run's next save)."""
        state.metadata[KEY] = self.model_dump(mode="json")

    def decision(self, tool_call_id: str) -> Decision | None:
        """The decision on request ``tool_call_id``, if any."""
        return next((d for d in self.decisions if d.tool_call_id == tool_call_id), None)

    def undecided(self) -> list[Request]:
        """The requests that wait for a decision, in order."""
        return [r for r in self.requests if self.decision(r.tool_call_id) is None]
