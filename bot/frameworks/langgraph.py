"""LangGraph graphs in Slack: :class:`LangGraphAgent` runs a compiled graph as the bot's agent
(``pip install -e '.[langgraph]'``; docs/frameworks/langgraph.md).

LangGraph's human-in-the-loop primitive: ``interrupt(payload)`` inside a node stops the graph (its state saved by
the checkpointer) and ``Command(resume=value)`` continues it from there, ``interrupt`` returning ``value``. Each
interrupt is asked in Slack as a question:

- a payload with the ``ask_user`` shape (``{"question": str, "options": [{"label", "description"?}, ...],
  "selection_mode": "single_select" | "multi_select"}``; :func:`ask_user` builds and asks one) is shown with
  buttons / checkboxes / a modal; the resume value is the answer: the label picked or the text typed (a string), or
  the labels ticked (a list of strings); any other keys are listed under the question;
- any other payload (a string is shown as it is; anything else as JSON) gets a free-text answer (a string).

Nobody answered by the deadline, or the question withdrawn: the graph is resumed with ``None``. Several
interrupts at once (parallel nodes) are asked one at a time and resumed together; the resume is always keyed by
interrupt id (``Command(resume={interrupt_id: value})``).

State: the graph's checkpoints live in Redis through :class:`~bot.frameworks.langgraph_checkpoint.RedisCheckpointSaver`
(plain Redis hashes: not ``langgraph-checkpoint-redis``, which needs Redis Stack modules), one LangGraph thread per
run (``thread_id`` = the run id); the run's framework record keeps the thread id. The graph's own checkpointer is
replaced by that one unless one is passed as ``checkpointer=``.

Input and reply: by default the graph gets ``{"messages": [...history, {"role": "user", "content": prompt}]}``
(the shape of LangGraph's ``MessagesState``) and the reply is the text of the last message of its final
``messages``; pass ``input_of(prompt, history)`` and ``reply_of(values)`` for other state shapes. Text a node sends
with LangGraph's stream writer (``get_stream_writer()("some text")``: ``stream_mode="custom"``) is streamed as it
comes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Command, interrupt
from redis.exceptions import RedisError

from bot.agent.ask_user import AskUserOption
from bot.agent.run_limits import RunLimits
from bot.agent.state import RunState
from bot.frameworks.base import Finished, FrameworkAgent, Outcome, Turn, Waiting
from bot.frameworks.langgraph_checkpoint import RedisCheckpointSaver
from bot.frameworks.record import Decision, FrameworkRecord, Request

log = logging.getLogger(__name__)

InputOf = Callable[[str, list[dict[str, str]]], Any]
ReplyOf = Callable[[dict[str, Any]], str]


def ask_user(
    question: str,
    options: list[str | AskUserOption | dict[str, Any]] | None = None,
    *,
    selection_mode: str | None = None,
) -> Any:
    """Ask a person ``question`` from inside a LangGraph node and return the answer (``interrupt`` with the
    ``ask_user`` payload). ``options``: labels, or ``{"label", "description"}`` items (none: a free-text answer);
    ``selection_mode``: ``single_select`` (default with options) or ``multi_select``. Returns a string (the label
    picked or the text typed), a list of strings (multi_select), or ``None`` when nobody answered in time."""
    payload: dict[str, Any] = {"question": question}
    if options:
        payload["options"] = [
            {"label": o}
            if isinstance(o, str)
            else o.model_dump(exclude_none=True)
            if isinstance(o, AskUserOption)
            else o
            for o in options
        ]
        payload["selection_mode"] = selection_mode or "single_select"
    return interrupt(payload)


def default_input(prompt: str, history: list[dict[str, str]]) -> dict[str, Any]:
    """``{"messages": [...history, {"role": "user", "content": prompt}]}``."""
    return {"messages": [*history, {"role": "user", "content": prompt}]}


def default_reply(values: dict[str, Any]) -> str:
    """The text of the last message of ``values["messages"]`` (a LangChain message or a dict); else the values as
    JSON."""
    messages = values.get("messages") if isinstance(values, dict) else None
    if messages:
        last = messages[-1]
        content = last.get("content") if isinstance(last, dict) else getattr(last, "content", None)
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(values, default=str)


class LangGraphAgent(FrameworkAgent):
    """A compiled LangGraph graph as the bot's agent. ``graph``: the compiled graph (``StateGraph(...).compile()``);
    ``checkpointer``: where its checkpoints go (default: :class:`RedisCheckpointSaver` on the run store's Redis, under
    its prefix, kept as long as a run record waiting on them: the store's retention plus the question's deadline,
    ``limits.ask_ttl``, following :meth:`with_limits`); ``input_of`` / ``reply_of``: see the module docstring;
    ``name``: default the graph's. The rest as :class:`~bot.frameworks.base.FrameworkAgent`."""

    framework = "langgraph"

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        *,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        input_of: InputOf = default_input,
        reply_of: ReplyOf = default_reply,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("id", graph.name or "langgraph")
        kwargs.setdefault("name", graph.name or "LangGraph graph")
        super().__init__(**kwargs)
        self.own_checkpoints: RedisCheckpointSaver | None = None
        if checkpointer is None:
            store: Any = self.store
            checkpointer = self.own_checkpoints = RedisCheckpointSaver(store.client, keys=store.keys)
            self._keep_checkpoints()
        self.checkpointer = checkpointer
        self.graph = graph.copy(update={"checkpointer": checkpointer})
        self.input_of = input_of
        self.reply_of = reply_of

    def with_limits(self, limits: RunLimits) -> LangGraphAgent:
        """:meth:`Agent.with_limits <bot.agent.Agent.with_limits>`; the default checkpointer's keys then live as
        long as a run record waiting on them does (a longer ``ask_ttl``: longer)."""
        super().with_limits(limits)
        self._keep_checkpoints()
        return self

    def _keep_checkpoints(self) -> None:
        """The default checkpointer's TTL (seconds after each write): the run store's retention plus the longest
        wait of a question (:meth:`RunLimits.kept_waiting <bot.agent.run_limits.RunLimits.kept_waiting>`): the
        store keeps a waiting run until its deadline plus its retention (:meth:`~bot.store.RedisRunStore.ttl_for`),
        and an answer in that time must find the graph where it stopped. None (forever) for a store without a
        retention."""
        if self.own_checkpoints is None:
            return
        retention = getattr(self.store, "retention", None)
        self.own_checkpoints.ttl = None if retention is None else self.limits.kept_waiting(retention)

    async def keep_waiting(self, record: FrameworkRecord, state: RunState) -> None:
        """The default checkpointer's keys live again from now (:meth:`RedisCheckpointSaver.touch`): interrupts
        asked one after another write nothing to the graph until the last is answered, and the graph must still be
        there then. A Redis error is logged: the keys keep the TTL of their last write."""
        if self.own_checkpoints is None:
            return
        try:
            await self.own_checkpoints.touch(_thread_of(record, state))
        except RedisError as exc:
            log.warning("run %s: could not renew its graph's checkpoints: %s", state.run_id, type(exc).__name__)

    async def run_framework(self, turn: Turn) -> Outcome:
        record = turn.record
        thread_id = _thread_of(record, turn.state)
        config: Any = {"configurable": {"thread_id": thread_id}}
        if record is not None and record.requests and await self.checkpointer.aget_tuple(config) is None:
            # resumed with nothing to resume: LangGraph would run the graph again from its start and ask again
            raise CheckpointGone(
                f"the graph's checkpoint of thread {thread_id} is gone (expired or deleted): the answer can't continue"
                " it where it stopped"
            )
        start = self.input_of(turn.prompt, turn.history) if record is None else resume_command(record)
        async for mode, chunk in self.graph.astream(start, config, stream_mode=["updates", "custom"]):
            if mode == "custom":
                text = chunk if isinstance(chunk, str) else chunk.get("text") if isinstance(chunk, dict) else None
                if isinstance(text, str):
                    turn.text(text)
        snapshot = await self.graph.aget_state(config)
        if snapshot.interrupts:
            return Waiting(requests=[request_of(i.id, i.value) for i in snapshot.interrupts], state=thread_id)
        return Finished(text=self.reply_of(snapshot.values), state=thread_id)


def _thread_of(record: FrameworkRecord | None, state: RunState) -> str:
    """The LangGraph thread of a run: kept in its record, else (its first run) the run's id."""
    return str(record.state) if record is not None and record.state else state.run_id


class CheckpointGone(RuntimeError):
    """A run waiting on a graph's interrupts was answered, and the graph's checkpoint is no longer there (see
    :meth:`LangGraphAgent.run_framework`): the run fails rather than run the graph again from its start."""


def request_of(interrupt_id: str, value: Any) -> Request:
    """The question of one interrupt: its payload as the question when it has the ``ask_user`` shape, else shown as
    text (a string) or JSON. The payload is any value the graph gave ``interrupt``; what is kept of it in the run's
    record is its JSON (keys as strings, a value JSON has no type for as its ``str``; one JSON can't hold, e.g. a
    tuple key, as its ``repr``): the graph keeps the payload itself in its checkpoint."""
    value = _as_json(value)
    question: dict[str, Any] | None = None
    if isinstance(value, dict) and isinstance(value.get("question"), str):
        question = value
    elif isinstance(value, str):
        question = {"question": value}
    args = value if isinstance(value, dict) else {"value": value}
    return Request(tool_call_id=interrupt_id, kind="question", tool_name="interrupt", args=args, question=question)


def _as_json(value: Any) -> Any:
    """``value`` as JSON reads it back (see :func:`request_of`)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):  # a key JSON has no form for (a tuple...), a circular value
        return repr(value)


def resume_value(decision: Decision) -> Any:
    """What ``interrupt`` returns for ``decision``: the answer (a string or a list of strings), ``None`` when nobody
    answered in time or the question was withdrawn."""
    return decision.answer if decision.outcome == "answer" else None


def resume_command(record: FrameworkRecord) -> Command[Any]:
    """``Command(resume={interrupt_id: value})`` for ``record``'s decisions (keyed by interrupt id even for one: a
    bare ``Command(resume=None)`` is not a resume to LangGraph)."""
    return Command(resume={d.tool_call_id: resume_value(d) for d in record.decisions})
