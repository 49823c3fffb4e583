"""``approve_tool_use`` (Claude Code's permission prompt) under the approval policy's ``edit:`` and ``grants:``,
through the official SDK's client over streamable HTTP, two callers of ``MCP_CALLERS`` each with its own bearer
token, answered in the fake Slack by the harness's ``serve`` process: an approver's edit of the command is the
``updatedInput`` Claude Code runs, and "Approve always" covers the same caller's identical later request (the thread
says a standing grant approved it), never another caller's nor another input."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from mcp.client import Client

from bot.mcp_server.asker import run_id_for
from bot.testing.mcp_process import McpProcess, mcp_http_process
from bot.testing.slack_scenarios import ALICE, GENERAL, blocks_text, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN, STARTUP_SECONDS, bearer_client

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}
TOKENS = {"build-42": "build-42-token-0123456789abcdef", "build-43": "build-43-token-0123456789abcdef"}
ALWAYS = "Approve always (these arguments)"
POLICY = f"""
rules:
  - name: shell
    tool: Bash
    approvers: [{ALICE}]
    edit: [command]
    grants: [once, thread, channel, always]
    grant_for: 1h
  - name: default
    tool: "*"
    approvers: [{ALICE}]
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    lines = ["callers:"]
    for name, token in TOKENS.items():
        lines += [
            f"  - name: {name}",
            f'    token_sha256: "{hashlib.sha256(token.encode()).hexdigest()}"',
            f"    channels: [{GENERAL}]",
            f"    people: [{ALICE}]",
            "    approvals: true",
            "    per_minute: 100",
        ]
    callers = tmp_path / "callers.yaml"
    callers.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"APPROVAL_POLICY": str(policy), "MCP_CALLERS": str(callers)}


@contextlib.asynccontextmanager
async def http_server(h: Any, prefix: str, files: dict[str, str]) -> AsyncIterator[McpProcess]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "MCP_ASK_USER": ALICE,
        **files,
    }
    async with mcp_http_process(env, startup=STARTUP_SECONDS) as server:
        yield server


@contextlib.asynccontextmanager
async def client_as(url: str, caller: str) -> AsyncIterator[Client]:
    async with bearer_client(url, TOKENS[caller]) as client:
        yield client


def prompt(command: str, tool_use_id: str) -> dict[str, Any]:
    return {
        "tool_name": "Bash",
        "input": {"command": command, "description": "Clean the build"},
        "tool_use_id": tool_use_id,
    }


async def answer(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("approve_tool_use", args)
    assert not result.is_error and len(result.content) == 1 and result.content[0].type == "text"
    decided: dict[str, Any] = json.loads(result.content[0].text)
    return decided


def asked_since(seen: set[str]) -> Any:
    return lambda m: has_controls(m) and m["ts"] not in seen


async def test_an_approvers_edit_of_the_command_is_the_input_claude_code_runs(
    real_redis: aioredis.Redis, harness: Any, prefix: str, files: dict[str, str]
) -> None:
    settings = {"approval_policy": files["APPROVAL_POLICY"]}
    async with (
        harness(real_redis, settings=settings) as h,
        http_server(h, prefix, files) as server,
        client_as(server.url, "build-42") as client,
    ):
        call = asyncio.ensure_future(answer(client, prompt("rm -rf build", "toolu_01edit")))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        await h.ws.click(request, "Edit", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_edit_modal")
        fields = {b["block_id"]: b["element"] for b in form["blocks"] if b["type"] == "input"}
        assert list(fields) == ["edit:command"]  # the rule's edit: names command only, not description
        assert fields["edit:command"]["initial_value"] == "rm -rf build"
        ack = await h.ws.submit_view(form, {"edit:command": {"edit_value": "rm -rf build/tmp"}}, user=ALICE)
        assert "errors" not in (ack.json or {})
        decided = await asyncio.wait_for(call, 20)
    assert decided == {
        "behavior": "allow",
        "updatedInput": {"command": "rm -rf build/tmp", "description": "Clean the build"},
    }


async def test_an_always_grant_covers_the_same_callers_same_input_only(
    real_redis: aioredis.Redis, harness: Any, prefix: str, files: dict[str, str]
) -> None:
    settings = {"approval_policy": files["APPROVAL_POLICY"]}
    async with (
        harness(real_redis, settings=settings) as h,
        http_server(h, prefix, files) as server,
        client_as(server.url, "build-42") as mine,
        client_as(server.url, "build-43") as theirs,
    ):
        call = asyncio.ensure_future(answer(mine, prompt("make clean", "toolu_01first")))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        shown = html.unescape(blocks_text(request))
        assert ALWAYS in shown  # a prompt opens its own thread, and a channel is shared by every caller:
        assert "for this thread" not in shown and "in this channel" not in shown  # "always" only
        await h.ws.click(request, ALWAYS, user=ALICE)
        first = await asyncio.wait_for(call, 20)
        assert first == {"behavior": "allow", "updatedInput": prompt("make clean", "x")["input"]}
        seen = {request["ts"]}

        # The same caller, the same input, a new prompt: allowed without asking, the thread says why.
        again = await asyncio.wait_for(answer(mine, prompt("make clean", "toolu_01second")), 20)
        assert again == first
        note = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: "ran without asking" in m["text"], timeout=20
        )
        assert "`Bash`" in note["text"] and f"standing grant from <@{ALICE}>" in note["text"]
        assert not [m for m in h.ws.messages(GENERAL) if asked_since(seen)(m)]
        thread = [m["text"] for m in h.ws.messages(GENERAL) if note["thread_ts"] in (m.get("thread_ts"), m["ts"])]
        assert not [t for t in thread if "is recorded for the agent" in t]  # nobody answered
        # The use is audited where it is made (this server process): which call, whose grant, which caller.
        used = [line for line in server.lines if "bot.audit: grant used" in line]
        assert len(used) == 1, used
        fields = dict(part.split("=", 1) for part in used[0].split("grant used ", 1)[1].split())
        assert fields["run_id"] == run_id_for("toolu_01second", caller="build-42")
        assert fields["granted_by"] == ALICE and fields["mcp_caller"] == "build-42"
        assert fields["rule"] == "shell" and fields["scope"] == "always" and fields["grant_id"].startswith("g_")

        # Another caller's identical prompt, and the same caller's other input: asked.
        forms: set[str] = set()
        for client, command, key in ((theirs, "make clean", "toolu_01theirs"), (mine, "make all", "toolu_01b")):
            call = asyncio.ensure_future(answer(client, prompt(command, key)))
            asked = await h.ws.wait_for_message(channel=GENERAL, predicate=asked_since(seen), timeout=20)
            seen.add(asked["ts"])
            await h.ws.click(asked, "Decline", user=ALICE)
            form = await h.ws.wait_for_view(
                user=ALICE,
                predicate=lambda v: v.get("callback_id") == "approval_decline_modal" and v["id"] not in forms,
            )
            forms.add(form["id"])
            await h.ws.submit_view(form, {"decline_reason": {"reason_text": "not this one"}}, user=ALICE)
            assert (await asyncio.wait_for(call, 20))["behavior"] == "deny"


def test_an_edit_of_a_value_shown_cut_or_not_a_string_is_a_deny_not_a_changed_input() -> None:
    from bot.mcp_server.permission_prompt import decision, details_of

    long = {"file_path": "a.py", "content": "x" * 5000}
    shown = details_of(long)
    assert shown["content"] != long["content"]  # shown cut
    edited = {**shown, "content": "print('short')"}
    denied = decision({"status": "approved", "approved_by": ALICE, "details": edited}, long)
    assert denied["behavior"] == "deny" and "`content`" in denied["message"]
    numbers = {"timeout": 30, "command": "sleep 1"}
    edited = {**details_of(numbers), "timeout": "3000"}
    assert decision({"status": "approved", "details": edited}, numbers)["behavior"] == "deny"
    untouched = decision({"status": "approved", "details": {**shown, "file_path": "b.py"}}, long)
    assert untouched == {"behavior": "allow", "updatedInput": {**long, "file_path": "b.py"}}


def test_every_key_of_a_long_input_is_shown_its_long_values_cut_and_saying_so() -> None:
    from bot.agent.asking import APPROVAL_TOOL
    from bot.agent.stream import ApprovalPayload
    from bot.mcp_server.permission_prompt import MAX_SHOWN, MORE_KEY, PER_KEY, details_of
    from bot.slack.render.approvals import details_text

    def size(shown: dict[str, str]) -> int:
        return sum(len(k) + len(v) + PER_KEY for k, v in shown.items())

    hidden = details_of({"note": "benign " * 500, "sql": "DROP TABLE users"})
    assert hidden["sql"] == "DROP TABLE users" and "characters in all" in hidden["note"]
    edit = {"file_path": "a.py", "old_string": "x" * 5000, "new_string": "rm -rf / " + "y" * 5000}
    shown = details_of(edit)  # Claude Code's Edit: a long old_string no longer hides new_string
    assert shown["new_string"].startswith("rm -rf / ") and shown["new_string"].endswith("runs the whole input)")
    assert shown["file_path"] == "a.py" and size(shown) <= MAX_SHOWN
    alike = details_of({"k" * 300 + "1": "one", "k" * 300 + "2": "two"})  # keys alike in their first 200
    assert sorted(alike.values()) == ["one", "two"] and all(len(k) <= 200 for k in alike)
    many = details_of({f"key{i}": "v" * 100 for i in range(300)})
    assert "more keys not shown here" in many[MORE_KEY] and "key299" not in many and size(many) <= MAX_SHOWN
    payload = ApprovalPayload(  # escaped for Slack a value grows: the Details modal still shows every key
        tool_call_id="c1",
        tool_name=APPROVAL_TOOL,
        args={"action": "Bash", "details": details_of({"html": "<b>" * 800, "last": "DROP TABLE users"})},
        description="",
    )
    assert "DROP TABLE users" in details_text(payload)
