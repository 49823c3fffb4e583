"""The real Claude Code CLI for tests: installed from npm (``@anthropic-ai/claude-code``, which fetches its native
binary from the npm registry) once into ``~/.cache/askbot-claude-code`` (``CLAUDE_CODE_CACHE``) and reused, so a
test run costs no install after the first; and the environment that runs it offline against a loopback fake of
the Messages API (:mod:`bot.testing.anthropic_server`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

VERSION = "2.1.197"  # the release these prompts were observed with (docs/mcp-server.md)
CACHE = Path(os.environ.get("CLAUDE_CODE_CACHE", Path.home() / ".cache" / "askbot-claude-code"))
INSTALL_SECONDS = 600


def claude_binary() -> tuple[str | None, str]:
    """``(path of the claude binary, "")``, installing it into :data:`CACHE` first when missing; ``(None, why
    not)`` when npm is missing, the install fails, or the binary does not run here. One process at a time (a file
    lock in the cache): parallel test workers share it, and one that ran the binary while another's install was
    still writing it failed (``Text file busy``)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process ends
        return _installed()


def _installed() -> tuple[str | None, str]:
    binary = CACHE / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            return None, "npm is not installed: the Claude Code CLI comes from npm (@anthropic-ai/claude-code)"
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"@anthropic-ai/claude-code@{VERSION}"],
                cwd=CACHE,
                capture_output=True,
                text=True,
                timeout=INSTALL_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"npm install @anthropic-ai/claude-code took over {INSTALL_SECONDS} s (no registry?)"
        if done.returncode != 0 or not binary.exists():
            return None, f"could not install @anthropic-ai/claude-code from npm: {done.stderr.strip()[-300:]}"
    probe = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        return None, f"the Claude Code binary does not run here: {probe.stderr.strip()[-300:]}"
    return str(binary), ""


def offline_env(*, home: Path, base_url: str) -> dict[str, str]:
    """The environment of a ``claude`` run in its own ``home``, talking only to the fake Messages API at
    ``base_url``, with the MCP settings of the docs' permission-prompt set-up (docs/mcp-server.md)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "ENABLE_TOOL_SEARCH": "false",
        "MCP_TOOL_TIMEOUT": "600000",  # ms: how long Claude Code waits for the prompt's answer
        # -p connects its MCP servers in the background (MCP_CONNECTION_NONBLOCKING=0: it waits for them, up to
        # MCP_CONNECT_TIMEOUT_MS, default 5 s) and looks the prompt tool up at the first tool use: a server not up
        # by then is "not found" and the run fails
        "MCP_CONNECTION_NONBLOCKING": "0",
        "MCP_CONNECT_TIMEOUT_MS": "60000",
        "MCP_TIMEOUT": "60000",  # ms a server may take to connect at all (default 30 s)
        "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT": "0",  # over HTTP: never abort a silent call
    }
