"""``python -m bot mcp`` end to end: the official SDK's client starts it over stdio, asks through it, and the question
is answered in the fake Slack by a ``serve`` process on the same Redis (the real one: the MCP server is another
process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from bot.agent.state import utcnow
from bot.fakeslack import Workspace
from bot.fakeslack.home_tab import home_view
from bot.fakeslack.workspace import DEFAULT_SUBSCRIPTIONS
from bot.mcp_server.server import RESTARTING
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS
from bot.slack.refs import QuestionRef
from bot.slack.render.blocks import MAX_SELECT_OPTIONS
from bot.store import Keys
from bot.testing.mcp_process import McpProcess, mcp_http_process
from bot.testing.ports import free_port
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, current, has_controls, open_homes
from bot.testing.tcp_proxy import TcpProxy
from tests.mcp_server.mcp_support import STARTUP_SECONDS, bearer_client

# Subprocess-heavy: on the cluster too only where marked (see tests/conftest.py).
pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}  # REDIS_URL and REDIS_CLUSTER of this test's real Redis (set by the fixture below)


TOKEN = "xoxb-test-token-0123456789"  # the harness's (tests/mcp_server/conftest.py)


def mcp_env(h: Any, prefix: str, *, user: str | None = ALICE) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "LOG_LEVEL": "WARNING",
    }
    return {**env, "MCP_ASK_USER": user} if user else env


@contextlib.asynccontextmanager
async def mcp_session(
    h: Any, prefix: str, *, user: str | None = ALICE, extra: dict[str, str] | None = None
) -> AsyncIterator[Any]:
    env = {**mcp_env(h, prefix, user=user), **(extra or {})}
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=env)
    async with stdio_client(params) as streams, Client(contextlib.nullcontext(streams), mode="auto") as client:
        yield client.session


def questions(h: Any) -> set[str]:
    """The ts of every message in the channel (threads included) that shows a question's controls."""
    return {m["ts"] for m in h.ws.messages(GENERAL) if has_controls(m)}


@pytest.mark.redis_kinds("single", "cluster")
async def test_an_mcp_client_asks_and_gets_the_answer_with_who_gave_it(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        listed = await session.list_tools()
        assert sorted(t.name for t in listed.tools) == ["approve_tool_use", "ask_user", "request_approval"]
        for described in listed.tools:  # what a client's model reads: no source indentation, no developer refs
            text = json.dumps([described.description, described.input_schema])
            assert "  " not in (described.description or "") and ":mod:" not in text, described
        progress: list[float] = []
        told = asyncio.Event()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(done)
            told.set()

        args = {
            "question": "Which repo?",
            "options": [{"label": "api"}, {"label": "web", "description": "the site"}],
            "context": "working in acme/monorepo",
        }
        call = asyncio.ensure_future(session.call_tool("ask_user", args, progress_callback=on_progress))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == question["thread_ts"])
        assert "acme/monorepo" in root["text"] and f"<@{ALICE}>" in root["text"]
        # The client asked for progress (a token): told at once that the call waits, before anyone answers (a
        # click before the server's wait began would end the call with nothing to tell, so the click waits here).
        await asyncio.wait_for(told.wait(), STARTUP_SECONDS)
        await h.ws.click(question, "web", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert not result.is_error
        assert result.structured_content == {"status": "answered", "answer": "web", "answered_by": ALICE}
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=question["thread_ts"], predicate=lambda m: "recorded for the agent" in m["text"]
        )
        assert h.model.requests == []  # the serve process that took the answer ran no model turn


async def withdrawn_shown(h: Any, question: dict[str, Any]) -> dict[str, Any]:
    """``question``'s message once it says it was withdrawn."""
    return await h.ws.wait_for_message(
        channel=GENERAL,
        predicate=lambda m: m["ts"] == question["ts"] and "Withdrawn" in str(m["blocks"]),
        timeout=STARTUP_SECONDS,
    )


async def kept_and_picked_up(h: Any, session: Any, question: dict[str, Any], args: dict[str, Any]) -> None:
    """``question`` stays open (its buttons live, not withdrawn), and the same call again with its ``request_key``
    gets Alice's answer, "yes"."""
    await asyncio.sleep(2)  # as long as a withdrawal would take to show
    await h.settle()
    shown = h.ws.fake.state.message(GENERAL, question["ts"])
    assert has_controls(shown) and "Withdrawn" not in str(shown["blocks"]), shown["blocks"]
    again = asyncio.ensure_future(session.call_tool("ask_user", args))
    await asyncio.sleep(1)
    await h.ws.click(question, "yes", user=ALICE)
    result = await asyncio.wait_for(again, STARTUP_SECONDS)
    assert result.structured_content == {"status": "answered", "answer": "yes", "answered_by": ALICE}


async def test_a_client_that_cancels_its_call_withdraws_the_question(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Ship it?", "request_key": "k-1"}))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        call.cancel()  # the SDK sends notifications/cancelled
        with contextlib.suppress(BaseException):
            await call
        withdrawn = await withdrawn_shown(h, question)
        assert not has_controls(withdrawn)
        again = await session.call_tool("ask_user", {"question": "Ship it?", "request_key": "k-1"})
        assert again.structured_content is not None and again.structured_content["status"] == "cancelled"


async def test_a_client_whose_own_request_timeout_fires_keeps_the_question_for_its_request_key(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """The SDKs send ``notifications/cancelled`` when their request timeout fires too (reason "timed out after
    ...", or MCP's -32001): that is not a withdrawal. The question keeps its buttons, and the same call with the same
    ``request_key`` gets the answer (docs/mcp-server.md). Before: withdrawn, and the call again said "cancelled".
    Found by a break-it review."""
    args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}], "request_key": "k-timeout"}
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        await session.list_tools()  # the server is up: the timeout below is the call's alone
        first = asyncio.ensure_future(session.call_tool("ask_user", args, read_timeout_seconds=3))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        with contextlib.suppress(Exception):
            await first  # the client's own timeout: an MCPError for the caller
        assert first.done() and first.exception() is not None
        await kept_and_picked_up(h, session, question, args)


async def test_a_question_without_a_request_key_is_withdrawn_when_its_client_stops_waiting(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """Found by a break-it review: a call without a ``request_key`` whose client's own timeout fired. Nothing can
    ask for its answer again, so the question is withdrawn (before: kept open, taking an answer nobody could get
    while Slack said the agent would get it "when it asks again")."""
    args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}]}
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        await session.list_tools()
        first = asyncio.ensure_future(session.call_tool("ask_user", args, read_timeout_seconds=3))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        with contextlib.suppress(Exception):
            await first
        withdrawn = await withdrawn_shown(h, question)
        assert not has_controls(withdrawn)


@pytest.mark.parametrize(("key", "withdrawn"), [(None, True), ("k-stdio", False)])
async def test_over_stdio_a_client_that_goes_away_withdraws_a_keyless_question_and_keeps_a_keyed_one(
    real_redis: aioredis.Redis, harness: Any, prefix: str, key: str | None, withdrawn: bool
) -> None:
    """Found by a break-it review: the stdio client exits (its stdin closes) while a call waits. Without a
    ``request_key`` nothing can collect the answer, so the question is withdrawn (before: kept open, its buttons
    live); with one it stays for the same call, from a client started again."""
    args = {
        "question": "Ship it?",
        "options": [{"label": "yes"}, {"label": "no"}],
        **({"request_key": key} if key else {}),
    }
    async with harness(real_redis) as h:
        with contextlib.suppress(BaseException):  # the session ends while its call waits
            async with mcp_session(h, prefix) as session:
                call = asyncio.ensure_future(session.call_tool("ask_user", args))
                question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        call.cancel()
        if withdrawn:
            assert not has_controls(await withdrawn_shown(h, question))
            return
        await asyncio.sleep(2)  # as long as a withdrawal would take to show
        shown = h.ws.fake.state.message(GENERAL, question["ts"])
        assert has_controls(shown) and "Withdrawn" not in str(shown["blocks"]), shown["blocks"]


@pytest.mark.parametrize(("key", "withdrawn"), [(None, True), ("k-closed", False)])
async def test_over_http_a_call_whose_stream_the_client_closes_withdraws_a_keyless_question_and_keeps_a_keyed_one(
    real_redis: aioredis.Redis, harness: Any, prefix: str, key: str | None, withdrawn: bool
) -> None:
    """On the newer HTTP wire the SDK's client cancels a call by closing its stream, with no notification; its
    request timeout and a dead client look the same. Without a ``request_key`` the question is withdrawn (found by a
    break-it review: before, it stayed open, its buttons live, holding a place of the caller's waiting limit); with
    one it stays for the same call again, which gets the answer."""
    args = {
        "question": "Ship it?",
        "options": [{"label": "yes"}, {"label": "no"}],
        **({"request_key": key} if key else {}),
    }
    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server, http_session(server.url) as session:
        call = asyncio.ensure_future(session.call_tool("ask_user", args))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        call.cancel()  # the stream of the call closed
        with contextlib.suppress(BaseException):
            await call
        if withdrawn:
            shown = await withdrawn_shown(h, question)
            assert not has_controls(shown)
            return
        await kept_and_picked_up(h, session, question, args)


async def test_a_call_without_anyone_to_ask_is_a_clear_tool_error(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        result = await session.call_tool("ask_user", {"question": "Hm?", "channel": "not a channel"})
        assert result.is_error and "no channel to ask in" in result.content[0].text
        malformed = {"question": "Pick some", "selection_mode": "multi_select"}  # several choices need options
        result = await session.call_tool("ask_user", malformed)
        assert result.is_error and "the question was not asked" in result.content[0].text
        nobody = {"question": "x", "user": "U0NOBODY1"}  # shaped as a user id, but Slack has no such user
        result = await asyncio.wait_for(session.call_tool("ask_user", nobody), STARTUP_SECONDS)  # before: waited
        assert result.is_error and "U0NOBODY1 is not a user of this workspace" in result.content[0].text
        bot_asked = await session.call_tool("ask_user", {"question": "x", "user": "U_BOT"})  # a bot never answers
        assert bot_asked.is_error and "or a bot" in bot_asked.content[0].text
        assert h.ws.messages(GENERAL) == []  # refused before anything was posted (before: asked, waited 24 h)


MCP_TOKEN = "mcp-test-token-0123456789abcdef"


@contextlib.asynccontextmanager
async def mcp_http_server(h: Any, prefix: str, *, host: str | None = None) -> AsyncIterator[McpProcess]:
    """``python -m bot mcp --http`` as its own process, once it listens (on ``MCP_HOST=host`` when given), on a
    port it picks itself (:func:`bot.testing.mcp_process.mcp_http_process`)."""
    env = {**mcp_env(h, prefix), "MCP_TOKEN": MCP_TOKEN, **({"MCP_HOST": host} if host else {})}
    async with mcp_http_process(env, startup=STARTUP_SECONDS) as server:
        yield server
    logged = "".join(server.lines)
    assert MCP_TOKEN not in logged and TOKEN not in logged  # never logged


@contextlib.asynccontextmanager
async def http_session(url: str) -> AsyncIterator[Any]:
    """The SDK's client over streamable HTTP to ``url``, with the test's bearer token."""
    async with bearer_client(url, MCP_TOKEN) as client:
        yield client.session


async def test_over_http_a_request_without_the_right_token_is_refused(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server, aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": MCP_TOKEN}):
            async with http.post(server.url, json=initialize, headers=headers) as resp:
                assert resp.status == 401 and MCP_TOKEN not in await resp.text()
        for scheme in ("bearer", "BEARER"):  # the scheme in any case (RFC 7235)
            async with http.post(server.url, json=initialize, headers={"Authorization": f"{scheme} {MCP_TOKEN}"}) as r:
                assert r.status != 401


async def test_over_http_a_request_body_over_the_bound_is_refused_with_413(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A body over MAX_BODY is refused with 413 and a JSON-RPC error naming the bound, whether it says its length
    or comes chunked; the server goes on serving."""
    from bot.mcp_server.http import MAX_BODY

    auth = {"Authorization": f"Bearer {MCP_TOKEN}", "Content-Type": "application/json"}
    call = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "'
    too_big = call + b"x" * MAX_BODY + b'"}}'

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(too_big), 65536):
            yield too_big[start : start + 65536]

    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server, aiohttp.ClientSession() as http:
        for body in (too_big, chunked()):
            async with http.post(server.url, data=body, headers=auth) as resp:
                assert resp.status == 413
                refused = await resp.json()
            assert refused["error"]["code"] == -32600 and f"{MAX_BODY:,} bytes" in refused["error"]["message"]
        async with http_session(server.url) as session:  # and it serves on
            assert "ask_user" in [t.name for t in (await session.list_tools()).tools]


async def test_over_http_the_server_listens_on_loopback_unless_mcp_host_says_otherwise(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """It listened on every interface with no setting. On Linux all of 127/8 is loopback: a server on 0.0.0.0
    answers on 127.0.0.2 as well, one on 127.0.0.1 does not."""
    async with harness(real_redis) as h:
        async with mcp_http_server(h, prefix) as server:
            port = int(server.url.split(":")[2].split("/")[0])
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.2", port)
            async with http_session(server.url) as session:  # a real client, on loopback
                assert {t.name for t in (await session.list_tools()).tools} == {
                    "ask_user",
                    "request_approval",
                    "approve_tool_use",
                }
            # On loopback the SDK checks Host (DNS rebinding): a TLS proxy in front passes Host: 127.0.0.1:<port>
            # (nginx's default; Caddy: header_up Host {upstream_hostport}), as the README says.
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            auth = {"Authorization": f"Bearer {MCP_TOKEN}", "Accept": "application/json, text/event-stream"}
            async with aiohttp.ClientSession() as http:
                for host, refused in (("mcp.example.com", True), (f"127.0.0.1:{port}", False)):
                    async with http.post(server.url, json=initialize, headers={**auth, "Host": host}) as resp:
                        assert (resp.status == 421) is refused, (host, resp.status)
        async with mcp_http_server(h, prefix, host="127.0.0.2") as server, http_session(server.url) as session:
            assert {t.name for t in (await session.list_tools()).tools} == {
                "ask_user",
                "request_approval",
                "approve_tool_use",
            }


async def test_over_http_an_mcp_client_asks_and_gets_the_answer(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server:
        async with http_session(server.url) as session:
            args = {"question": "What should the release be called?"}
            call = asyncio.ensure_future(session.call_tool("ask_user", args))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            await h.ws.reply_in_thread(ALICE, GENERAL, question["thread_ts"], "Aurora")  # typed in the thread
            result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "Aurora", "answered_by": ALICE}


@pytest.mark.parametrize("how", ["picked", "typed"])
async def test_an_answer_typed_instead_of_picking_an_option_says_so(
    real_redis: aioredis.Redis, harness: Any, prefix: str, how: str
) -> None:
    """A reply in the thread answers a question with options in the person's own words; its result looked like a
    pick, so an agent comparing the answer with its labels got neither "yes" nor "no" without knowing why (its
    own model is told; a break-it pass). It says ``"typed": true``; a pick stays as it was."""
    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server:
        async with http_session(server.url) as session:
            args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}]}
            call = asyncio.ensure_future(session.call_tool("ask_user", args))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            if how == "typed":
                await h.ws.reply_in_thread(ALICE, GENERAL, question["thread_ts"], "Yes, but not before the freeze")
            else:
                await h.ws.click(question, "yes", user=ALICE)
            result = await asyncio.wait_for(call, 20)
        picked = {"status": "answered", "answer": "yes", "answered_by": ALICE}
        typed = {"status": "answered", "answer": "Yes, but not before the freeze", "answered_by": ALICE, "typed": True}
        assert result.structured_content == (typed if how == "typed" else picked)


async def test_a_server_restart_is_not_a_cancellation_and_the_same_key_waits_for_the_same_question(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """The question lives in Redis: the MCP server stops while a call waits (the question stays open), a new one
    starts, and the client's retry with the same request_key waits for that question; no second one is asked."""
    args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}], "request_key": "deploy-42"}
    async with harness(real_redis) as h:
        async with mcp_http_server(h, prefix) as server, http_session(server.url) as session:
            # The tools listed first, as an agent does: the SDK's client checks a result against its tool's output
            # schema and, when it has none yet, lists the tools for it: a request the stopping server no longer
            # takes (it stops listening at once), so the SDK's client failed the call with a ConnectError instead
            # of returning the server's answer (CI under load, mcp 2.0; about 1 run in 8 with 8 at once).
            await session.list_tools()
            call = asyncio.ensure_future(session.call_tool("ask_user", args))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            server.process.terminate()  # the server stops (SIGTERM) while the call waits
            first = await asyncio.wait_for(call, 10)  # told why, within the stop's grace (found by a break-it
            # review: before, cut short: "Server returned an error response", a traceback in the server's log)
            await asyncio.wait_for(server.process.wait(), 10)
        assert first.structured_content == {"status": "waiting", "note": RESTARTING}
        assert not [line for line in server.lines if "Traceback" in line or "Exception in ASGI" in line]
        current = next(m for m in h.ws.messages(GENERAL) if m["ts"] == question["ts"])
        assert has_controls(current)  # still open: nothing withdrew it
        async with mcp_http_server(h, prefix) as server, http_session(server.url) as session:
            again = asyncio.ensure_future(session.call_tool("ask_user", args))
            await asyncio.sleep(1.0)
            assert len(questions(h)) == 1  # no second question
            await h.ws.click(question, "yes", user=ALICE)
            result = await asyncio.wait_for(again, 20)
        assert result.structured_content == {"status": "answered", "answer": "yes", "answered_by": ALICE}


async def test_a_server_restart_withdraws_a_question_asked_without_a_request_key_and_says_so(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """Nothing can ask for a keyless question's answer after its call ends: a stopping server withdraws it and tells
    the client to ask again (before: the call was cut short with a bare error, the question left open)."""
    async with harness(real_redis) as h, mcp_http_server(h, prefix) as server, http_session(server.url) as session:
        call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Ship it?"}))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        server.process.terminate()
        result = await asyncio.wait_for(call, 10)
        await asyncio.wait_for(server.process.wait(), 10)
        assert result.is_error and "restarting: the question was withdrawn" in result.content[0].text
        current = next(m for m in h.ws.messages(GENERAL) if m["ts"] == question["ts"])
        assert not has_controls(current) and "Withdrawn" in str(current["blocks"])


async def test_a_question_for_nobody_in_particular_is_anyones_in_the_channel(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix, user=None) as session:
        call = asyncio.ensure_future(
            session.call_tool("ask_user", {"question": "Who is on call?", "options": [{"label": "me"}]})
        )
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert "Anyone in this channel can answer" in str(question["blocks"])
        await h.ws.click(question, "me", user=BOB)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "me", "answered_by": BOB}


async def test_past_the_deadline_the_call_gets_a_typed_no_answer(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """The question's deadline is the bot's (ASK_TTL_SECONDS, here the MCP server's: 1 s); whichever process
    carries it out (here the serve process's scheduler), the waiting call gets no_answer."""
    async with harness(real_redis) as h, mcp_session(h, prefix, extra={"ASK_TTL_SECONDS": "1"}) as session:
        call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Anyone?"}))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert h.bot.scheduler is not None
        for _ in range(100):  # the MCP server plans the deadline right after posting the question
            if await real_redis.zcard(Keys(prefix).due()):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.1)  # the deadline passes by Redis's clock too, which judges it
        assert await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=1)) >= 1  # the deadline (and Home)
        await h.settle()
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content is not None and result.structured_content["status"] == "no_answer"
        closed = next(m for m in h.ws.messages(GENERAL) if m["ts"] == question["ts"])
        assert not has_controls(closed) and "No answer in time" in str(closed["blocks"])


async def test_an_approval_request_is_approved_or_declined_with_a_reason(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        details = {"service": "api", "env": "production"}
        call = asyncio.ensure_future(
            session.call_tool("request_approval", {"action": "Restart the api service", "details": details})
        )
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert "Restart the api service" in str(request["blocks"])
        # named by its action, not by the hidden tool it is ("Approval needed to run request_approval")
        assert request["text"] == "Approval needed: Restart the api service"
        assert request["blocks"][0]["text"]["text"] == ":raised_hand: *Approval needed*: Restart the api service"
        assert "request_approval" not in str(request["blocks"])
        await h.ws.click(request, "Approve", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "approved", "approved_by": ALICE}

        call = asyncio.ensure_future(session.call_tool("request_approval", {"action": "Drop the cache"}))
        request = await h.ws.wait_for_message(
            channel=GENERAL,
            predicate=lambda m: has_controls(m) and "Drop the cache" in str(m["blocks"]),
            timeout=STARTUP_SECONDS,
        )
        await h.ws.click(request, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        assert form["blocks"][0]["text"]["text"] == "Decline: Drop the cache?"
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "not during the release"}}, user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {
            "status": "declined",
            "declined_by": ALICE,
            "reason": "not during the release",
        }
        assert h.model.requests == []  # nothing ran a model turn


APP_TOKEN = "xapp-1-A0PLAYGRND-mcp-socket-test"


async def test_over_socket_mode_the_mcp_server_takes_the_answer_itself(real_redis: aioredis.Redis, prefix: str) -> None:
    """One developer, no public URL, no other process: with SLACK_APP_TOKEN the MCP server connects over Socket
    Mode and the click reaches it (the fake Slack delivers interactions over the websocket)."""
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN, ack_timeout=5) as ws:
        env = {**mcp_env(SimpleNamespace(ws=ws), prefix), "SLACK_APP_TOKEN": APP_TOKEN}
        params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=env)
        async with stdio_client(params) as streams, Client(contextlib.nullcontext(streams), mode="auto") as client:
            await ws.fake.socket_mode.wait_connected(timeout=STARTUP_SECONDS)
            args = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
            call = asyncio.ensure_future(client.session.call_tool("ask_user", args))
            question = await ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            await ws.click(question, "api", user=ALICE)
            result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "api", "answered_by": ALICE}


async def test_progress_is_reported_all_through_a_long_wait(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix, extra={"MCP_PROGRESS_SECONDS": "0.5"}) as session:
        told: list[tuple[float, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            told.append((done, message))

        args = {"question": "Proceed?", "options": [{"label": "yes"}]}
        call = asyncio.ensure_future(session.call_tool("ask_user", args, progress_callback=on_progress))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await asyncio.sleep(2.2)
        await h.ws.click(question, "yes", user=ALICE)
        await asyncio.wait_for(call, 20)
        assert len(told) >= 4 and [d for d, _ in told] == sorted(d for d, _ in told)  # every 0.5 s, counting up
        # names, not Slack's <@U…> / <#C…> (a client is not Slack and shows them raw); looked up once each
        assert all(m == "waiting for @alice in #general" for _, m in told), told
        assert len(h.ws.calls("users.info")) == 1 and len(h.ws.calls("conversations.info")) == 1


async def test_progress_names_fall_back_to_the_id_where_slack_cant_say(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix, extra={"MCP_PROGRESS_SECONDS": "0.5"}) as session:
        h.ws.fake.refuse("users.info", "missing_scope")  # installed before users:read was asked for
        told: list[str | None] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            told.append(message)

        call = asyncio.ensure_future(
            session.call_tool("ask_user", {"question": "Proceed?"}, progress_callback=on_progress)
        )
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=20)
        await asyncio.sleep(1.2)
        await h.ws.reply_in_thread(ALICE, GENERAL, question["thread_ts"], "yes")
        await asyncio.wait_for(call, 20)
        assert told and all(m == f"waiting for @{ALICE} in #general" for m in told), told


@pytest.mark.redis_kinds("single", "cluster")
async def test_two_answers_racing_in_two_processes_give_the_call_one(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis, answerers="channel") as h, mcp_session(h, prefix) as session:
        second = await h.start_process(real_redis)
        first = h.processes[0]
        call = asyncio.ensure_future(
            session.call_tool("ask_user", {"question": "Pick", "options": [{"label": "a"}, {"label": "b"}]})
        )
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)

        async def click(process: Any, label: str, user: str) -> None:
            h.route_to(process)
            await h.ws.click(question, label, user=user)

        await asyncio.gather(click(first, "a", ALICE), click(second, "b", BOB))
        result = await asyncio.wait_for(call, 20)
        await h.settle()
        assert result.structured_content is not None
        winner = result.structured_content
        assert (winner["answer"], winner["answered_by"]) in (("a", ALICE), ("b", BOB))
        run_id = next(
            QuestionRef.from_block_id(b["block_id"])[0].run_id
            for b in question["blocks"]
            if "|" in b.get("block_id", "")
        )
        state = await h.bot.agent.get_run(run_id)
        assert len(state.answers) == 1  # exactly once: one answer claimed, the other click told it was taken


async def test_a_request_key_names_one_question_and_a_different_one_under_it_is_refused(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        call = asyncio.ensure_future(
            session.call_tool("request_approval", {"action": "Deploy to staging", "request_key": "deploy"})
        )
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.click(request, "Approve", user=ALICE)
        assert (await asyncio.wait_for(call, 20)).structured_content == {"status": "approved", "approved_by": ALICE}
        posted = len(h.ws.messages(GENERAL))
        for tool, args in (
            ("request_approval", {"action": "DROP DATABASE production", "request_key": "deploy"}),
            ("ask_user", {"question": "Deploy to staging", "request_key": "deploy"}),
            ("request_approval", {"action": "Deploy to staging", "request_key": "deploy", "user": BOB}),
        ):
            result = await session.call_tool(tool, args)
            assert result.is_error and "request_key names another question" in result.content[0].text
        assert len(h.ws.messages(GENERAL)) == posted  # nothing asked, nothing posted


async def test_too_many_options_are_refused_before_anything_is_posted(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        options = [{"label": f"option {i}"} for i in range(200)]
        result = await session.call_tool("ask_user", {"question": "Pick one", "options": options})
        assert result.is_error and "too many options (200; at most 100)" in result.content[0].text
        assert h.ws.messages(GENERAL) == []


async def test_a_store_outage_while_waiting_does_not_end_the_call(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with TcpProxy("127.0.0.1", 6379) as proxy, harness(real_redis) as h:
        extra = {"REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}  # only the MCP server's Redis goes away
        async with mcp_session(h, prefix, extra=extra) as session:
            call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Still there?"}))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            await asyncio.sleep(0.5)
            proxy.cut()
            await asyncio.sleep(3)
            assert not call.done()  # still waiting through the outage
            proxy.restore()
            await h.ws.reply_in_thread(ALICE, GENERAL, question["thread_ts"], "yes")
            result = await asyncio.wait_for(call, 30)
        assert result.structured_content == {"status": "answered", "answer": "yes", "answered_by": ALICE}


async def test_an_approval_requests_thread_holds_the_request_and_no_progress_line(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        call = asyncio.ensure_future(session.call_tool("request_approval", {"action": "Rotate the keys"}))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.click(request, "Approve", user=ALICE)
        await asyncio.wait_for(call, 20)
        await h.settle()
        thread = [m for m in h.ws.messages(GENERAL, thread_ts=request["thread_ts"]) if m["ts"] != request["thread_ts"]]
        assert [m["ts"] for m in thread] == [request["ts"], thread[-1]["ts"]], [m["text"] for m in thread]
        # the request, then the reply: no progress line of the hidden tool
        assert "Your decision is recorded for the agent" in thread[-1]["text"]  # not "answer" (new-user trial)
        closed = blocks_text(await current(h, request))  # nothing ran here: no "ran in 0.0 s"
        assert f"Approved by <@{ALICE}> \\u00b7 the agent that asked was told" in closed and "ran in" not in closed
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["thread_ts"])
        assert root["text"].endswith(f"asks <@{ALICE}> to approve (in the thread)"), root["text"]  # no dangling ":"


@pytest.mark.parametrize("user", [ALICE, None])
async def test_an_agents_question_names_the_agent_in_app_home_and_its_agent_session(
    real_redis: aioredis.Redis, harness: Any, prefix: str, user: str | None
) -> None:
    """Found by a new user's trial: App Home said "asked by @alice" of the question the agent asked Alice ("asked
    by <@>" for one asked of nobody in particular), and its thread's agent session had no title. Both name the
    client that asked (the SDK's client calls itself "mcp")."""
    events = (*DEFAULT_SUBSCRIPTIONS, "agent_session_stopped", "app_context_changed", "app_home_opened")
    async with harness(real_redis, agent_view=True, subscriptions=events) as h:
        await open_homes(h, ALICE)
        async with mcp_session(h, prefix, user=user) as session:
            args = {"question": "Ship  it\nnow?", "options": [{"label": "yes"}, {"label": "no"}]}
            call = asyncio.ensure_future(session.call_tool("ask_user", args))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            session_shown = h.ws.session(GENERAL, question["thread_ts"])
            assert session_shown is not None and session_shown["title"] == "mcp: Ship it now?"
            if user is not None:  # in her inbox (a question for nobody in particular is in nobody's)
                assert h.bot.scheduler is not None
                home = None
                for _ in range(100):  # her Home's refresh, once the MCP process recorded the question (under load:
                    await h.settle()  # after its message showed)
                    await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=5))
                    await h.settle()
                    home = home_view(h.ws, ALICE)
                    if home is not None and "Ship" in blocks_text(home):
                        break
                    await asyncio.sleep(0.1)
                assert home is not None and "Ship" in blocks_text(home)
                assert "asked by mcp" in blocks_text(home) and f"asked by <@{ALICE}>" not in blocks_text(home)
            await h.ws.click(question, "yes", user=ALICE)
            await asyncio.wait_for(call, 20)


async def test_several_choices_come_back_as_the_labels_ticked(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        args = {
            "question": "Which checks should run?",
            "selection_mode": "multi_select",
            "options": [{"label": "lint"}, {"label": "tests"}, {"label": "docs"}],
        }
        call = asyncio.ensure_future(session.call_tool("ask_user", args))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.toggle(question, "lint", user=ALICE)
        await h.ws.toggle(question, "docs", user=ALICE)
        await h.ws.click(question, "Submit", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": ["lint", "docs"], "answered_by": ALICE}


async def test_an_approval_request_escalated_to_a_channel_is_decided_by_its_approvers_only(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """request_approval over stdio, escalated to another channel: a member there who is not an approver clicks
    Approve on the escalated copy and is refused; the call stays waiting until the approver decides."""
    escalation = {"ask_escalate_after": "30m", "ask_escalate_to": "C_RANDOM"}
    env = {"APPROVERS": CAROL, "ASK_ESCALATE_AFTER": "30m", "ASK_ESCALATE_TO": "C_RANDOM"}
    async with (
        harness(real_redis, settings={"approvers": CAROL, **escalation}) as h,
        mcp_session(h, prefix, extra=env) as session,
    ):
        call = asyncio.ensure_future(session.call_tool("request_approval", {"action": "Drop the cache"}))
        await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=20)
        assert h.bot.scheduler is not None
        for _ in range(100):  # the MCP server plans the escalation right after posting the request
            for after in (1801, 1801 + COALESCE_SECONDS + 1):  # the escalation, then its message to the channel
                await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=after))
                await h.settle()
            if h.ws.messages("C_RANDOM"):
                break
            await asyncio.sleep(0.1)
        [copy] = [m for m in h.ws.messages("C_RANDOM") if has_controls(m)]
        await h.ws.click(copy, "Approve", user=BOB)
        refused = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only the configured approvers" in refused["text"]
        await h.settle()
        assert not call.done()
        await h.ws.click(copy, "Approve", user=CAROL)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "approved", "approved_by": CAROL}


async def test_every_text_an_outside_agent_sends_is_bounded_before_anything_is_posted(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A 100,000-character question was asked (and kept in Redis for the run's retention); every free-text field of
    both tools is bounded by one table (bot.agent.text), advertised in the input schemas and refused over it."""
    from bot.agent import text as limits

    over = {
        ("ask_user", "question"): {"question": "q" * 100_000},
        ("ask_user", "label"): {"question": "Pick", "options": [{"label": "l" * (limits.MAX_OPTION_LABEL + 1)}]},
        ("ask_user", "description"): {
            "question": "Pick",
            "options": [{"label": "a", "description": "d" * (limits.MAX_OPTION_DESCRIPTION + 1)}],
        },
        ("ask_user", "context"): {"question": "Ship?", "context": "c" * (limits.MAX_CONTEXT + 1)},
        ("ask_user", "request_key"): {"question": "Ship?", "request_key": "k" * (limits.MAX_REQUEST_KEY + 1)},
        ("ask_user", "channel"): {"question": "Ship?", "channel": "C" * (limits.MAX_SLACK_ID + 1)},
        ("request_approval", "action"): {"action": "a" * (limits.MAX_ACTION + 1)},
        ("request_approval", "details"): {"action": "deploy", "details": "d" * (limits.MAX_DETAILS + 1)},
        ("request_approval", "details as key/values"): {
            "action": "deploy",
            "details": {f"k{i}": "v" * 100 for i in range(40)},  # 40 short entries, 4,000+ characters
        },
        ("request_approval", "context"): {"action": "deploy", "context": "c" * (limits.MAX_CONTEXT + 1)},
    }
    async with harness(real_redis) as h, mcp_session(h, prefix) as session:
        schemas = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        assert schemas["ask_user"]["properties"]["question"]["maxLength"] == limits.MAX_QUESTION
        # the options' bound is in the schema the client's model reads (found by a break-it review: only refused)
        options = schemas["ask_user"]["properties"]["options"]
        assert [o.get("maxItems") for o in options["anyOf"] if o.get("type") == "array"] == [MAX_SELECT_OPTIONS]
        missing = await session.call_tool("ask_user", {})  # found by a break-it review: pydantic's report before
        assert missing.is_error and missing.content[0].text == (
            "ask_user: the arguments don't fit the tool's input schema: question: Field required"
        )
        blank_key = await session.call_tool("ask_user", {"question": "Ship?", "request_key": "  "})
        assert blank_key.is_error and "request_key is blank" in blank_key.content[0].text  # before: asked, keyless
        for (tool, field), args in over.items():
            result = await session.call_tool(tool, args)
            text = result.content[0].text
            assert result.is_error, (tool, field)
            assert field.split()[0] in text and "at most" in text, (tool, field, text)
            assert "errors.pydantic.dev" not in text and "input_value" not in text, text  # one plain line
        assert h.ws.messages(GENERAL) == []  # nothing posted
        assert [k async for k in real_redis.scan_iter(f"{prefix}*")] == []  # nothing stored
        at_the_bound = {"question": "q" * limits.MAX_QUESTION, "request_key": "at-the-bound"}
        call = asyncio.ensure_future(session.call_tool("ask_user", at_the_bound))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=20)
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
    assert "q" * 1000 in str(question["blocks"])


def test_the_http_socket_listens_before_its_address_is_logged() -> None:
    """A client that connects as soon as "streamable HTTP at ..." is logged waits in the backlog until uvicorn
    accepts (it was refused: the socket was bound but not listening until uvicorn started, a flaky connect error)."""

    from bot.mcp_server.http import listen_socket

    sock = listen_socket("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            pass
    finally:
        sock.close()


@pytest.mark.parametrize("api_url", ["http://slack.invalid/api/", "closed-port"])
async def test_slack_unreachable_at_start_is_one_error_line_and_exit_2(
    real_redis: aioredis.Redis, api_url: str
) -> None:
    """No such host (DNS) or nothing listening: ``python -m bot mcp`` says so on one ``error:`` line naming the host
    and SLACK_API_URL, and exits 2 (as for a refused token), not with a traceback."""
    if api_url == "closed-port":
        api_url = f"http://127.0.0.1:{free_port()}/api/"  # a loopback port nothing listens on
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": "xoxb-test-token-0123456789",
        "SLACK_API_URL": api_url,
        "MCP_ASK_CHANNEL": GENERAL,
        **REDIS_ENV,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "mcp",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 120)
    lines = err.decode().splitlines()
    assert proc.returncode == 2, lines
    assert "Traceback (most recent call last):" not in lines
    [error] = [line for line in lines if line.startswith("error:")]
    host = api_url.split("/")[2]
    assert error.startswith(f"error: cannot reach the Slack API at {host} (") and "check SLACK_API_URL" in error


async def test_the_mcp_server_never_loads_the_model_client(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """``python -m bot mcp`` asks people and talks to no model: from its start through a question asked and answered
    it never imports the openai client (about 0.8 s of CPU at every start, and a coding agent starts one server per
    session). The imports are read from Python's own ``-X importtime`` log on its stderr."""
    async with harness(real_redis) as h:
        env = {**mcp_env(h, prefix), "MCP_TOKEN": MCP_TOKEN, "PYTHONPROFILEIMPORTTIME": "1"}
        async with mcp_http_process(env, startup=STARTUP_SECONDS) as server, http_session(server.url) as session:
            call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Ship it?"}))
            question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            await h.ws.reply_in_thread(ALICE, GENERAL, question["thread_ts"], "yes")
            result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "yes", "answered_by": ALICE}
    imported = {line.rsplit("|", 1)[-1].strip() for line in server.lines if line.startswith("import time:")}
    assert "bot.mcp_server.server" in imported  # the log is there
    assert not {name for name in imported if name == "openai" or name.startswith("openai.")}


def test_a_cancellation_is_a_timeout_when_either_sdk_says_so() -> None:
    from bot.mcp_server.cancellations import timed_out

    assert timed_out("timed out after 60.0s")  # the Python SDK's read_timeout_seconds
    assert timed_out("McpError: MCP error -32001: Request timed out")  # the TypeScript SDK's (Inspector, Claude Code)
    assert not timed_out("caller cancelled")  # the Python SDK's cancel
    assert not timed_out("AbortError: This operation was aborted")  # the TypeScript SDK's AbortSignal
    assert not timed_out("")


async def test_a_cancellations_reason_is_read_only_by_the_call_of_the_same_client_and_id() -> None:
    """Over HTTP clients number their requests alike: client B's "timed out" for its request 1 must not keep client
    A's question when A cancels its own request 1 (by closing its stream: no reason of its own). Found by a break-it
    review of the reasons' first version (keyed by request id alone)."""
    from types import SimpleNamespace

    from bot.mcp_server.cancellations import CANCELLED, CancelReasons

    def http(session: str) -> Any:
        return SimpleNamespace(scope={"type": "http", "headers": [(b"mcp-session-id", session.encode())], "state": {}})

    async def nothing(_ctx: Any) -> None:
        return None

    async def note(reasons: CancelReasons, request: Any, request_id: int, reason: str) -> None:
        params = {"requestId": request_id, "reason": reason}
        await reasons(SimpleNamespace(method=CANCELLED, request_id=None, params=params, request=request), nothing)

    def call(request: Any, request_id: int) -> Any:
        return SimpleNamespace(request_context=SimpleNamespace(request=request, request_id=request_id))

    reasons = CancelReasons()
    await note(reasons, http("b"), 1, "McpError: MCP error -32001: Request timed out")
    assert await reasons.reason(call(http("a"), 1), within=0.2) is None  # another client's: not A's
    await note(reasons, http("a"), 1, "caller cancelled")
    await note(reasons, http("a"), 1, "timed out after 5s")  # two for one id before either is read: both kept
    assert [await reasons.reason(call(http("a"), 1), within=0.2) for _ in range(2)] == [
        "caller cancelled",
        "timed out after 5s",
    ]
    assert await reasons.reason(call(http("b"), 1), within=0.2) == "McpError: MCP error -32001: Request timed out"
    assert await reasons.reason(call(None, 1), within=0.2) is None  # stdio's own client: none noted


@pytest.mark.parametrize(
    ("text", "plain_line"),
    [
        (
            "Error executing tool ask_user: 2 validation errors for ask_userArguments\nquestion\n  Field required "
            "[type=missing, input_value={}, input_type=dict]\n    For further information visit "
            "https://errors.pydantic.dev/2.14/v/missing\noptions.0.label\n  String should have at least 1 character "
            "[type=string_too_short, input_value='', input_type=str]\n    For further information visit "
            "https://errors.pydantic.dev/2.14/v/string_too_short",
            "ask_user: the arguments don't fit the tool's input schema: question: Field required; options.0.label: "
            "String should have at least 1 character",
        ),
        (  # found by a break-it review: a "]" in the input echoed back kept pydantic's details in the line
            "Error executing tool ask_user: 1 validation error for ask_userArguments\nquestion\n  Input should be a "
            "valid string [type=string_type, input_value=['a] [type=x]'], input_type=list]\n    For further "
            "information visit https://errors.pydantic.dev/2.14/v/string_type",
            "ask_user: the arguments don't fit the tool's input schema: question: Input should be a valid string",
        ),
        ("ask_user: too many options (101); offer at most 100", None),  # the project's own refusals pass as they are
        ("Error executing tool ask_user", None),
    ],
)
def test_an_argument_validation_report_is_one_plain_line(text: str, plain_line: str | None) -> None:
    from bot.mcp_server.arguments import plain

    assert plain(text) == plain_line
