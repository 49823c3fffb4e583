"""``--agent my_agent:build`` from the folder holding ``my_agent.py``, as the README says, as a real process: the
module is found in the current directory however Python was started (``-P`` / ``PYTHONSAFEPATH`` leave it off the
import path), the banner names the agent and its tools, and a module that is there but fails to import names what
it lacks (not "no module named my_agent")."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.agent.loading import load_agent
from bot.agent.model import NoModel
from bot.errors import ConfigError
from bot.testing.ports import free_port

SETTING_PREFIXES = ("SLACK_", "OPENAI_", "REDIS_", "ASK_", "RUN_", "LOG_", "PORT", "AGENT", "MCP_", "PYTHONSAFEPATH")
MY_AGENT = '''
from bot.agent import Agent, make_ask_user_tool, tool


@tool
async def coffee_count(team: str) -> dict[str, int]:
    """How many coffees a team drank today."""
    return {"cups": 3}


def build(*, model, store) -> Agent:
    return Agent(id="coffee", name="Coffee", instructions="Count coffee.", model=model, store=store,
                 tools=[coffee_count, make_ask_user_tool()])
'''


def env(**extra: str) -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if not k.upper().startswith(SETTING_PREFIXES)}
    values.update(PORT="0", MCP_PORT=str(free_port()), **extra)
    return values


async def banner(cwd: Path, *args: str, environ: dict[str, str]) -> list[str]:
    """The playground's output up to its ``Agent:`` line; then it is stopped with SIGTERM."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=environ, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(30):
            while raw := await proc.stdout.readline():
                lines.append(raw.decode().rstrip("\n"))
                if lines[-1].startswith("Agent:"):
                    break
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 20)
    return lines


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["-P", "-m", "bot", "playground", "--agent", "my_agent:build"], {}),
        (["-m", "bot", "playground", "--agent", "my_agent:build"], {"PYTHONSAFEPATH": "1"}),
        (["-m", "bot", "playground"], {"PYTHONSAFEPATH": "1", "AGENT": "my_agent:build"}),
    ],
    ids=["python -P", "PYTHONSAFEPATH", "AGENT="],
)
async def test_my_agent_is_found_in_the_current_directory(
    tmp_path: Path, args: list[str], extra: dict[str, str]
) -> None:
    (tmp_path / "my_agent.py").write_text(MY_AGENT)
    lines = await banner(tmp_path, *args, environ=env(**extra))
    assert "Agent: my_agent:build (tools: ask_user, coffee_count)" in lines, lines


def test_a_module_that_fails_to_import_names_what_it_lacks_and_one_that_is_nowhere_too(tmp_path: Path) -> None:
    (tmp_path / "broken_agent.py").write_text("import not_installed_anywhere_xyz\n" + MY_AGENT)
    out = subprocess.run(
        [sys.executable, "-P", "-m", "bot", "playground", "--agent", "broken_agent:build"],
        env=env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: AGENT 'broken_agent:build': cannot import broken_agent "
        "(ModuleNotFoundError: No module named 'not_installed_anywhere_xyz')"
    ], out.stderr
    out = subprocess.run(  # and one that is nowhere at all: the same one line
        [sys.executable, "-P", "-m", "bot", "playground", "--agent", "nowhere_agent:build"],
        env=env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert [line for line in out.stderr.splitlines() if line.startswith("error:")] == [
        "error: AGENT 'nowhere_agent:build': cannot import nowhere_agent "
        "(ModuleNotFoundError: No module named 'nowhere_agent')"
    ], out.stderr


@pytest.mark.parametrize(("module", "extra"), [("pydantic_ai", "pydantic-ai"), ("agents.run", "openai-agents")])
def test_an_agent_whose_framework_is_not_installed_is_told_which_extra_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, extra: str
) -> None:
    """``--agent`` naming a framework agent without the framework's extra: the error says how to install it
    (before: only "No module named 'pydantic_ai'")."""
    name = f"needs_{extra.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_agent(f"{name}:build", model=NoModel("none"), store=None)  # type: ignore[arg-type]
    assert str(caught.value).endswith(
        f"; install its framework with {sys.executable} -m pip install -e '.[{extra}]'"
    ), caught.value
