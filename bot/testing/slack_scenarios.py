"""Helpers for end-to-end tests of the bot through the fake Slack (``bot.fakeslack.Workspace``).

``h`` is a test harness with ``ws`` (the Workspace), ``model`` (``FakeOpenAI``), ``bot`` (the bot under test) and
``settle()`` (waits for the bot's background work); see ``tests/mcp_server/conftest.py``.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import redis.asyncio as aioredis

from bot.agent.state import PendingCall, RunState, utcnow
from bot.fakeslack.home_tab import open_home
from bot.fakeslack.sender import block_actions_payload
from bot.fakeslack.state import TEAM_ID
from bot.store import Keys
from bot.store.conversations import ConversationIndex
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

ALICE, BOB, CAROL = "U_ALICE", "U_BOB", "U_CAROL"
GENERAL, RANDOM = "C_GENERAL", "C_RANDOM"
SINGLE = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
MULTI = {
    "question": "What next?",
    "selection_mode": "multi_select",
    "options": [{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Refactor"}],
}
FREE = {"question": "What is the goal?"}
ANSWER_FORM = "ask_answer_modal"


def has_controls(message: dict[str, Any]) -> bool:
    """Whether a message still shows buttons, menus or checkboxes."""
    return any(b["type"] == "actions" for b in message.get("blocks", []))


def is_choice_block(block: dict[str, Any]) -> bool:
    """An actions block of a question's answers (not its Cancel / Decline row)."""
    return block["type"] == "actions" and not str(block.get("block_id", "")).endswith("|more")


def is_answer_form(view: dict[str, Any]) -> bool:
    """The answer modal's form (it opens as a loading modal first)."""
    return view.get("callback_id") == ANSWER_FORM


def resumed_requests(model: FakeOpenAI) -> int:
    """Model requests that carried a tool result last (a resumed run's turns)."""
    return sum(1 for r in model.requests if r["messages"][-1]["role"] == "tool")


async def ask(
    h: Any, args: dict[str, Any] = SINGLE, *, user: str = ALICE, then: str | Reply = "Done.", call_id: str = "c1"
) -> tuple[str, dict[str, Any]]:
    """Mention the bot, have the model ask ``args``, and return (thread_ts, the question message)."""
    h.model.script(
        Reply(tool_calls=[tool_call("ask_user", args, id=call_id)]),
        then if isinstance(then, Reply) else Reply(text=then),
    )
    d = await h.ws.mention(user, GENERAL, "go")
    q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], q


async def open_homes(h: Any, *people: str) -> None:
    """Each of ``people`` opens the app's Home tab (``app_home_opened``), settled: the bot publishes a refresh only
    to a Home opened lately (:data:`bot.slack.home.WATCHED`)."""
    for person in people:
        await open_home(h.ws, person)
    await h.settle()


async def current(h: Any, message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as it is now (after the bot's background work settled)."""
    await h.settle()
    return next(
        m for m in h.ws.messages(message["channel"], thread_ts=message.get("thread_ts")) if m["ts"] == message["ts"]
    )


async def thread_run_id(h: Any, thread_ts: str, *, channel: str = GENERAL) -> str:
    """The run id the thread points at."""
    raw = await h.bot.agent.store.client.hget(
        Keys(h.settings.redis_prefix).thread(TEAM_ID, channel_id=channel, thread_ts=thread_ts), "run_id"
    )
    assert raw is not None, "the thread has no run"
    return str(raw.decode() if isinstance(raw, bytes) else raw)


async def past_deadline(
    h: Any, thread_ts: str, *, call: str | None = None, ago: timedelta = timedelta(seconds=1)
) -> RunState:
    """Move the thread's open question past its deadline (as the clock would after ASK_TTL_SECONDS): a batch of
    approvals, every call of it, or only ``call`` (a tool_call_id); the deadline is then ``ago`` before now."""
    state = await h.bot.agent.get_run(await thread_run_id(h, thread_ts))
    assert state.pending is not None
    then = utcnow() - ago

    def moved(c: PendingCall) -> PendingCall:
        return c.model_copy(update={"expires_at": then}) if call in (None, c.tool_call_id) else c

    late = moved(state.pending).model_copy(update={"batch": [moved(c) for c in state.pending.batch]})
    saved: RunState = await h.bot.agent.store.save(state.model_copy(update={"pending": late}), owner="test")
    return saved


def blocks_text(message: dict[str, Any]) -> str:
    """A message's blocks as JSON text (to look for words in)."""
    return json.dumps(message.get("blocks", []))


def button(q: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The ``index``-th button of a question message, as a block_actions ``action``."""
    found = [(b, e) for b in q["blocks"] if b["type"] == "actions" for e in b["elements"] if e["type"] == "button"]
    block, element = found[index]
    return {
        "type": "button",
        "action_id": element["action_id"],
        "block_id": block["block_id"],
        "text": element["text"],
        "value": element.get("value", ""),
        "action_ts": f"{time.time():.6f}",
    }


def action_payload(
    h: Any,
    q: dict[str, Any],
    action: dict[str, Any],
    *,
    user: str = ALICE,
    state_values: dict[str, Any] | None = None,
    is_ephemeral: bool = False,
) -> dict[str, Any]:
    """A signed-ready ``block_actions`` payload for ``action`` on message ``q`` (as the fake Slack would send)."""
    message = {k: v for k, v in q.items() if k != "channel"}
    return block_actions_payload(
        directory=h.ws.state.directory,
        user=user,
        channel=q["channel"],
        message=message,
        is_ephemeral=is_ephemeral,
        actions=[action],
        state_values=state_values or {},
        trigger_id=h.ws.state.mint_trigger(user),
        response_url="http://127.0.0.1:9/response",
    )


def text_is(text: str) -> Any:
    """A ``wait_for_message`` predicate: the message's text is ``text``."""
    return lambda m: m["text"] == text


def tracebacks(caplog: Any) -> list[str]:
    """Log records (of pytest's ``caplog``) that carry an exception: what Bolt logs when a listener raises. Left out:
    an HTTP client of an earlier test, garbage-collected now, whose ``aclose`` task found its own event loop closed
    (asyncio's "Task exception was never retrieved" for ``AsyncClient.aclose``: nothing of this test's)."""
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info and not _stray_client_close(r)]


def _stray_client_close(record: Any) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return (
        record.name == "asyncio"
        and "AsyncClient.aclose()" in record.getMessage()
        and isinstance(exc, RuntimeError)
        and str(exc) == "Event loop is closed"
    )


def assert_tool_messages_complete(model: FakeOpenAI) -> None:
    """Chat Completions: before every request, every tool_call_id has exactly one tool message."""
    for body in model.requests:
        msgs = body["messages"]
        wanted = [c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        got = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
        assert sorted(wanted) == sorted(got), (wanted, got)


NOT_KEPT_WAITING = frozenset({"event", "active", "home_watched", "home_render"})
"""Key kinds (:class:`~bot.store.keys.Keys`, the first part of a name) no waiting question needs: the dedupe of
events and request signatures, run slots, whose Home a refresh reaches and its last render."""


async def kept_shorter(client: aioredis.Redis, prefix: str, *, than: int) -> dict[str, int]:
    """Every key under ``prefix`` (named without it) that expires in less than ``than`` seconds (less a minute's
    slack), with its TTL, but those of :data:`NOT_KEPT_WAITING` kinds."""
    short: dict[str, int] = {}
    async for key in client.scan_iter(match=f"{prefix}*"):
        name = key.decode() if isinstance(key, bytes) else str(key)
        ttl = int(await client.ttl(name))
        if ttl != -1 and ttl < than - 60 and name.removeprefix(prefix).split(":")[0] not in NOT_KEPT_WAITING:
            short[name.removeprefix(prefix)] = ttl
    return short


async def thread_run(client: aioredis.Redis, prefix: str, thread: str) -> RunState:
    """The stored run a thread points at (read straight from Redis)."""
    keys = [k async for k in client.scan_iter(match=f"{prefix}thread:*{thread}")]
    assert len(keys) == 1, keys
    pointer: Any = await client.hget(keys[0], "run_id")
    run_id = pointer.decode() if isinstance(pointer, bytes) else str(pointer)
    raw = await client.hget(Keys(prefix).run(run_id), "state")
    assert raw is not None
    return RunState.from_json(raw)


async def leave_orphaned(client: aioredis.Redis, key: str, orphan: RunState) -> None:
    """Write ``orphan`` (status ``running``) at the run hash ``key`` (``Keys.run(run_id)``) as a process killed mid-run
    leaves it: the fields the store's compare-and-set writes for a running save (bot/store/redis_store.py), saved by
    a process that is gone, with no lease."""
    await client.hset(
        key,
        mapping={"rev": str(orphan.revision), "state": orphan.to_json(), "owner": "a-process-that-died"},
    )


async def still_open(h: Any, q: dict[str, Any]) -> bool:
    """Whether question message ``q`` still shows its controls, once the bot's work settled."""
    await h.settle()
    current = next(m for m in h.ws.messages(q["channel"], thread_ts=q["thread_ts"]) if m["ts"] == q["ts"])
    return has_controls(current)


def tool_results(model: FakeOpenAI) -> list[dict[str, Any]]:
    """Every tool message of the last model request, parsed when JSON."""
    out = []
    for m in model.requests[-1]["messages"]:
        if m["role"] == "tool":
            try:
                out.append(json.loads(m["content"]))
            except ValueError:
                out.append({"raw": m["content"]})
    return out


def mrkdwn_texts(node: Any) -> list[str]:
    """Every mrkdwn text object's text in ``node`` (blocks), where Slack parses <!channel>, links and mentions."""
    if isinstance(node, list):
        return [t for item in node for t in mrkdwn_texts(item)]
    if not isinstance(node, dict):
        return []
    own = [str(node["text"])] if node.get("type") == "mrkdwn" and "text" in node else []
    return own + [t for v in node.values() if isinstance(v, (dict, list)) for t in mrkdwn_texts(v)]


def texts_in(h: Any, thread: str, *, channel: str = GENERAL) -> list[str]:
    """The text of every message in ``thread`` of ``channel``, in order (the thread's first message first)."""
    return [m["text"] for m in h.ws.messages(channel, thread_ts=thread)]


def index_of(h: Any) -> ConversationIndex:
    """The ConversationIndex wired into the first bot process (reached through its lazy listeners' objects)."""
    for fn in h.bot.jobs.functions.values():
        owner = getattr(fn, "__self__", None)
        index = getattr(owner, "index", None) or getattr(getattr(owner, "answering", None), "index", None)
        if isinstance(index, ConversationIndex):
            return index
    raise AssertionError("no ConversationIndex found")
