"""MCP callers with their own approval policy rule (``policy_rule:`` in ``MCP_CALLERS``), and tasks kept to the
caller that made them; over streamable HTTP with each caller's bearer token, the SDK's client declaring tasks
(:class:`bot.mcp_server.tasks.TasksClient`), answered in the fake Slack by the harness's ``serve`` process."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from bot.mcp_server.tasks import CreateTaskResult, TasksClient, cancel_task, get_task
from bot.testing.mcp_process import mcp_http_process
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN, STARTUP_SECONDS, bearer_client

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}
TOKENS = {"deployer": "deployer-token-0123456789abcdef", "other": "other-token-0123456789abcdef00"}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """APPROVAL_POLICY (``deploys``: Bob decides, for actions named deploy-*; else the requester) and MCP_CALLERS
    (``deployer``, whose approvals ``deploys`` decides whatever they are; ``other``)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"rules:\n  - name: deploys\n    tool: 'deploy-*'\n    approvers: [{BOB}]\n  - name: default\n",
        encoding="utf-8",
    )
    lines = ["callers:"]
    for name, token in TOKENS.items():
        lines += [
            f"  - name: {name}",
            f'    token_sha256: "{hashlib.sha256(token.encode()).hexdigest()}"',
            f"    channels: [{GENERAL}]",
            f"    people: [{ALICE}, {BOB}]",
            "    approvals: true",
        ]
        if name == "deployer":
            lines.append("    policy_rule: deploys")
    callers = tmp_path / "callers.yaml"
    callers.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"APPROVAL_POLICY": str(policy), "MCP_CALLERS": str(callers)}


@contextlib.asynccontextmanager
async def http_server(h: Any, prefix: str, files: dict[str, str], *, ask_user: bool = True) -> AsyncIterator[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        **({"MCP_ASK_USER": ALICE} if ask_user else {}),
        **files,
    }
    async with mcp_http_process(env, startup=STARTUP_SECONDS) as server:
        yield server.url


@contextlib.asynccontextmanager
async def client_as(url: str, caller: str) -> AsyncIterator[Client]:
    async with bearer_client(url, TOKENS[caller], extensions=[TasksClient()]) as client:
        yield client


async def test_a_callers_policy_rule_decides_its_approvals_and_its_tasks_are_its_own(
    real_redis: aioredis.Redis, harness: Any, prefix: str, files: dict[str, str]
) -> None:
    settings = {"approval_policy": files["APPROVAL_POLICY"]}
    async with harness(real_redis, settings=settings) as h, http_server(h, prefix, files) as url:
        async with client_as(url, "deployer") as deployer, client_as(url, "other") as other:
            created = await deployer.session.call_tool(
                "request_approval", {"action": "Restart the api service"}, allow_claimed=True
            )
            assert isinstance(created, CreateTaskResult)
            request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
            assert f"<@{BOB}>" in str(request["blocks"])  # the rule's approver, not the requester (Alice)
            for attempt in (get_task, cancel_task):  # another caller's view of the task: none
                with pytest.raises(MCPError) as unknown:
                    await attempt(other.session, created.task_id)
                assert unknown.value.error.code == -32602
            await h.ws.click(request, "Approve", user=ALICE)  # not hers to decide under `deploys`
            await asyncio.sleep(0.5)
            assert has_controls(next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["ts"]))
            await h.ws.click(request, "Approve", user=BOB)
            for _ in range(200):
                task = await get_task(deployer.session, created.task_id)
                if task.status == "completed":
                    break
                await asyncio.sleep(0.1)
            assert task.result is not None
            assert task.result["structuredContent"] == {"status": "approved", "approved_by": BOB}
            # The other caller's approval of the same action: the rules match as usual (the requester decides).
            call = asyncio.ensure_future(other.call_tool("request_approval", {"action": "Restart the api service"}))
            second = await h.ws.wait_for_message(
                channel=GENERAL, predicate=lambda m: has_controls(m) and m["ts"] != request["ts"], timeout=20
            )
            await h.ws.click(second, "Approve", user=ALICE)
            result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "approved", "approved_by": ALICE}


@pytest.fixture
def details_only(files: dict[str, str]) -> dict[str, str]:
    """``files`` with ``deploys`` (the deployer's rule) keeping its requests' arguments to Details."""
    Path(files["APPROVAL_POLICY"]).write_text(
        f"rules:\n  - name: deploys\n    tool: 'deploy-*'\n    approvers: [{BOB}]\n    arguments: details-only\n"
        "  - name: default\n",
        encoding="utf-8",
    )
    return files


async def test_a_callers_details_only_rule_keeps_its_requests_arguments_and_context_out_of_the_channel(
    real_redis: aioredis.Redis, harness: Any, prefix: str, details_only: dict[str, str]
) -> None:
    secret = "zzsecretzz"
    args = {"action": "Rotate the key", "details": {"key": secret}, "context": f"rotating {secret}"}
    settings = {"approval_policy": details_only["APPROVAL_POLICY"]}
    async with (
        harness(real_redis, settings=settings) as h,
        http_server(h, prefix, details_only) as url,
        client_as(url, "deployer") as deployer,
    ):
        call = asyncio.ensure_future(deployer.call_tool("request_approval", args))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert "shown only in Details" in str(request["blocks"])  # the named rule's, not the default's
        await h.ws.click(request, "Approve", user=BOB)
        await asyncio.wait_for(call, 20)
        calls = [c for c in h.ws.calls() if not c.method.startswith("views.")]
    assert [c.method for c in calls if secret in json.dumps(c.params)] == []


STRICT = {"strict": "strict-token-0123456789abcdef00", "lenient": "lenient-token-0123456789abcdef0"}


def strict_files(tmp_path: Path, policy: str, **rules: str) -> dict[str, str]:
    """APPROVAL_POLICY ``policy`` and MCP_CALLERS of ``strict`` (approvals_anyone_in_channel false) and ``lenient``
    (true), each with the ``policy_rule`` ``rules`` gives it (none: the rules match by action)."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy, encoding="utf-8")
    lines = ["callers:"]
    for name, token in STRICT.items():
        lines += [
            f"  - name: {name}",
            f'    token_sha256: "{hashlib.sha256(token.encode()).hexdigest()}"',
            f"    channels: [{GENERAL}]",
            f"    people: [{ALICE}, {BOB}]",
            "    approvals: true",
            f"    approvals_anyone_in_channel: {'true' if name == 'lenient' else 'false'}",
        ] + ([f"    policy_rule: {rules[name]}"] if name in rules else [])
    callers = tmp_path / "callers.yaml"
    callers.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"APPROVAL_POLICY": str(path), "MCP_CALLERS": str(callers)}


async def refused(client: Client, args: dict[str, Any]) -> str:
    """The tool error of a request_approval that must be refused at once (one that asks would wait: bounded)."""
    result = await asyncio.wait_for(client.call_tool("request_approval", args), 30)
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


async def test_a_policy_rule_of_the_requester_and_named_people_is_the_channels_without_a_requester(
    real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    """A rule ``approvers: [requester, Bob]`` asked for nobody in particular lets anyone in the channel decide (the
    requester entry is the channel's then): a caller that may not have anyone in the channel decide is refused,
    as with ``requester`` alone, and a caller that may is told so in the request ("anyone in this channel")."""
    policy = f"rules:\n  - name: pair\n    tool: 'drop*'\n    approvers: [requester, {BOB}]\n  - name: default\n"
    files = strict_files(tmp_path, policy, strict="pair", lenient="pair")
    settings = {"approval_policy": files["APPROVAL_POLICY"]}
    async with (
        harness(real_redis, settings=settings) as h,
        http_server(h, prefix, files, ask_user=False) as url,
        bearer_client(url, STRICT["strict"]) as strict,
        bearer_client(url, STRICT["lenient"]) as lenient,
    ):
        text = await refused(strict, {"action": "drop the prod db"})
        assert "caller strict, rule `approvals_anyone_in_channel`" in text
        assert h.ws.messages(GENERAL) == []
        # Named, the request is the requester's and Bob's: Carol (named nowhere) can't decide it.
        call = asyncio.ensure_future(strict.call_tool("request_approval", {"action": "drop the db", "user": ALICE}))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert f"Waiting for <@{ALICE}>, <@{BOB}>" in str(request["blocks"])
        await h.ws.click(request, "Approve", user=CAROL)
        await asyncio.sleep(0.5)
        assert not call.done()
        await h.ws.click(request, "Approve", user=BOB)
        assert (await asyncio.wait_for(call, 20)).structured_content == {"status": "approved", "approved_by": BOB}

        call = asyncio.ensure_future(lenient.call_tool("request_approval", {"action": "drop the cache"}))
        request = await h.ws.wait_for_message(
            channel=GENERAL,
            predicate=lambda m: has_controls(m) and "drop the cache" in str(m["blocks"]),
            timeout=20,
        )
        assert f"Waiting for anyone in this channel, <@{BOB}>" in str(request["blocks"])
        await h.ws.click(request, "Approve", user=CAROL)
        result = await asyncio.wait_for(call, 20)
        assert result.structured_content == {"status": "approved", "approved_by": CAROL}


async def test_the_rule_an_action_matches_decides_whether_anyone_in_the_channel_would_decide(
    real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    """Without a ``policy_rule`` the rule the request's ``action`` matches decides it: one whose approvers are the
    channel is refused for a caller that may not have anyone in the channel decide, even with a ``user`` given
    (``APPROVERS`` says ``requester``); an action another rule (Bob's) decides is asked."""
    policy = (
        f"rules:\n  - name: anyone\n    tool: 'drop*'\n    approvers: [channel]\n"
        f"  - name: bob\n    approvers: [{BOB}]\n"
    )
    files = strict_files(tmp_path, policy)
    settings = {"approval_policy": files["APPROVAL_POLICY"]}
    async with (
        harness(real_redis, settings=settings) as h,
        http_server(h, prefix, files) as url,
        bearer_client(url, STRICT["strict"]) as strict,
    ):
        text = await refused(strict, {"action": "drop the prod db", "user": ALICE})
        assert "caller strict, rule `approvals_anyone_in_channel`" in text
        assert h.ws.messages(GENERAL) == []
        call = asyncio.ensure_future(strict.call_tool("request_approval", {"action": "restart the api"}))
        request = await h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
        assert f"Waiting for <@{BOB}>" in str(request["blocks"])
        await h.ws.click(request, "Approve", user=BOB)
        assert (await asyncio.wait_for(call, 20)).structured_content == {"status": "approved", "approved_by": BOB}
