"""The real Claude Code CLI's permission prompts answered in Slack: ``claude -p ... --permission-prompt-tool
mcp__slack-ask__approve_tool_use`` with ``python -m bot mcp`` added as its MCP server (``claude mcp add``, as the
docs write it), offline against a loopback fake of the Anthropic Messages API (:mod:`bot.testing.anthropic_server`)
whose model asks to run one Bash command. The prompt is approved, or declined with a reason, in the fake Slack by
the harness's ``serve`` process on the same Redis; the CLI then runs the command, or reports the denial.

The CLI comes from npm (``@anthropic-ai/claude-code``, which fetches its native binary from the npm registry),
installed once into ``~/.cache/askbot-claude-code`` and reused (:mod:`bot.testing.claude_code`); without npm or
the binary (offline, no registry) the test is skipped, saying why."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing.anthropic_server import FakeAnthropic
from bot.testing.claude_code import claude_binary, offline_env
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls
from tests.mcp_server.mcp_support import SLACK_TOKEN

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]
REDIS_ENV: dict[str, str] = {}

STARTUP_SECONDS = 90  # the CLI and the MCP server it starts, on a loaded machine: a budget
COMMAND = "echo approved-in-slack > approved.txt && cat approved.txt"  # a write: Claude Code asks first


@pytest.fixture(scope="module")
def claude() -> str:
    """The ``claude`` binary (:func:`bot.testing.claude_code.claude_binary`; skipped, saying why, without it)."""
    binary, why = claude_binary()
    if binary is None:
        pytest.skip(why)
    return binary


async def run(*args: str, env: dict[str, str], cwd: Path, budget: float) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), budget)
    finally:
        if process.returncode is None:
            process.kill()
    return int(process.returncode or 0), out.decode(), err.decode()


@contextlib.asynccontextmanager
async def claude_with_slack(
    claude: str, h: Any, prefix: str, fake: FakeAnthropic, tmp_path: Path, *, more: dict[str, str] | None = None
) -> AsyncIterator[asyncio.Future[tuple[int, str, str]]]:
    """``claude mcp add`` of ``python -m bot mcp`` (the docs' set-up, in a home of its own; ``more``: more of its
    settings), then the ``claude -p`` that asks it, started (a task of its exit status, stdout, stderr)."""
    home = tmp_path / "home"
    home.mkdir()
    env = offline_env(home=home, base_url=fake.base_url)
    server_env = {
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": h.ws.api_url,
        **REDIS_ENV,
        "REDIS_PREFIX": prefix,
        "MCP_ASK_CHANNEL": GENERAL,
        "MCP_ASK_USER": ALICE,
        "LOG_LEVEL": "WARNING",
        **(more or {}),
    }
    add = [claude, "mcp", "add", "--scope", "user", "slack-ask"]
    for name, value in server_env.items():
        add += ["--env", f"{name}={value}"]
    add += ["--", sys.executable, "-m", "bot", "mcp"]
    code, out, err = await run(*add, env=env, cwd=tmp_path, budget=STARTUP_SECONDS)
    assert code == 0, (out, err)
    prompt = [claude, "-p", "Say hello from the shell.", "--output-format", "json"]
    prompt += ["--permission-prompt-tool", "mcp__slack-ask__approve_tool_use"]
    cli = asyncio.ensure_future(run(*prompt, env=env, cwd=tmp_path, budget=STARTUP_SECONDS * 2))
    try:
        yield cli
    finally:
        cli.cancel()  # killed if still running (a failed test)
        await asyncio.gather(cli, return_exceptions=True)


async def prompt_in_slack(h: Any, cli: Any) -> Any:
    """The approval request Claude Code's prompt posted; fails with the CLI's output if it ended first."""
    message = asyncio.ensure_future(
        h.ws.wait_for_message(channel=GENERAL, predicate=has_controls, timeout=STARTUP_SECONDS)
    )
    await asyncio.wait([message, cli], return_when=asyncio.FIRST_COMPLETED)
    if not message.done():
        message.cancel()
        code, out, err = await cli
        pytest.fail(f"claude ended ({code}) before asking in Slack: {out[-1500:]} {err[-1500:]}")
    return await message


async def test_claude_code_runs_the_command_a_person_approved_in_slack(
    claude: str, real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    tool_use = {"name": "Bash", "input": {"command": COMMAND, "description": "Say hello"}}
    async with (
        harness(real_redis) as h,
        FakeAnthropic(tool_use=tool_use) as fake,
        claude_with_slack(claude, h, prefix, fake, tmp_path) as cli,
    ):
        request = await prompt_in_slack(h, cli)
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == request["thread_ts"])
        assert f"Bash: {COMMAND}" in html.unescape(root["text"])  # what would run, readable in the thread
        assert request["text"] == "Approval needed: Bash" and COMMAND in html.unescape(str(request["blocks"]))
        assert not cli.done()  # Claude Code waits for the person
        await h.ws.click(request, "Approve", user=ALICE)
        code, out, err = await cli
    assert code == 0, err
    results = fake.tool_results()
    assert [r.get("content") for r in results] == ["approved-in-slack"]  # the command ran, as approved
    assert (tmp_path / "approved.txt").read_text().strip() == "approved-in-slack"
    assert json.loads(out)["result"] == "RESULT: approved-in-slack"


async def test_claude_code_does_not_run_a_command_declined_in_slack_and_is_told_why(
    claude: str, real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    tool_use = {"name": "Bash", "input": {"command": "touch declined-file", "description": "Make a file"}}
    async with (
        harness(real_redis) as h,
        FakeAnthropic(tool_use=tool_use) as fake,
        claude_with_slack(claude, h, prefix, fake, tmp_path) as cli,
    ):
        request = await prompt_in_slack(h, cli)
        await h.ws.click(request, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "not on this branch"}}, user=ALICE)
        code, _out, err = await cli
    assert code == 0, err
    assert not (tmp_path / "declined-file").exists()  # never ran
    results = fake.tool_results()
    assert len(results) == 1 and results[0].get("is_error") is True
    assert "not on this branch" in str(results[0].get("content"))  # the model is told who declined and why


async def test_claude_code_runs_the_command_as_a_person_edited_it_in_slack(
    claude: str, real_redis: aioredis.Redis, harness: Any, prefix: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    rules = f"  - tool: Bash\n    approvers: [{ALICE}]\n    edit: [command]\n  - name: default\n    tool: '*'\n"
    policy.write_text(f"rules:\n{rules}", encoding="utf-8")
    asked = "echo as-asked > edited.txt && cat edited.txt"
    tool_use = {"name": "Bash", "input": {"command": asked, "description": "Say hello"}}
    async with (
        harness(real_redis, settings={"approval_policy": str(policy)}) as h,
        FakeAnthropic(tool_use=tool_use) as fake,
        claude_with_slack(claude, h, prefix, fake, tmp_path, more={"APPROVAL_POLICY": str(policy)}) as cli,
    ):
        request = await prompt_in_slack(h, cli)
        await h.ws.click(request, "Edit", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_edit_modal")
        edited = {"edit:command": {"edit_value": "echo edited-in-slack > edited.txt && cat edited.txt"}}
        await h.ws.submit_view(form, edited, user=ALICE)
        code, _out, err = await cli
    assert code == 0, err
    assert [r.get("content") for r in fake.tool_results()] == ["edited-in-slack"]  # the edited command ran
    assert (tmp_path / "edited.txt").read_text().strip() == "edited-in-slack"
