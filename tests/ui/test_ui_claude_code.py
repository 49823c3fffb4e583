"""The real Claude Code CLI's permission prompt in the playground, over streamable HTTP: ``claude mcp add
--transport http`` of the playground's MCP server (its bearer token), ``claude -p ... --permission-prompt-tool
mcp__slack-ask__approve_tool_use``, offline against a loopback fake of the Messages API; Alice approves the
command in the browser and Claude Code runs it. The docs' ``docs/claude-code-permission.png`` is (re)written when
missing or when ``UPDATE_SCREENSHOTS=1``. Skipped without Chromium and Playwright (tests/ui/conftest.py) or
without the CLI (:mod:`bot.testing.claude_code`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from bot.playground.launcher import Playground
from bot.testing.anthropic_server import FakeAnthropic
from bot.testing.claude_code import claude_binary, offline_env
from tests.ui.conftest import ROOT, shoot

SHOT = ROOT / "docs" / "claude-code-permission.png"
COMMAND = "echo shipped > release-notes.txt && cat release-notes.txt"
BUDGET = 120  # seconds the CLI may take, a loaded machine included


async def run(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), BUDGET)
    finally:
        if process.returncode is None:
            process.kill()
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_ui_claude_code_permission_prompt_approved_in_the_playground(
    page: Any, playground: Playground, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    claude, why = claude_binary()
    if claude is None:
        pytest.skip(why)
    assert playground.mcp is not None
    tool_use = {"name": "Bash", "input": {"command": COMMAND, "description": "Write the release notes"}}
    async with FakeAnthropic(tool_use=tool_use) as fake:
        home = tmp_path / "home"
        home.mkdir()
        env = offline_env(home=home, base_url=fake.base_url)
        add = [claude, "mcp", "add", "--scope", "user", "--transport", "http", "slack-ask", playground.mcp.url]
        add += ["--header", f"Authorization: Bearer {playground.mcp.token}"]
        code, out, err = await run(*add, env=env, cwd=tmp_path)
        assert code == 0, (out, err)
        prompt = [claude, "-p", "Write the release notes.", "--output-format", "json"]
        prompt += ["--permission-prompt-tool", "mcp__slack-ask__approve_tool_use"]
        cli = asyncio.ensure_future(run(*prompt, env=env, cwd=tmp_path))
        try:
            replies = page.locator("#messages").get_by_role("button", name="1 reply")
            await expect(replies).to_be_visible(timeout=BUDGET * 1000)
            await replies.click()
            thread = page.locator("#thread-pane")
            await expect(thread.get_by_text("Approval needed").first).to_be_visible()
            await expect(thread.get_by_role("button", name="Approve")).to_be_visible()
            await page.locator("#composer-text").blur()
            await shoot(page, "claude-code-permission")
            if not SHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
                await page.screenshot(path=str(SHOT))
            assert not cli.done()  # Claude Code waits for Alice
            await thread.get_by_role("button", name="Approve").click()
            code, out, err = await cli
        finally:
            cli.cancel()
            await asyncio.gather(cli, return_exceptions=True)
    assert code == 0, err
    assert (tmp_path / "release-notes.txt").read_text().strip() == "shipped"
    assert [r.get("content") for r in fake.tool_results()] == ["shipped"]
