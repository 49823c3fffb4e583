"""Callers of ``python -m bot mcp`` with their own identity (``MCP_CALLERS``): each confined to its channels and
people, its approvals and its limits, its request_keys its own, its questions naming it. Driven with the official
SDK's client over stdio (``MCP_CALLER`` names the process's caller) and over streamable HTTP (the bearer token
names it); the questions are answered in the fake Slack by the harness's ``serve`` process on the same Redis."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import Implementation

from bot.mcp_server.tasks import CreateTaskResult, TasksClient
from bot.testing.mcp_process import mcp_http_process
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN, STARTUP_SECONDS, bearer_client

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}


RANDOM = "C_RANDOM"
TOKENS = {
    "build-42": "build-42-token-0123456789abcdef",
    "nightly": "nightly-token-0123456789abcdef",
    "burst": "burst-token-0123456789abcdef0",
    "lenient": "lenient-token-0123456789abcdef",
}
CALLERS = {
    "callers": [
        {
            "name": "build-42",
            "channels": [GENERAL],
            "people": [ALICE, BOB],
            "approvals": True,
            "max_waiting": 2,
            "per_minute": 10,
        },
        {"name": "nightly", "channels": [RANDOM, GENERAL], "people": [CAROL], "approvals": False},
        {"name": "burst", "channels": [GENERAL], "people": [ALICE], "max_waiting": 10, "per_minute": 2},
        {
            "name": "lenient",
            "channels": [GENERAL],
            "people": [ALICE],
            "approvals": True,
            "approvals_anyone_in_channel": True,
        },
    ]
}
CLIENT = Implementation(name="Claude Code", version="2.0.0")


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def callers_file(tmp_path: Path) -> str:
    """MCP_CALLERS as the issue writes it (YAML), each caller's token as its SHA-256."""
    lines = ["callers:"]
    for entry in CALLERS["callers"]:
        name = str(entry["name"])
        lines.append(f"  - name: {name}")
        lines.append(f'    token_sha256: "{sha256(TOKENS[name])}"')
        for key, value in entry.items():
            if key != "name":
                lines.append(f"    {key}: {json.dumps(value)}")
    path = tmp_path / "callers.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def mcp_env(h: Any, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "LOG_LEVEL": "WARNING",
        **extra,
    }


@contextlib.asynccontextmanager
async def stdio_session(h: Any, prefix: str, **extra: str) -> AsyncIterator[Any]:
    """The SDK's client over stdio to ``python -m bot mcp`` started with ``extra`` settings."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=mcp_env(h, prefix, **extra))
    async with (
        stdio_client(params) as streams,
        Client(contextlib.nullcontext(streams), mode="auto", client_info=CLIENT) as client,
    ):
        yield client.session


@contextlib.asynccontextmanager
async def http_server(h: Any, prefix: str, **extra: str) -> AsyncIterator[str]:
    """``python -m bot mcp --http`` with ``extra`` settings as its own process, once it listens, on a port it picks
    itself (:func:`bot.testing.mcp_process.mcp_http_process`): its URL."""
    async with mcp_http_process(mcp_env(h, prefix, **extra), startup=STARTUP_SECONDS) as server:
        yield server.url
    logged = "".join(server.lines)
    assert not any(t in logged for t in TOKENS.values())  # never logged


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[Any]:
    """The SDK's client over streamable HTTP to ``url`` with the bearer ``token``."""
    async with bearer_client(url, token, client_info=CLIENT) as client:
        yield client.session


@contextlib.asynccontextmanager
async def sessions(h: Any, prefix: str, transport: str, callers: str, *names: str) -> AsyncIterator[list[Any]]:
    """One client session per caller in ``names``: over stdio one server process each (``MCP_CALLER``), over HTTP
    one server process for all, each session with its caller's token."""
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            opened = [
                await stack.enter_async_context(stdio_session(h, prefix, MCP_CALLERS=callers, MCP_CALLER=n))
                for n in names
            ]
        else:
            url = await stack.enter_async_context(http_server(h, prefix, MCP_CALLERS=callers))
            opened = [await stack.enter_async_context(http_session(url, TOKENS[n])) for n in names]
        yield opened


async def refused(session: Any, tool: str, args: dict[str, Any]) -> str:
    """The tool error of a call that must be refused at once (a call that asks instead would wait: bounded)."""
    result = await asyncio.wait_for(session.call_tool(tool, args), 30)
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


def roots(h: Any, channel: str) -> list[dict[str, Any]]:
    """The first messages of the threads the MCP server opened in ``channel``."""
    return [m for m in h.ws.messages(channel) if m.get("thread_ts", m["ts"]) == m["ts"] and "asks" in m["text"]]


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


@TRANSPORTS
async def test_each_caller_is_confined_to_its_channels_and_people_and_its_questions_name_it(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str, transport: str
) -> None:
    """A caller posted in any channel the bot is in, or DMed any member (a user id as `channel`): now each asks
    only in its channels, only its people, and each refusal names the caller and the rule."""
    async with harness(real_redis) as h, sessions(h, prefix, transport, callers_file, "build-42", "nightly") as both:
        build, nightly = both
        for args, rule in (
            ({"channel": RANDOM}, "channels"),  # a channel not its own
            ({"user": CAROL}, "people"),  # someone not its own
            ({"channel": CAROL}, "people"),  # a DM of someone not its own
        ):
            text = await refused(build, "ask_user", {"question": "Ship it?", **args})
            assert f"caller build-42, rule `{rule}`" in text, text
        text = await refused(nightly, "ask_user", {"question": "Ship it?", "user": ALICE})
        assert "caller nightly, rule `people`" in text
        text = await refused(nightly, "request_approval", {"action": "Deploy", "user": CAROL})
        assert "caller nightly, rule `approvals`" in text
        assert h.ws.messages(GENERAL) == [] and h.ws.messages(RANDOM) == []  # nothing posted

        call = asyncio.ensure_future(build.call_tool("ask_user", {"question": "Which repo?", "user": BOB}))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        [root] = roots(h, GENERAL)
        assert root["text"].startswith(f":robot_face: Claude Code on build-42 asks <@{BOB}>"), root["text"]
        await h.ws.reply_in_thread(BOB, GENERAL, question["thread_ts"], "api")
        assert (await asyncio.wait_for(call, 20)).structured_content == {
            "status": "answered",
            "answer": "api",
            "answered_by": BOB,
        }
        call = asyncio.ensure_future(nightly.call_tool("ask_user", {"question": "Rerun?", "channel": RANDOM}))
        question = await h.ws.wait_for_message(channel=RANDOM, predicate=has_controls, timeout=STARTUP_SECONDS)
        [root] = roots(h, RANDOM)
        assert root["text"].startswith(":robot_face: Claude Code on nightly asks anyone here"), root["text"]
        call.cancel()
        with contextlib.suppress(BaseException):
            await call


@TRANSPORTS
async def test_a_callers_request_key_is_its_own(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str, transport: str
) -> None:
    """Keys were global: another caller reusing a request_key got the first caller's answer. Now it gets a
    question of its own, and the first caller still gets its answer."""
    args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}], "request_key": "deploy"}
    async with harness(real_redis) as h, sessions(h, prefix, transport, callers_file, "build-42", "lenient") as both:
        build, lenient = both
        call = asyncio.ensure_future(build.call_tool("ask_user", {**args, "user": ALICE}))
        first = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.click(first, "yes", user=ALICE)
        answered = {"status": "answered", "answer": "yes", "answered_by": ALICE}
        assert (await asyncio.wait_for(call, 20)).structured_content == answered

        other = asyncio.ensure_future(lenient.call_tool("ask_user", {**args, "user": ALICE}))
        second = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: has_controls(m) and m["ts"] != first["ts"], timeout=STARTUP_SECONDS
        )
        assert not other.done()  # a fresh question, waiting: never build-42's answer
        assert "Claude Code on lenient asks" in roots(h, GENERAL)[-1]["text"]
        assert (await build.call_tool("ask_user", {**args, "user": ALICE})).structured_content == answered
        await h.ws.click(second, "no", user=ALICE)
        result = await asyncio.wait_for(other, 20)
        assert result.structured_content == {"status": "answered", "answer": "no", "answered_by": ALICE}


@TRANSPORTS
async def test_an_approval_must_name_who_decides(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str, transport: str
) -> None:
    """An approval for nobody in particular was anyone's in the channel; now it is refused unless the caller's
    entry says approvals_anyone_in_channel."""
    async with harness(real_redis) as h, sessions(h, prefix, transport, callers_file, "build-42", "lenient") as both:
        build, lenient = both
        text = await refused(build, "request_approval", {"action": "Drop the cache"})
        assert "caller build-42, rule `approvals_anyone_in_channel`" in text and "give `user`" in text
        assert h.ws.messages(GENERAL) == []
        call = asyncio.ensure_future(build.call_tool("request_approval", {"action": "Drop the cache", "user": ALICE}))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert f"Waiting for <@{ALICE}>" in str(request["blocks"])
        await h.ws.click(request, "Approve", user=ALICE)
        assert (await asyncio.wait_for(call, 20)).structured_content == {"status": "approved", "approved_by": ALICE}

        call = asyncio.ensure_future(lenient.call_tool("request_approval", {"action": "Rotate the logs"}))
        request = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: has_controls(m) and "Rotate" in str(m["blocks"]), timeout=20
        )
        assert "Anyone in this channel can approve" in str(request["blocks"])
        await h.ws.click(request, "Approve", user=BOB)
        assert (await asyncio.wait_for(call, 20)).structured_content == {"status": "approved", "approved_by": BOB}


async def test_a_callers_waiting_questions_are_bounded(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str
) -> None:
    """40 questions were posted in 0.7 s. build-42 may have 2 waiting: the third is refused until one is
    answered (over stdio and HTTP at once: the count is in Redis, across processes)."""
    async with (
        harness(real_redis) as h,
        stdio_session(h, prefix, MCP_CALLERS=callers_file, MCP_CALLER="build-42") as over_stdio,
        http_server(h, prefix, MCP_CALLERS=callers_file) as url,
        http_session(url, TOKENS["build-42"]) as over_http,
    ):
        calls = []
        for session, n in ((over_stdio, 1), (over_http, 2)):
            calls.append(asyncio.ensure_future(session.call_tool("ask_user", {"question": f"Q{n}?", "user": ALICE})))
            await h.ws.wait_for_message(
                channel=GENERAL, predicate=lambda m, n=n: has_controls(m) and f"Q{n}?" in str(m["blocks"]), timeout=20
            )
        for session in (over_stdio, over_http):
            text = await refused(session, "ask_user", {"question": "Q3?", "user": ALICE})
            assert "caller build-42, rule `max_waiting`" in text and "2 of its questions are waiting" in text
        first = next(m for m in h.ws.messages(GENERAL) if has_controls(m) and "Q1?" in str(m["blocks"]))
        await h.ws.reply_in_thread(ALICE, GENERAL, first["thread_ts"], "done")
        await asyncio.wait_for(calls[0], 20)
        calls.append(asyncio.ensure_future(over_http.call_tool("ask_user", {"question": "Q3?", "user": ALICE})))
        await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: has_controls(m) and "Q3?" in str(m["blocks"]), timeout=20
        )
        for call in calls[1:]:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call


async def test_questions_asked_at_once_take_at_most_max_waiting_places(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str
) -> None:
    """6 ask_user calls of build-42 (2 waiting at most) at the same moment, each as a task (answered at once):
    2 are asked, 4 refused for max_waiting."""
    async with harness(real_redis) as h, http_server(h, prefix, MCP_CALLERS=callers_file) as url:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(bearer_client(url, TOKENS["build-42"], extensions=[TasksClient()]))
                for _ in range(6)
            ]
            results = await asyncio.gather(
                *(
                    c.session.call_tool("ask_user", {"question": f"Q{i}?", "user": ALICE}, allow_claimed=True)
                    for i, c in enumerate(clients)
                ),
                return_exceptions=True,
            )
        created = [r for r in results if isinstance(r, CreateTaskResult)]
        assert len(created) == 2, results
        refusals = [str(r) for r in results if not isinstance(r, CreateTaskResult)]
        assert len(refusals) == 4 and all("rule `max_waiting`" in r for r in refusals), refusals
        assert len(roots(h, GENERAL)) == 2


async def test_a_callers_questions_a_minute_are_bounded_across_processes(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str
) -> None:
    """burst may ask 2 questions a minute, whichever server processes it asks through (the count is in Redis)."""
    async with (
        harness(real_redis) as h,
        stdio_session(h, prefix, MCP_CALLERS=callers_file, MCP_CALLER="burst") as over_stdio,
        http_server(h, prefix, MCP_CALLERS=callers_file) as url,
        http_session(url, TOKENS["burst"]) as over_http,
    ):
        calls = [
            asyncio.ensure_future(session.call_tool("ask_user", {"question": f"Q{n}?", "request_key": f"k{n}"}))
            for n, session in ((1, over_stdio), (2, over_http))
        ]
        for n in (1, 2):
            await h.ws.wait_for_message(
                channel=GENERAL, predicate=lambda m, n=n: has_controls(m) and f"Q{n}?" in str(m["blocks"]), timeout=20
            )
        for session in (over_stdio, over_http):
            text = await refused(session, "ask_user", {"question": "Q3?"})
            assert "caller burst, rule `per_minute`" in text and "try again in" in text
        again = asyncio.ensure_future(over_stdio.call_tool("ask_user", {"question": "Q1?", "request_key": "k1"}))
        calls.append(again)
        await asyncio.sleep(1.0)
        assert not again.done()  # waiting again on its own question asks nothing: not counted, not refused
        assert len([m for m in h.ws.messages(GENERAL) if has_controls(m)]) == 2
        for call in calls:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call


@TRANSPORTS
async def test_one_mcp_token_alone_is_one_caller_confined_to_mcp_ask_channel(
    real_redis: aioredis.Redis, harness: Any, prefix: str, transport: str
) -> None:
    """Without MCP_CALLERS the one caller (MCP_TOKEN over HTTP, the process over stdio) asked in any channel or
    DMed anyone; it now asks in MCP_ASK_CHANNEL only, and its approvals must name who decides."""
    token = "single-token-0123456789abcdef"
    async with harness(real_redis) as h, contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            session = await stack.enter_async_context(stdio_session(h, prefix))
        else:
            url = await stack.enter_async_context(http_server(h, prefix, MCP_TOKEN=token))
            session = await stack.enter_async_context(http_session(url, token))
        for args, rule in (({"channel": RANDOM}, "channels"), ({"channel": BOB}, "people")):
            text = await refused(session, "ask_user", {"question": "Ship it?", **args})
            assert f"refused (this server's caller, rule `{rule}`)" in text, text
        text = await refused(session, "request_approval", {"action": "Deploy"})
        assert "rule `approvals_anyone_in_channel`" in text
        assert h.ws.messages(RANDOM) == [] and h.ws.messages(GENERAL) == []
        call = asyncio.ensure_future(session.call_tool("ask_user", {"question": "Ship it?", "user": BOB}))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert roots(h, GENERAL)[0]["text"].startswith(f":robot_face: Claude Code asks <@{BOB}>")
        await h.ws.reply_in_thread(BOB, GENERAL, question["thread_ts"], "yes")
        assert (await asyncio.wait_for(call, 20)).structured_content == {
            "status": "answered",
            "answer": "yes",
            "answered_by": BOB,
        }


@pytest.mark.parametrize("user", [None, ALICE])
async def test_a_question_asked_in_a_persons_dm_is_theirs_and_answered_there(
    real_redis: aioredis.Redis, harness: Any, prefix: str, callers_file: str, user: str | None
) -> None:
    """A caller may ask its people "as a DM (a user id given as `channel`)": Slack posts it in the person's DM with
    the app (``D…``), but the run kept the user id as its channel, so the person's click was refused ("doesn't
    belong to this conversation"), their reply ignored, and the agent waited to the deadline (a break-it pass); with
    no ``user`` the thread also said "asks anyone here". It is theirs, answered where it shows; someone else named
    as ``user`` in that DM is refused."""
    async with harness(real_redis) as h, sessions(h, prefix, "stdio", callers_file, "build-42") as [build]:
        args = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}], "channel": ALICE}
        if user:
            args["user"] = user
        call = asyncio.ensure_future(build.call_tool("ask_user", args))
        question = await h.ws.wait_for_message(channel="D_ALICE", predicate=has_controls, timeout=STARTUP_SECONDS)
        [root] = roots(h, "D_ALICE")
        assert root["text"].startswith(f":robot_face: Claude Code on build-42 asks <@{ALICE}>"), root["text"]
        await h.ws.click(question, "yes", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "yes", "answered_by": ALICE}
        text = await refused(build, "ask_user", {**args, "user": BOB, "question": "And this?"})
        assert f"is for {ALICE}" in text, text
