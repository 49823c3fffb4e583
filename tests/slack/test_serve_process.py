"""``python -m bot serve|web|worker`` as a real process, configured only by its environment and its flags.

Start-up either works or refuses with one ``error: ...`` line per problem and exit status 2 (never a
traceback, never a secret); Socket Mode says it is connected only once it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.__main__ import main
from bot.fakeslack import Workspace
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.ports import free_port
from bot.testing.slack_scenarios import text_is

ROOT = Path(__file__).resolve().parent.parent.parent
SETTING_PREFIXES = ("SLACK_", "OPENAI_", "REDIS_", "ASK_", "RUN_", "LOG_", "PORT", "AGENT_")
TOKEN = "xoxb-serve-test-0123456789"
APP_TOKEN = "xapp-1-A0PLAYGRND-serve-test"
REAL_REDIS = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/0")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(SETTING_PREFIXES)}
    env.update(extra)
    return env


def complete_env(**extra: str) -> dict[str, str]:
    """Every setting ``serve`` needs in HTTP mode (Redis and the model are only contacted when used)."""
    settings = {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "serve-test-signing-secret",
        "OPENAI_API_KEY": "sk-serve-test-key",
        "REDIS_URL": REAL_REDIS,
        "PORT": "0",
    }
    return clean_env(**{**settings, **extra})


def live_env(
    ws: Workspace,
    secret: str,
    *,
    prefix: str,
    redis_env: dict[str, str],
    model: FakeOpenAI | None = None,
    **extra: str,
) -> dict[str, str]:
    """The environment of a bot process that serves the fake Slack ``ws`` (signing ``secret``) on the real Redis
    under ``prefix``, logging at INFO; ``model``: the loopback model it talks to (with a key), none for ``web``."""
    env = {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": secret,
        "SLACK_API_URL": ws.api_url,
        "REDIS_PREFIX": prefix,
        **redis_env,
        "LOG_LEVEL": "INFO",
    }
    if model is not None:
        env |= {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url}
    return clean_env(**env, **extra)


def run_bot(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    """stderr's lines, checked to be a clean refusal: exit status 2, no traceback, nothing on stdout. Without
    ``SLACK_API_URL`` a process that got as far as checking its token warns it can't reach slack.com (no Slack
    here) and goes on: that warning is left out."""
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    return [line for line in out.stderr.splitlines() if "start-up: cannot reach the Slack API" not in line]


# --- malformed and missing settings ------------------------------------------------------------

BAD_SETTINGS = {
    "PORT": ("abc", "must be a whole number from 0 to 65535"),
    "ASK_ANSWERERS": ("everyone", "must be requester or channel"),
    "ASK_TTL_SECONDS": ("-5", "must be more than 0 seconds"),
    "REDIS_URL": ("notaurl", "must be a redis://, rediss:// or unix:// URL"),
    "LOG_LEVEL": ("LOUD", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
}


@pytest.mark.parametrize(("name", "value"), [("PORT", "99999"), *((n, v) for n, (v, _) in BAD_SETTINGS.items())])
def test_each_bad_setting_is_one_error_line(name: str, value: str) -> None:
    reason = BAD_SETTINGS[name][1]
    [line] = error_lines(run_bot("serve", env=complete_env(**{name: value})))
    assert line.startswith(f"error: {name}: {reason}")
    assert line.endswith(f"(got {value!r})")


def test_every_bad_setting_is_reported_at_once() -> None:
    env = complete_env(**{name: value for name, (value, _reason) in BAD_SETTINGS.items()})
    lines = error_lines(run_bot("serve", env=env))
    assert len(lines) == len(BAD_SETTINGS)
    for name, (value, reason) in BAD_SETTINGS.items():
        [line] = [line for line in lines if line.startswith(f"error: {name}: ")]
        assert line.startswith(f"error: {name}: {reason}") and line.endswith(f"(got {value!r})")


def test_rules_across_settings_and_missing_ones_are_reported_with_the_bad_values(tmp_path: Path) -> None:
    """A bad value, two rules across settings broken, and settings not set: every line in one round (before: the
    bad value alone; then, once it was fixed, the first rule alone, and no "not set" line with it)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - tool: '*'\n")
    env = clean_env(PORT="x", ASK_ESCALATE_TO="C1", APPROVERS="U1", APPROVAL_POLICY=str(policy))
    lines = error_lines(run_bot("serve", env=env))
    assert lines[0] == "error: PORT: must be a whole number from 0 to 65535 (got 'x')"
    assert any(line.startswith("error: APPROVERS: not with APPROVAL_POLICY") for line in lines), lines
    assert "error: ASK_ESCALATE_AFTER: must be set when ASK_ESCALATE_TO is (when to ask them)" in lines
    assert [line.split(" (")[0] for line in lines if line.startswith("error: not set:")] == [
        "error: not set: SLACK_BOT_TOKEN",
        "error: not set: SLACK_SIGNING_SECRET",
        "error: not set: REDIS_URL",
        "error: not set: OPENAI_API_KEY",
    ]


def test_bad_secret_settings_are_not_echoed() -> None:
    env = complete_env(SLACK_BOT_TOKEN="xapp-1-A0-hunter2", REDIS_URL="redis//:hunter2@db.example:6379")
    lines = error_lines(run_bot("serve", env=env))
    assert [line.split(":")[1] for line in lines] == [" SLACK_BOT_TOKEN", " REDIS_URL"]
    assert all(line.endswith("(value hidden)") for line in lines)
    assert "hunter2" not in "".join(lines)


@pytest.mark.parametrize(
    ("extra", "messages"),
    [
        (  # nothing set: every setting serve needs, the token first, with the way to try it without Slack
            {},
            [
                "not set: SLACK_BOT_TOKEN (xoxb-; `python -m bot playground` tries it without Slack)",
                "not set: SLACK_SIGNING_SECRET (",
                "not set: REDIS_URL (",
                "not set: OPENAI_API_KEY (",
            ],
        ),
        (  # a bad value and no token, told in one round
            {"PORT": "x"},
            [
                "PORT: must be a whole number",
                "not set: SLACK_BOT_TOKEN (",
                "not set: SLACK_SIGNING_SECRET (",
                "not set: REDIS_URL (",
                "not set: OPENAI_API_KEY (",
            ],
        ),
        (
            {"SLACK_BOT_TOKEN": "xoxb-x"},
            ["not set: SLACK_SIGNING_SECRET (verifies requests)", "not set: REDIS_URL (", "not set: OPENAI_API_KEY ("],
        ),
        (
            {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s"},
            ["not set: REDIS_URL (", "not set: OPENAI_API_KEY ("],
        ),
        (
            {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s", "REDIS_URL": "redis://127.0.0.1:6379/0"},
            ["not set: OPENAI_API_KEY ("],
        ),
        (  # a bad value and what is not set, told in one round (what is not set was told once the value was fixed)
            {"SLACK_BOT_TOKEN": "xoxb-x", "ASK_ANSWERERS": "everyone"},
            [
                "ASK_ANSWERERS: must be requester or channel",
                "not set: SLACK_SIGNING_SECRET (",
                "not set: REDIS_URL (",
                "not set: OPENAI_API_KEY (",
            ],
        ),
        (
            {
                "SLACK_BOT_TOKEN": "xoxb-x",
                "SLACK_SIGNING_SECRET": "s",
                "REDIS_URL": "redis://127.0.0.1:6379/0",
                "PORT": "x",
            },
            ["PORT: must be a whole number", "not set: OPENAI_API_KEY ("],
        ),
        (  # a refused token is told as refused, and the rest serve needs as not set, in the same round
            {"SLACK_BOT_TOKEN": "bad token", "PORT": "x"},
            [
                "SLACK_BOT_TOKEN: ",
                "PORT: must be a whole number",
                "not set: SLACK_SIGNING_SECRET (",
                "not set: REDIS_URL (",
                "not set: OPENAI_API_KEY (",
            ],
        ),
        (  # a refused value is told as refused, not as not set too
            {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s", "REDIS_URL": "notaurl"},
            ["REDIS_URL: must be a redis://", "not set: OPENAI_API_KEY ("],
        ),
    ],
)
def test_serve_refuses_incomplete_settings_with_a_line_per_setting(extra: dict[str, str], messages: list[str]) -> None:
    lines = error_lines(run_bot("serve", env=clean_env(**extra)))
    assert len(lines) == len(messages), lines
    for line, message in zip(lines, messages, strict=True):
        assert line.startswith("error: ") and message in line
        assert "xoxb-x" not in line


# --- transport flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "web"])
def test_socket_flag_needs_an_app_token(command: str) -> None:
    [line] = error_lines(run_bot(command, "--socket", env=complete_env()))
    assert line.startswith("error: not set: SLACK_APP_TOKEN (") and "--socket needs it" in line


@pytest.mark.parametrize("command", ["serve", "web"])
def test_http_flag_needs_a_signing_secret_even_with_an_app_token(command: str) -> None:
    env = complete_env(SLACK_APP_TOKEN=APP_TOKEN)
    del env["SLACK_SIGNING_SECRET"]
    [line] = error_lines(run_bot(command, "--http", env=env))
    assert line.startswith("error: not set: SLACK_SIGNING_SECRET (") and "--http needs it" in line


@pytest.mark.parametrize("command", ["serve", "web", "worker", "playground", "mcp"])
def test_each_command_has_its_own_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bot COMMAND --help``: that command's usage, what it runs and the options it takes (before: the
    top-level help, whatever the command), without reading any setting."""
    from bot.__main__ import main

    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m bot {command} [-h]"), out
    assert ("--http" in out) == (command in ("serve", "web", "mcp")) and "commands:" not in out


def test_transport_flags_are_for_serve_web_and_mcp_only() -> None:
    [line] = error_lines(run_bot("worker", "--socket", env=complete_env()))
    assert line == "error: --socket applies to serve, web and mcp only, not worker"
    [line] = error_lines(run_bot("mcp", "--socket", env=complete_env()))
    assert line == "error: python -m bot mcp serves stdio, or streamable HTTP with --http; not --socket"
    # policy takes its own arguments, first; after an option it is refused (before: the playground started)
    [line] = error_lines(run_bot("--agent", "my_agent:build", "policy", env=clean_env()))
    assert line.startswith("error: policy comes first: python -m bot policy check FILE")


def test_mcp_names_what_it_lacks() -> None:
    env = complete_env()
    del env["REDIS_URL"]
    [line] = error_lines(run_bot("mcp", env=env))
    assert line.startswith("error: not set: REDIS_URL")
    [line] = error_lines(run_bot("mcp", "--http", env=complete_env()))  # no MCP_TOKEN
    assert line.startswith("error: not set: MCP_TOKEN (or MCP_CALLERS: ")  # either names the callers over HTTP
    lines = error_lines(run_bot("mcp", "--http", env=clean_env()))  # nothing set: all of it in one round
    assert [line.split(" (")[0] for line in lines] == [
        "error: not set: SLACK_BOT_TOKEN",
        "error: not set: REDIS_URL",
        "error: not set: MCP_TOKEN",
    ]


def test_procfile_process_types_fit_their_transport(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Every Procfile command parses; ``web`` (the type Heroku-like hosts route $PORT to) is HTTP; Socket Mode
    (which never binds $PORT) is another type."""
    entries = dict(line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip())
    commands = {name.strip(): command.split() for name, command in entries.items()}
    assert commands["web"] == ["python", "-m", "bot", "serve", "--http"]
    socket_types = [name for name, argv in commands.items() if "--socket" in argv]
    assert socket_types and "web" not in socket_types
    assert {argv[3] for argv in commands.values()} == {"serve", "web", "worker"}
    for name in os.environ:
        if name.upper().startswith(SETTING_PREFIXES):
            monkeypatch.delenv(name)
    for argv in commands.values():
        assert argv[:3] == ["python", "-m", "bot"]
        assert main(argv[3:]) == 2  # parsed, then refused for want of SLACK_BOT_TOKEN (argparse would exit)
        assert "error: not set: SLACK_BOT_TOKEN (" in capsys.readouterr().err


# --- what the process finds at start -------------------------------------------------------------


def test_unreachable_redis_is_refused_at_start() -> None:
    port = free_port()  # nothing listens there
    env = complete_env(REDIS_URL=f"redis://admin:hunter2@127.0.0.1:{port}/0")
    [line] = error_lines(run_bot("serve", env=env))
    assert line == f"error: cannot reach Redis at 127.0.0.1:{port} (Connection refused); is it running? check REDIS_URL"


@pytest.mark.parametrize("command", ["web", "worker"])
def test_unreachable_redis_is_refused_by_every_role(command: str) -> None:
    env = complete_env(REDIS_URL="redis://nosuchhost.invalid:6379/0")
    [line] = error_lines(run_bot(command, env=env))
    assert line.startswith("error: cannot reach Redis at nosuchhost.invalid:6379 (")


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
def test_busy_port_is_refused(real_redis: Any) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        [line] = error_lines(run_bot("serve", env=complete_env(PORT=str(port))))
    assert line == f"error: cannot listen on port {port}: it is in use by another process; stop it or set PORT"


async def start_bot(*args: str, env: dict[str, str], sigint: bool = True) -> asyncio.subprocess.Process:
    """``python -m bot *args``; ``sigint``: with SIGINT at its default disposition, as from a terminal (a test run
    started in the background, ``nohup pytest &``, hands its children SIGINT ignored), else ignored."""
    handler = signal.SIG_DFL if sigint else signal.SIG_IGN
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, handler),
    )


async def refused_at_start(*args: str, env: dict[str, str], within: float = 30) -> str:
    """``python -m bot *args`` run until it exits on its own (within ``within`` seconds, else the test fails with
    its output), checked to exit 2 (a start-up refusal); its output."""
    proc = await start_bot(*args, env=env)
    try:
        await asyncio.wait_for(proc.wait(), within)
    except TimeoutError:
        pytest.fail("still running, not refused at start:\n" + await stop(proc))
    output = await stop(proc)
    assert proc.returncode == 2, output
    return output


async def read_until(proc: asyncio.subprocess.Process, marker: str, *, within: float = 60) -> list[str]:
    """The process's output lines up to the first containing ``marker`` (or its end); ``within``: a budget for a
    loaded machine (a parallel suite starts several bot processes at once), not a speed requirement."""
    assert proc.stdout is not None
    lines: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        while raw := await proc.stdout.readline():
            lines.append(raw.decode().rstrip("\n"))
            if marker in lines[-1]:
                return

    try:
        await asyncio.wait_for(read(), within)
    except TimeoutError:
        pytest.fail(f"no {marker!r} within {within} s; output so far:\n" + "\n".join(lines))
    if not lines or marker not in lines[-1]:
        pytest.fail(f"the process ended before {marker!r}; its output:\n" + "\n".join(lines))
    return lines


async def stop(proc: asyncio.subprocess.Process) -> str:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    output, _ = await asyncio.wait_for(proc.communicate(), 20)
    return output.decode()


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
async def test_socket_mode_says_connected_only_once_connected(real_redis: Any, prefix: str) -> None:
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN) as ws:
        env = complete_env(SLACK_APP_TOKEN=APP_TOKEN, SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix, LOG_LEVEL="info")
        del env["SLACK_SIGNING_SECRET"]
        proc = await start_bot("serve", env=env)
        try:
            lines = await read_until(proc, "Socket Mode: connected")
            assert [c for c in ws.fake.socket_mode.connections if not c.closed], "logged before the socket opened"
        finally:
            rest = await stop(proc)
    established = [i for i, line in enumerate(lines) if "has been established" in line]
    assert established and established[0] < len(lines) - 1, "\n".join(lines)  # slack_sdk's own line comes first
    assert proc.returncode == 0, rest
    assert TOKEN not in rest and APP_TOKEN not in rest and APP_TOKEN not in "\n".join(lines)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
@pytest.mark.parametrize("command", ["serve", "web", "worker"])
async def test_a_bot_token_slack_refuses_stops_start_up_with_one_line(
    real_redis: Any, prefix: str, command: str
) -> None:
    """Found by a new user's trial: a well-formed but wrong SLACK_BOT_TOKEN started and served (the only sign a
    warning once /readyz was asked); it stops start-up, naming the setting, never showing the token."""
    async with Workspace(bot_token=TOKEN) as ws:
        wrong = "xoxb-123-456-not-this-one"
        env = complete_env(SLACK_BOT_TOKEN=wrong, SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix)
        output = await refused_at_start(command, env=env)
    assert output.splitlines() == [
        "error: Slack refused SLACK_BOT_TOKEN (auth.test: invalid_auth); check the token (xoxb-...) and that the app"
        " is installed in the workspace"
    ]
    assert wrong not in output


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
async def test_a_slack_api_out_of_reach_at_start_up_is_a_warning_and_the_process_serves(
    real_redis: Any, prefix: str
) -> None:
    """Slack down for a moment must not stop a deployment's processes (they would restart in a loop): serve warns,
    names SLACK_API_URL, and serves; /readyz says 503 until auth.test passes (tests/ops/test_health.py)."""
    closed = f"http://127.0.0.1:{free_port()}/api/"  # nothing listens there
    env = complete_env(SLACK_API_URL=closed, REDIS_PREFIX=prefix, LOG_LEVEL="info")
    proc = await start_bot("serve", env=env)
    try:
        lines = await read_until(proc, "HTTP mode")
    finally:
        rest = await stop(proc)
    warned = [line for line in lines if "start-up: cannot reach the Slack API at 127.0.0.1:" in line]
    assert warned and "check SLACK_API_URL" in warned[0], "\n".join(lines)
    assert proc.returncode == 0, rest


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
async def test_serve_logs_its_approval_policys_warnings_as_it_starts(
    real_redis: Any, prefix: str, tmp_path: Path
) -> None:
    """What `policy check` warns of (a rule nobody may satisfy for some requesters, grants a quorum never offers)
    reached no log: an operator who never ran `policy check` learned of it from declined calls."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - name: two\n    tool: deploy\n    approvers: [U0BOB0001, U0CAROL01]\n    required: 2\n"
        "    grants: [once, thread]\n  - name: default\n",
        encoding="utf-8",
    )
    closed = f"http://127.0.0.1:{free_port()}/api/"
    env = complete_env(SLACK_API_URL=closed, REDIS_PREFIX=prefix, LOG_LEVEL="info", APPROVAL_POLICY=str(policy))
    proc = await start_bot("serve", env=env)
    try:
        lines = await read_until(proc, "HTTP mode")
    finally:
        await stop(proc)
    warned = [line for line in lines if "APPROVAL_POLICY rule 1 ('two')" in line]
    assert any("can't be satisfied when U0BOB0001 or U0CAROL01 asks" in w for w in warned), "\n".join(lines)
    assert any("grants thread are never offered" in w for w in warned), "\n".join(lines)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # start-up checks, no store behaviour
async def test_socket_mode_refused_app_token_is_a_clear_error(real_redis: Any, prefix: str) -> None:
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN) as ws:
        wrong = "xapp-1-A0PLAYGRND-not-this-one"
        env = complete_env(SLACK_APP_TOKEN=wrong, SLACK_API_URL=ws.api_url, REDIS_PREFIX=prefix)
        output = await refused_at_start("serve", "--socket", env=env)
    assert output.splitlines() == [
        "error: Socket Mode: Slack refused SLACK_APP_TOKEN (invalid_auth); it must be the app's app-level token "
        "(xapp-) with the connections:write scope, and the app must have Socket Mode enabled"
    ]
    assert wrong not in output


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.real_redis
@pytest.mark.parametrize(
    ("args", "extra"),
    [(("serve",), {}), (("serve", "--http"), {"SLACK_APP_TOKEN": APP_TOKEN})],
    ids=["auto", "http-flag-over-app-token"],
)
async def test_serve_answers_a_mention_end_to_end(
    real_redis: Any,
    real_redis_env: dict[str, str],
    prefix: str,
    openai_server: FakeOpenAI,
    args: tuple[str, ...],
    extra: dict[str, str],
) -> None:
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        env = live_env(
            ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server, PORT=str(port), **extra
        )
        proc = await start_bot(*args, env=env)
        started: list[str] = []
        try:
            started = await read_until(proc, "HTTP mode")
            openai_server.script(
                Reply(
                    tool_calls=[
                        tool_call("ask_user", {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]})
                    ]
                ),
                Reply(text="Served: b."),
            )
            d = await ws.mention("U_ALICE", "C_GENERAL", "hello")
            q = await ws.wait_for_message(
                channel="C_GENERAL",
                thread_ts=d.message["ts"],
                predicate=lambda m: any(b["type"] == "actions" for b in m.get("blocks", [])),
            )
            await ws.click(q, "b", user="U_ALICE")
            await ws.wait_for_message(
                channel="C_GENERAL", thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Served: b."
            )
        finally:
            log = "\n".join(started) + "\n" + await stop(proc)
        assert proc.returncode == 0, log
        assert "stopping" in log
        assert TOKEN not in log and secret not in log and "sk-test" not in log


@pytest.mark.parametrize(
    ("sig", "sigint"),
    [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["SIGTERM", "Ctrl-C", "SIGTERM, started with SIGINT ignored"],
)
async def test_the_playground_stops_on_sigterm_as_on_ctrl_c_without_a_traceback(
    sig: signal.Signals, sigint: bool
) -> None:
    """Also when it started with SIGINT ignored (``nohup python -m bot playground &`` in a script): it stopped on
    SIGTERM by raising SIGINT, which was then ignored, and it ran on."""
    proc = await start_bot("playground", env=clean_env(PORT="0", MCP_PORT="0"), sigint=sigint)
    try:
        started = await read_until(proc, "MCP server:")
        proc.send_signal(sig)
        output, _ = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:  # it ran on: don't leave it behind
            proc.kill()
            await proc.wait()
    log = "\n".join(started) + "\n" + output.decode()
    assert proc.returncode == 0, log
    assert "Traceback" not in log and "ERROR" not in log, log


@contextlib.contextmanager
def signalling(proc: asyncio.subprocess.Process, sig: signal.Signals) -> Iterator[None]:
    """Within: ``sig`` to ``proc`` over and over, every 0.1 ms (a supervisor that signals until the process is gone,
    at its worst; the old code was killed in half the runs at this rate, and a thread sending as fast as it can
    would take a core from the rest of the suite), through a pidfd: never to another process that took the pid
    since."""
    pidfd = os.pidfd_open(proc.pid)
    done = threading.Event()

    def send() -> None:
        while not done.wait(0.0001):
            try:
                signal.pidfd_send_signal(pidfd, sig)
            except ProcessLookupError:  # reaped
                return

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        yield
    finally:
        done.set()
        sender.join()
        os.close(pidfd)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # signal handling, no store behaviour
@pytest.mark.parametrize(
    ("command", "first", "flood_after"),
    [
        ("playground", signal.SIGTERM, 0.0),
        ("playground", signal.SIGINT, 0.0),
        ("playground", signal.SIGINT, 0.4),
        ("serve", signal.SIGTERM, 0.0),
        ("mcp", signal.SIGTERM, 0.0),
    ],
    ids=["playground", "playground, Ctrl-C first", "playground, Ctrl-C, then 0.4 s", "serve", "mcp --http"],
)
async def test_sigterms_repeated_until_the_process_has_exited_never_kill_it(
    command: str,
    first: signal.Signals,
    flood_after: float,
    real_redis_env: dict[str, str],
    prefix: str,
    openai_server: FakeOpenAI,
) -> None:
    """A supervisor that keeps signalling until the process is gone (``docker stop`` after a first SIGTERM, or a
    SIGTERM after a Ctrl-C): each SIGTERM after the first changes nothing, to the very end, and the process exits 0
    with no traceback. Before: the second cancelled the playground's clean-up midway (uvicorn logged an ERROR
    traceback), also after a Ctrl-C; one in the moment the event loop's handler was removed (by the playground as
    it stopped, by ``serve`` as the loop closed), or once the playground had stopped on a Ctrl-C, hit the default
    action and killed the process (status -15); CPython reported one arriving as SIGTERM became ignored ("Signal 15
    ignored due to race condition", a traceback on stderr); ``mcp --http`` died of its first SIGTERM (uvicorn sent
    it again after restoring the default action), before its clean-up, and its handler nested until
    RecursionError. (A Ctrl-C while the playground stops still cancels the clean-up, as asyncio.Runner's second
    Ctrl-C does.)"""
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        args: tuple[str, ...] = (command,)
        if command == "serve":
            env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server, PORT=str(port))
            marker = "HTTP mode"
        elif command == "mcp":
            env = clean_env(
                SLACK_BOT_TOKEN=TOKEN,
                SLACK_API_URL=ws.api_url,
                **real_redis_env,
                REDIS_PREFIX=prefix,
                MCP_ASK_CHANNEL="C_GENERAL",
                MCP_TOKEN="mcp-test-token-0123456789abcdef",
                MCP_PORT="0",
            )
            args, marker = ("mcp", "--http"), "MCP server: streamable HTTP at"
        else:
            env, marker = clean_env(PORT="0", MCP_PORT="0"), "MCP server:"
        proc = await start_bot(*args, env=env)
        try:
            started = await read_until(proc, marker)
            proc.send_signal(first)
            await asyncio.sleep(flood_after)
            with signalling(proc, signal.SIGTERM):
                output, _ = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = "\n".join(started) + "\n" + output.decode()
    assert proc.returncode == 0, log
    assert "Traceback" not in log and "ERROR" not in log and "RecursionError" not in log, log


async def stopped(proc: asyncio.subprocess.Process, *, within: float) -> str:
    """SIGTERM to ``proc``, then its output to the end (killed if it has not ended within ``within`` s)."""
    try:
        proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(proc.communicate(), within)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return str(output.decode())


async def test_a_sigterm_while_serve_waits_for_its_redis_stops_it_at_once() -> None:
    """A supervisor stopping ``serve`` while it starts (here its Redis takes the connection and never answers, so
    the start-up check would wait ``REDIS_CHECK_SECONDS``, 10 s): it stops at once, exit status 0, no error line.
    Before, it finished starting first: 10 s later it exited 2, "did not answer within 10 s"."""
    connected = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        await reader.read()  # reads the PING, answers nothing, until the process is gone

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await start_bot("serve", env=complete_env(REDIS_URL=f"redis://127.0.0.1:{port}/0", LOG_LEVEL="INFO"))
    try:
        await asyncio.wait_for(connected.wait(), 60)  # in its start-up check
        log = await stopped(proc, within=5)
    finally:
        server.close()
        if proc.returncode is None:  # it never connected
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, log
    assert "stopped while starting" in log, log
    assert "error:" not in log and "Traceback" not in log and "HTTP mode" not in log, log


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # signal handling, no store behaviour
@pytest.mark.parametrize("command", ["serve", "playground"])
async def test_a_sigterm_while_python_m_bot_imports_stops_it_cleanly(command: str) -> None:
    """A SIGTERM in the process's first second, while ``python -m bot`` imports its modules (``bot.config``'s
    pydantic here, told by ``PYTHONPROFILEIMPORTTIME``'s line as each import ends): the process stops without
    starting, exit status 0 and no traceback. Before, SIGTERM's default action killed it (status -15). The
    playground (its Redis in-process) is not started at all: its start-up absorbed the one cancellation and it ran
    on, deaf to every later SIGTERM (found by a review of the first version of this change)."""
    env = complete_env() if command == "serve" else clean_env(PORT="0", MCP_PORT="0")
    proc = await start_bot(command, env={**env, "LOG_LEVEL": "INFO", "PYTHONPROFILEIMPORTTIME": "1"})
    try:
        await read_until(proc, "pydantic")  # an import after the bot's first lines, before anything starts
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    log = "\n".join(
        line for line in (await stopped(proc, within=30)).splitlines() if not line.startswith("import time:")
    )
    assert proc.returncode == 0, log
    assert "Traceback" not in log and "error:" not in log, log
    assert "HTTP mode" not in log and "Playground:" not in log, log  # it never started serving


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # signal handling, no store behaviour
@pytest.mark.parametrize("command", ["serve", "worker", "playground"])
async def test_a_ctrl_c_while_python_m_bot_imports_stops_it_without_a_traceback(command: str) -> None:
    """Ctrl-C (SIGINT at its default action, as from a terminal) while ``python -m bot`` imports its modules: one
    line, no traceback, a Ctrl-C's exit status (before: a KeyboardInterrupt traceback through the imports or
    asyncio.Runner)."""
    env = complete_env() if command != "playground" else clean_env(PORT="0", MCP_PORT="0")
    proc = await start_bot(command, env={**env, "LOG_LEVEL": "INFO", "PYTHONPROFILEIMPORTTIME": "1"})
    try:
        await read_until(proc, "pydantic")  # an import after the bot's first lines, before anything starts
        proc.send_signal(signal.SIGINT)
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = "\n".join(line for line in output.decode().splitlines() if not line.startswith("import time:"))
    assert proc.returncode in (130, -signal.SIGINT), log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert "stopped (Ctrl-C)" in log, log


@pytest.mark.real_redis
async def test_serve_freezes_its_start_up_heap_once_it_listens(
    real_redis_env: dict[str, str], prefix: str, openai_server: FakeOpenAI
) -> None:
    """``serve`` moves what start-up left alive into the garbage collector's permanent generation once it
    listens (``bot.serving.freeze_heap``): a full collection no longer walks it on the event loop's thread, which
    stalled every ack in the process (issue 26, the single-process ack)."""
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server, PORT=str(port))
        proc = await start_bot("serve", env=env)
        started: list[str] = []
        try:
            started = await read_until(proc, "start-up heap frozen")
        finally:
            log = "\n".join(started) + "\n" + await stop(proc)
    frozen = [int(m.group(1)) for m in re.finditer(r"start-up heap frozen: (\d+) objects", "\n".join(started))]
    assert frozen and frozen[0] > 10_000, log


def test_web_needs_no_model_key() -> None:
    """``web`` only acks and queues (the workers run the agent): it does not ask for ``OPENAI_API_KEY``, so the
    tier facing the internet never holds the model's key."""
    env = clean_env(SLACK_BOT_TOKEN="xoxb-x", SLACK_SIGNING_SECRET="s")
    [line] = error_lines(run_bot("web", env=env))
    assert line.startswith("error: not set: REDIS_URL (")
    lines = error_lines(run_bot("worker", env=env))  # the workers run the model
    assert [line.split(" (")[0] for line in lines] == ["error: not set: REDIS_URL", "error: not set: OPENAI_API_KEY"]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # process start-up and the split's hand-off; the store is tested elsewhere
async def test_a_web_without_the_model_key_and_a_worker_answer_a_mention_end_to_end(
    real_redis: Any, real_redis_env: dict[str, str], prefix: str, openai_server: FakeOpenAI
) -> None:
    """The split as deployed: ``web`` (no ``OPENAI_API_KEY``; it never loads the openai client, read from Python's
    ``-X importtime`` log) acks and queues; ``worker`` asks the question and, after the click, replies."""
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        web_env = live_env(
            ws, secret, prefix=prefix, redis_env=real_redis_env, PORT=str(port), PYTHONPROFILEIMPORTTIME="1"
        )
        worker_env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server)
        web, worker = await start_bot("web", env=web_env), await start_bot("worker", env=worker_env)
        web_started: list[str] = []
        worker_started: list[str] = []
        try:
            web_started = await read_until(web, "HTTP mode (web)")
            worker_started = await read_until(worker, "worker: handling queued Slack work")
            openai_server.script(
                Reply(tool_calls=[tool_call("ask_user", {"question": "Which?", "options": [{"label": "a"}]})]),
                Reply(text="Split: a."),
            )
            d = await ws.mention("U_ALICE", "C_GENERAL", "hello")
            q = await ws.wait_for_message(
                channel="C_GENERAL",
                thread_ts=d.message["ts"],
                predicate=lambda m: any(b["type"] == "actions" for b in m.get("blocks", [])),
                timeout=30,
            )
            await ws.click(q, "a", user="U_ALICE")
            await ws.wait_for_message(
                channel="C_GENERAL", thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Split: a.", timeout=30
            )
        finally:
            web_log = "\n".join(web_started) + "\n" + await stop(web)
            worker_log = "\n".join(worker_started) + "\n" + await stop(worker)
        assert web.returncode == 0 and worker.returncode == 0, web_log + "\n" + worker_log
    lines = web_log.splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    assert "bot.serving" in imported  # the log is there
    assert not {name for name in imported if name == "openai" or name.startswith("openai.")}


async def turn_started(model: FakeOpenAI, *, within: float = 20) -> None:
    """Wait until the loopback model has been asked (a run's turn is under way)."""
    until = time.monotonic() + within
    while not model.requests:
        assert time.monotonic() < until, "the model was never asked"
        await asyncio.sleep(0.05)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # processes and a lease, not store kinds
async def test_a_run_a_stopping_serve_could_not_finish_is_gone_on_with_by_another(
    real_redis: Any, real_redis_env: dict[str, str], prefix: str, openai_server: FakeOpenAI
) -> None:
    """SIGTERM while a model turn takes longer than the drain (10 s): the process hands the run over as it exits,
    and another process on the same Redis goes on with it once its lease lapses, posting the reply in its thread
    (before: the run stayed ``running``, nobody replied, and only a later message in the thread, past the lease,
    took it over)."""
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server, PORT=str(port))
        first = await start_bot("serve", env=env)
        await read_until(first, "HTTP mode")
        openai_server.script(Reply(text="never seen", delay=40), Reply(text="Answered after the restart."))
        d = await ws.mention("U_ALICE", "C_GENERAL", "think long")
        await turn_started(openai_server)
        log = await stop(first)
        assert first.returncode == 0 and "1 run(s) unfinished" in log, log
        second = await start_bot("serve", env={**env, "PORT": str(free_port())})
        try:
            await read_until(second, "HTTP mode")
            await ws.wait_for_message(
                channel="C_GENERAL",
                thread_ts=d.message["ts"],
                predicate=text_is("Answered after the restart."),
                timeout=60,
            )
        finally:
            rest = await stop(second)
        assert "gone on with here" in rest, rest


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # processes and a lease, not store kinds
async def test_a_run_a_stopping_worker_could_not_finish_is_gone_on_with_by_another(
    real_redis: Any, real_redis_env: dict[str, str], prefix: str, openai_server: FakeOpenAI
) -> None:
    """The split: SIGTERM to the worker while a model turn takes longer than the drain: it stops within the drain
    and hands the run over, and the next worker goes on with it (before: the worker waited for its jobs in hand
    however long they took, and handed nothing over)."""
    port = free_port()
    secret = "serve-test-secret"
    async with Workspace(f"http://127.0.0.1:{port}/slack/events", secret, bot_token=TOKEN) as ws:
        web_env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, PORT=str(port))
        worker_env = live_env(ws, secret, prefix=prefix, redis_env=real_redis_env, model=openai_server)
        web, first = await start_bot("web", env=web_env), await start_bot("worker", env=worker_env)
        second = None
        try:
            await read_until(web, "HTTP mode (web)")
            await read_until(first, "worker: handling queued Slack work")
            openai_server.script(Reply(text="never seen", delay=60), Reply(text="Answered by the next worker."))
            d = await ws.mention("U_ALICE", "C_GENERAL", "think long")
            await turn_started(openai_server)
            started = time.monotonic()
            log = await stop(first)
            assert time.monotonic() - started < 20 and first.returncode == 0, log
            assert "1 run(s) unfinished" in log, log
            second = await start_bot("worker", env=worker_env)
            await read_until(second, "worker: handling queued Slack work")
            await ws.wait_for_message(
                channel="C_GENERAL",
                thread_ts=d.message["ts"],
                predicate=text_is("Answered by the next worker."),
                timeout=60,
            )
        finally:
            await stop(web)
            if second is not None:
                await stop(second)
