"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, 2026-07-28 wire) on ``python -m bot mcp``: a client
that declares the extension gets a task at once for each question and approval, polls ``tasks/get`` while the
person decides in the fake Slack (the harness's ``serve`` process on the same Redis takes the click), and gets
the blocking call's very result; ``tasks/cancel`` withdraws the question; a task outlives the server process and
the client that made it. Driven with the official SDK's client (and this project's client half of the
extension, :class:`bot.mcp_server.tasks.TasksClient`) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from bot.mcp_server.tasks import (
    CreateTaskResult,
    TaskFields,
    TaskResult,
    TasksClient,
    cancel_task,
    get_task,
    listen_tasks,
)
from bot.testing.mcp_process import McpProcess, mcp_http_process
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN, STARTUP_SECONDS, bearer_client

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}


MCP_TOKEN = "mcp-test-token-0123456789abcdef"


def mcp_env(h: Any, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "MCP_ASK_USER": ALICE,
        "LOG_LEVEL": "WARNING",
        **extra,
    }


@contextlib.asynccontextmanager
async def stdio_client_of(h: Any, prefix: str, *, tasks: TasksClient | None) -> AsyncIterator[Client]:
    """The SDK's client over stdio to a new ``python -m bot mcp``, declaring the tasks extension with ``tasks``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=mcp_env(h, prefix))
    extensions = [tasks] if tasks is not None else []
    async with (
        stdio_client(params) as streams,
        Client(contextlib.nullcontext(streams), mode="auto", extensions=extensions) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def http_server(h: Any, prefix: str) -> AsyncIterator[McpProcess]:
    """``python -m bot mcp --http`` as its own process, once it listens."""
    async with mcp_http_process(mcp_env(h, prefix, MCP_TOKEN=MCP_TOKEN), startup=STARTUP_SECONDS) as server:
        yield server


@contextlib.asynccontextmanager
async def http_client_of(url: str, *, tasks: TasksClient | None) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP to ``url``, with the bearer token, declaring the tasks extension."""
    async with bearer_client(url, MCP_TOKEN, extensions=[tasks] if tasks else []) as client:
        yield client


async def wait_for_status(client: Client, task_id: str, status: str) -> TaskResult:
    """Poll ``tasks/get`` until the task has ``status`` (a budget of 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        task = await get_task(client.session, task_id)
        if task.status == status:
            return task
        assert time.monotonic() < deadline, f"the task stayed {task.status}"
        await asyncio.sleep(0.1)


async def test_a_client_with_tasks_gets_a_task_at_once_and_then_the_blocking_calls_very_result(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    seen: list[TaskFields] = []

    async def on_task(task: TaskFields) -> None:
        seen.append(task)

    args = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}], "request_key": "repo-1"}
    async with harness(real_redis) as h, stdio_client_of(h, prefix, tasks=TasksClient(on_task=on_task)) as client:
        call = asyncio.ensure_future(client.call_tool("ask_user", args))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        for _ in range(200):  # the task came back at once: the client polls it while Alice has not answered
            if seen:
                break
            await asyncio.sleep(0.05)
        assert isinstance(seen[0], CreateTaskResult) and seen[0].status == "working"
        assert seen[0].status_message is not None and "waiting for" in seen[0].status_message
        assert seen[0].task_id.startswith("run_mcp")
        assert not call.done()
        await h.ws.click(question, "web", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "answered", "answer": "web", "answered_by": ALICE}
        assert seen[-1].status == "completed"
    # The same request_key on a client without tasks: today's blocking call, which finds the answered question.
    async with harness(real_redis) as h, stdio_client_of(h, prefix, tasks=None) as plain:
        blocking = await plain.call_tool("ask_user", args)
    assert blocking.structured_content == result.structured_content
    assert blocking.content == result.content and blocking.is_error == result.is_error


async def test_a_task_survives_a_restart_of_the_server_and_of_the_client_over_http(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """The task is the question's run in Redis: the server process that made it stops and the client goes away
    between the call and the answer; a new server process answers tasks/get for it to a new client."""
    async with harness(real_redis) as h:
        async with http_server(h, prefix) as server, http_client_of(server.url, tasks=TasksClient()) as client:
            created = await client.session.call_tool(
                "request_approval", {"action": "Restart the api service"}, allow_claimed=True
            )
            assert isinstance(created, CreateTaskResult) and created.status == "working"
            request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            server.process.terminate()
            await asyncio.wait_for(server.process.wait(), 10)
        assert has_controls(next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["ts"]))  # still open
        async with http_server(h, prefix) as server, http_client_of(server.url, tasks=TasksClient()) as client:
            task = await get_task(client.session, created.task_id)
            assert task.status == "working" and task.task_id == created.task_id
            # Not input_required: that asks the client for its inputRequests, and nothing here is the client's to
            # give (the person's answer is): a generic client told so looks for requests to fulfil, finds none.
            assert task.input_requests is None and "waiting for" in (task.status_message or "")
            await h.ws.click(request, "Approve", user=ALICE)
            done = await wait_for_status(client, created.task_id, "completed")
        assert done.result is not None
        assert done.result["structuredContent"] == {"status": "approved", "approved_by": ALICE}


async def test_tasks_cancel_withdraws_the_question_in_slack(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(real_redis) as h, stdio_client_of(h, prefix, tasks=TasksClient()) as client:
        created = await client.session.call_tool("ask_user", {"question": "Ship it?"}, allow_claimed=True)
        assert isinstance(created, CreateTaskResult)
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await cancel_task(client.session, created.task_id)
        withdrawn = await h.ws.wait_for_message(
            channel=GENERAL,
            predicate=lambda m: m["ts"] == question["ts"] and "Withdrawn" in str(m["blocks"]),
            timeout=STARTUP_SECONDS,
        )
        assert not has_controls(withdrawn)
        task = await get_task(client.session, created.task_id)
        assert task.status == "cancelled"
        with pytest.raises(MCPError) as unknown:  # a task id that is no task of this caller's
            await get_task(client.session, "run_mcpc_" + "0" * 32)
        assert unknown.value.error.code == -32602


def never_polls(notified: list[TaskResult]) -> TasksClient:
    """A client half that polls ``tasks/get`` never within a test (10 minutes apart): what it learns after the
    task is made it is told (``notifications/tasks``), each notification kept in ``notified``."""

    async def on_notified(task: TaskResult) -> None:
        notified.append(task)

    return TasksClient(on_notified=on_notified, min_poll=600, max_poll=600)


async def test_the_client_is_told_of_the_tasks_status_changes_over_stdio(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """The client listens for its task (subscriptions/listen naming it) and is told working (waiting for a
    person), then, when Alice answers in Slack (the harness's serve process takes the click), completed with the
    very result; it never polls tasks/get meanwhile."""
    notified: list[TaskResult] = []
    args = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
    async with harness(real_redis) as h, stdio_client_of(h, prefix, tasks=never_polls(notified)) as client:
        call = asyncio.ensure_future(client.call_tool("ask_user", args))
        question = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        for _ in range(400):
            if notified:
                break
            await asyncio.sleep(0.05)
        assert notified and notified[0].status == "working"
        assert notified[0].status_message is not None and "waiting for" in notified[0].status_message
        await h.ws.click(question, "api", user=ALICE)
        result = await asyncio.wait_for(call, 20)
    assert result.structured_content == {"status": "answered", "answer": "api", "answered_by": ALICE}
    assert notified[-1].status == "completed" and notified[-1].task_id == notified[0].task_id
    assert notified[-1].result is not None and notified[-1].result["structuredContent"] == result.structured_content


async def test_a_cancel_in_another_server_process_is_told_to_the_listening_client_over_http(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """Two ``--http`` server processes on one Redis: the client listening on the first is told its task was
    cancelled when another client's tasks/cancel of it reaches the second (the first reads it from Redis)."""
    notified: list[TaskResult] = []
    async with (
        harness(real_redis) as h,
        http_server(h, prefix) as first,
        http_server(h, prefix) as second,
        http_client_of(first.url, tasks=never_polls(notified)) as client,
        http_client_of(second.url, tasks=TasksClient()) as other,
    ):
        call = asyncio.ensure_future(client.call_tool("request_approval", {"action": "Restart the api service"}))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        for _ in range(400):
            if notified:
                break
            await asyncio.sleep(0.05)
        assert notified and notified[0].status == "working"
        await cancel_task(other.session, notified[0].task_id)
        result = await asyncio.wait_for(call, 20)
        withdrawn = next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["ts"])
    assert result.is_error and "task cancelled" in str(result.content)
    assert notified[-1].status == "cancelled" and notified[-1].task_id == notified[0].task_id
    assert not has_controls(withdrawn)


async def test_listening_for_tasks_needs_the_extension_and_is_told_only_of_the_callers_own_tasks(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A listen request naming tasks from a client that did not declare the extension is refused (-32021); one
    naming no task of its caller's is acknowledged with none and ends at once (nothing to tell of)."""
    acks: list[Any] = []

    async def message_handler(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/subscriptions/acknowledged":
            acks.append(message.params.notifications)

    async with harness(real_redis) as h:
        async with stdio_client_of(h, prefix, tasks=None) as plain:
            with pytest.raises(MCPError) as refused:
                await listen_tasks(plain.session, ["run_mcpc_" + "0" * 32])
            assert refused.value.error.code == -32021
        params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=mcp_env(h, prefix))
        async with (
            stdio_client(params) as streams,
            Client(
                contextlib.nullcontext(streams),
                mode="auto",
                extensions=[TasksClient()],
                message_handler=message_handler,
            ) as client,
        ):
            ended = await asyncio.wait_for(listen_tasks(client.session, ["run_mcpc_" + "0" * 32, "nope"]), 20)
    assert ended.meta is not None and "io.modelcontextprotocol/subscriptionId" in ended.meta
    assert [a.model_dump(by_alias=True, exclude_none=True) for a in acks] == [{"taskIds": []}]


async def test_a_question_its_person_cancelled_in_slack_is_a_completed_task_with_the_blocking_calls_result(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The person presses the question's Cancel: the blocking call returns ``{"status": "cancelled",
    "cancelled_by": "U..."}``, and the task is ``completed`` with that result, not a ``cancelled`` task (which is
    for ``tasks/cancel`` or the client's cancellation): code written for the blocking call keeps working. Found by
    a break-it review."""
    from bot.fakeslack.state import TEAM_ID
    from bot.mcp_server.asker import Asker, outcome_of
    from bot.mcp_server.tasks import Tasks, structured_result

    async with harness(fake_redis) as h:
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        question = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}]}
        asked = await asker.ask(question, channel=GENERAL, user=ALICE, metadata={"mcp_tool": "ask_user"})
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=asked.thread_ts, predicate=has_controls)
        await h.ws.click(q, "Cancel", user=ALICE)
        blocking = await asyncio.wait_for(asker.wait(asked), 10)
        assert blocking == {"status": "cancelled", "cancelled_by": ALICE}
        render = {"ask_user": lambda s: structured_result(outcome_of(s))}
        tasks = Tasks(asker, tools=render, caller_of=lambda c: None, retention=60)
        task = await tasks.task_of(await h.bot.agent.get_run(asked.run_id))
        assert task.status == "completed" and task.result is not None
        assert task.result["structuredContent"] == blocking
