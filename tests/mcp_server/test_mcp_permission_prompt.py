"""``approve_tool_use``, Claude Code's permission prompt tool, through the official SDK's client (the real CLI:
tests/mcp_server/test_claude_code_permission_prompt.py): asked as an approval in the fake Slack with what would run
readable, long input cut in the request and whole behind Details, answered with the one text block of JSON that
Claude Code reads; as a task too (the same text as the task's result)."""

from __future__ import annotations

import asyncio
import contextlib
import html
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

from bot.mcp_server.tasks import CreateTaskResult, TasksClient, get_task
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN, STARTUP_SECONDS

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}


@contextlib.asynccontextmanager
async def client_of(
    h: Any, prefix: str, *, tasks: bool = False, more: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "MCP_ASK_USER": ALICE,
        "LOG_LEVEL": "WARNING",
        **(more or {}),
    }
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot", "mcp"], env=env)
    extensions = [TasksClient()] if tasks else []
    async with (
        stdio_client(params) as streams,
        Client(contextlib.nullcontext(streams), mode="auto", extensions=extensions) as client,
    ):
        yield client


async def test_a_write_of_a_long_file_is_shown_cut_and_allowed_with_its_whole_input(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    content = "".join(f"line {i}: print('hello')\n" for i in range(400))  # ~10,000 characters
    prompt = {
        "tool_name": "Write",
        "input": {"file_path": "src/app.py", "content": content},
        "tool_use_id": "toolu_01write",
    }
    async with harness(real_redis) as h, client_of(h, prefix) as client:
        call = asyncio.ensure_future(client.call_tool("approve_tool_use", prompt))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["thread_ts"])
        assert "Write: src/app.py" in root["text"]
        shown = html.unescape(str(request["blocks"]))
        assert "line 0: print" in shown and "line 399" not in shown  # cut in the request...
        await h.ws.click(request, "Details", user=ALICE)
        details = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: "Details" in str(v.get("title")))
        assert "characters in all" in html.unescape(str(details["blocks"]))  # ...saying so
        await h.ws.click(request, "Approve", user=ALICE)
        result = await asyncio.wait_for(call, 20)
    assert not result.is_error and result.structured_content is None
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == {"behavior": "allow", "updatedInput": prompt["input"]}


async def test_as_a_task_a_declined_prompt_completes_with_the_deny_claude_code_reads(
    real_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    prompt = {"tool_name": "Bash", "input": {"command": "rm -rf build"}, "tool_use_id": "toolu_01rm"}
    async with harness(real_redis) as h, client_of(h, prefix, tasks=True) as client:
        created = await client.session.call_tool("approve_tool_use", prompt, allow_claimed=True)
        assert isinstance(created, CreateTaskResult) and created.status == "working"
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.click(request, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "keep the build"}}, user=ALICE)
        for _ in range(200):
            task = await get_task(client.session, created.task_id)
            if task.status == "completed":
                break
            await asyncio.sleep(0.1)
        assert task.result is not None
        blocking = await client_plain_call(h, prefix, prompt)  # the same tool_use_id, blocking: the same answer
    text = task.result["content"][0]["text"]
    assert json.loads(text) == {"behavior": "deny", "message": f"Declined in Slack by {ALICE}: keep the build"}
    assert blocking == text


async def client_plain_call(h: Any, prefix: str, prompt: dict[str, Any]) -> str:
    async with client_of(h, prefix) as plain:
        result = await plain.call_tool("approve_tool_use", prompt)
    return str(result.content[0].text)  # type: ignore[union-attr]


async def test_a_details_only_prompt_keeps_its_command_out_of_the_channel(
    real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"rules:\n  - name: shell\n    tool: Bash\n    approvers: [{ALICE}]\n    arguments: details-only\n"
        "  - name: default\n",
        encoding="utf-8",
    )
    secret = "zzsecrettokenzz"
    command = f"curl -H 'Authorization: Bearer {secret}' https://api.example"
    prompt = {"tool_name": "Bash", "input": {"command": command}, "tool_use_id": "toolu_01secret"}
    more = {"APPROVAL_POLICY": str(policy)}
    async with (
        harness(real_redis, settings={"approval_policy": str(policy)}) as h,
        client_of(h, prefix, more=more) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("approve_tool_use", prompt))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["thread_ts"])
        assert "Bash (its arguments are shown only in Details)" in root["text"], root["text"]
        await h.ws.click(request, "Details", user=ALICE)
        details = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: "Details" in str(v.get("title")))
        assert secret in html.unescape(str(details["blocks"]))  # the approver reads it there
        await h.ws.click(request, "Approve", user=ALICE)
        result = await asyncio.wait_for(call, 20)
        calls = [c for c in h.ws.calls() if not c.method.startswith("views.")]
        posted = [c.method for c in calls if secret in json.dumps(c.params)]
    assert posted == []  # never in the channel: the root message, its notification, the card, its copies
    assert json.loads(result.content[0].text) == {"behavior": "allow", "updatedInput": prompt["input"]}


PUSH_POLICY = f"""
rules:
  - name: pushes need bob
    tool: Bash
    when: {{command: {{glob: "*git push*"}}}}
    approvers: [{BOB}]
  - name: background needs bob
    tool: Bash
    when: {{run_in_background: true}}
    approvers: [{BOB}]
  - name: long timeouts need bob
    tool: Bash
    when: {{timeout: {{gt: 60000}}}}
    approvers: [{BOB}]
  - name: default
    approvers: [requester]
"""


@pytest.mark.parametrize(
    "tool_input",
    [
        {"command": "echo " + "x" * 3000 + " && git push --force origin main"},  # the push past what is shown
        {"command": "sleep 1", "run_in_background": True},  # shown as the text "true"
        {"command": "sleep 1", "timeout": 600000},  # shown as the text "600000"
    ],
    ids=["push-past-the-cut", "boolean", "number"],
)
async def test_a_prompts_rule_is_matched_on_its_whole_input_not_on_what_it_shows(
    real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path, tool_input: dict[str, Any]
) -> None:
    """A permission prompt shows its input cut and as text; its policy rule was matched on that, so a long
    command's ``git push`` past the cut, a ``true`` or a number fell to the default rule and the requester approved
    what needed Bob (a break-it pass). The rule is matched on the whole input as Claude Code gave it."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(PUSH_POLICY, encoding="utf-8")
    prompt = {"tool_name": "Bash", "input": tool_input, "tool_use_id": "toolu_01bob"}
    async with (
        harness(real_redis, settings={"approval_policy": str(policy)}) as h,
        client_of(h, prefix, more={"APPROVAL_POLICY": str(policy)}) as client,
    ):
        call = asyncio.ensure_future(client.call_tool("approve_tool_use", prompt))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert f"Waiting for <@{BOB}>" in str(request["blocks"]), str(request["blocks"])[-600:]
        await h.ws.click(request, "Approve", user=ALICE)
        await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "Only" in m["text"])
        await h.ws.click(request, "Approve", user=BOB)
        result = await asyncio.wait_for(call, 20)
    assert json.loads(result.content[0].text) == {"behavior": "allow", "updatedInput": tool_input}
