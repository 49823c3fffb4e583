"""``MCP_CALLERS`` (the file of the MCP server's callers) and ``MCP_CALLER``, read at start: the issue's example works
as written; every problem of a bad file is named on its setting's one ``error:`` line, and the process exits 2."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config import Settings, SettingsError, load_settings
from bot.mcp_server.callers import load_callers

TOKEN = "build-42-secret-token-0123456789"
EXAMPLE = f"""\
callers:
  - name: build-42
    token_sha256: "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
    channels: [C0GENERAL1]
    people: [U0ALICE01, U0BOB0001]
    approvals: true
    max_waiting: 5
    per_minute: 10
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the environment the tests run in."""
    for name in list(os.environ):
        if name.upper() in {n.upper() for n in Settings.model_fields}:
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "callers.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_issues_example_works_as_written_and_the_token_picks_its_caller(tmp_path: Path) -> None:
    callers = load_callers(write(tmp_path, EXAMPLE))
    [caller] = callers.entries
    assert (caller.name, caller.channels, caller.people) == ("build-42", ("C0GENERAL1",), ("U0ALICE01", "U0BOB0001"))
    assert (caller.approvals, caller.approvals_anyone_in_channel, caller.max_waiting, caller.per_minute) == (
        True,
        False,
        5,
        10,
    )
    assert callers.by_token(TOKEN.encode()) == caller
    assert callers.by_token(b"another-token-0123456789") is None
    assert callers.by_token(caller.token_sha256.encode() if caller.token_sha256 else b"") is None  # not the hash


def test_every_problem_of_the_file_is_named_on_its_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = """\
callers:
  - name: build-42
    token_sha256: "not-a-hash"
    channels: ["#general"]
    people: [alice]
    per_minute: 0
  - name: build-42
    channels: [C0GENERAL1]
    tokn: x
  - just a string
"""
    monkeypatch.setenv("MCP_CALLERS", write(tmp_path, bad))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line.startswith("MCP_CALLERS: ")
    for part in (
        "callers[0] (build-42).token_sha256: must be the SHA-256 of the token",
        "callers[0] (build-42).channels: must be channel ids",
        "callers[0] (build-42).people: must be user ids",
        "callers[0] (build-42).per_minute: must be at least 1",
        "callers[1] (build-42).tokn: unknown field",
        "callers[2]: must be a mapping",
    ):
        assert part in line, (part, line)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("callers: [", "is not valid YAML at line"),
        ("servers: []", "must hold a non-empty list `callers:`"),
        ("callers:\n  - name: a\n    channels: [C1]\n  - name: a\n    channels: [C2]\n", "'a' is given twice"),
        ("callers:\n  - name: a\n", "callers[0] (a).channels: give at least one channel id"),
        ("callers:\n  - name: 'a b'\n    channels: [C1]\n", "callers[0] ('a b').name: must be 1-64 letters"),
        ("callers:\n  - name: a\n    channels: C1\n", "callers[0] (a).channels: must be a list"),
        ("callers:\n  - name: null\n    channels: [C1]\n", "callers[0].name: must be text"),  # not (None)
        (
            "callers:\n  - name: a\n    channels: [C1]\n    per_minute: 0\n",
            "callers[0] (a).per_minute: must be at least 1",
        ),
        ('callers:\n  - name: "a\\nerror: PORT: forged"\n', "callers[0] ('a\\nerror: PORT: forged').name"),
        # a count is a number: YAML's true is not 1, nor a quoted "10" 10
        (
            "callers:\n  - name: a\n    channels: [C1]\n    per_minute: true\n",
            "callers[0] (a).per_minute: must be a whole number",
        ),
        (
            'callers:\n  - name: a\n    channels: [C1]\n    max_waiting: "10"\n',
            "callers[0] (a).max_waiting: must be a whole number",
        ),
        (
            "callers:\n  - name: a\n    channels: [C1]\n    max_waiting: 2.5\n",
            "callers[0] (a).max_waiting: must be a whole number",
        ),
    ],
)
def test_a_malformed_file_is_refused_naming_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, reason: str
) -> None:
    monkeypatch.setenv("MCP_CALLERS", write(tmp_path, text))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line.startswith("MCP_CALLERS: ") and reason in line, line


def test_mcp_caller_must_name_an_entry_and_mcp_token_goes_without_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, EXAMPLE)
    cases = [
        ({"MCP_CALLERS": path, "MCP_CALLER": "build-43"}, "MCP_CALLER: 'build-43' is none of MCP_CALLERS' callers"),
        ({"MCP_CALLER": "build-42"}, "MCP_CALLER: names one of MCP_CALLERS' callers; MCP_CALLERS is not set"),
        ({"MCP_CALLERS": path, "MCP_TOKEN": "t" * 20}, "MCP_TOKEN: set MCP_TOKEN (one caller) or MCP_CALLERS"),
    ]
    for env, reason in cases:
        for name in ("MCP_CALLERS", "MCP_CALLER", "MCP_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError) as caught:
            load_settings()
        assert any(reason in p for p in caught.value.problems), (reason, caught.value.problems)
    monkeypatch.delenv("MCP_TOKEN")
    monkeypatch.setenv("MCP_CALLER", "build-42")
    assert load_settings().mcp_caller == "build-42"


def test_the_server_does_not_start_on_a_bad_file_and_exits_2(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": "xoxb-test-token-0123456789",
        "MCP_CALLERS": write(tmp_path, "callers:\n  - name: a\n    channels: [general]\n"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot", "mcp"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    # one line for the file, naming the setting and the problem (the path shown clipped when long); and, in the same
    # round, what else the server lacks (this environment has no REDIS_URL)
    [error, missing] = errors
    assert missing == "error: not set: REDIS_URL (python -m bot mcp asks through Slack and Redis)", done.stderr
    assert error.startswith(
        "error: MCP_CALLERS: callers[0] (a).channels: must be channel ids (C..., G..., D...), not 'general' (got '/"
    ), done.stderr


def test_a_callers_policy_rule_must_name_a_rule_of_the_approval_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    callers = "callers:\n  - name: deployer\n    channels: [C1]\n    approvals: true\n    policy_rule: deploys\n"
    monkeypatch.setenv("MCP_CALLERS", write(tmp_path, callers))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert "callers[0] (deployer).policy_rule: names a rule of APPROVAL_POLICY, which is not set" in line, line
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: releases\n    tool: 'release-*'\n  - name: default\n", encoding="utf-8")
    monkeypatch.setenv("APPROVAL_POLICY", str(policy))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert "'deploys' is no rule of APPROVAL_POLICY (its named rules: releases, default)" in line, line
    policy.write_text("rules:\n  - name: deploys\n    tool: 'deploy-*'\n  - name: default\n", encoding="utf-8")
    settings = load_settings()
    assert settings.mcp_callers is not None


def test_over_http_a_callers_file_with_no_token_is_refused_at_start(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": "xoxb-test-token-0123456789",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "MCP_CALLERS": write(tmp_path, "callers:\n  - name: a\n    channels: [C0GENERAL1]\n"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot", "mcp", "--http"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: MCP_CALLERS: no caller has a token_sha256"), done.stderr
