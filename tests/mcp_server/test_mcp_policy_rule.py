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
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, has_controls
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
async def http_server(h: Any, prefix: str, files: dict[str, str]) -> AsyncIterator[str]:
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
