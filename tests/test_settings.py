"""Settings from the environment (``bot.config``) and what ``LOG_LEVEL`` / ``LOG_FORMAT`` produce (``bot.logs``).

Malformed values give one ``NAME: reason (got 'value')`` line each, all at once, and never a secret's value;
durations take seconds or 30s / 30m / 1h / 2d; log lines carry the run's context and never a token.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.config import (
    DEFAULT_INSTRUCTIONS,
    Settings,
    SettingsError,
    load_settings,
    parse_duration,
    redis_address,
)
from bot.errors import ConfigError
from bot.logs import (
    bind_log_context,
    configure_logging,
    current_log_context,
    log_context,
    redact,
    register_secrets,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the environment the tests run in."""
    import os

    for name in list(os.environ):
        if name.upper() in {n.upper() for n in Settings.model_fields}:
            monkeypatch.delenv(name)


def problems(monkeypatch: pytest.MonkeyPatch, **env: str) -> list[str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert isinstance(info.value, ConfigError)
    assert str(info.value).splitlines() == info.value.problems
    return info.value.problems


BAD_VALUES = [
    ("PORT", "abc", "must be a whole number from 0 to 65535"),
    ("PORT", "99999", "must be a whole number from 0 to 65535"),
    ("PORT", "-1", "must be a whole number from 0 to 65535"),
    ("ASK_ANSWERERS", "everyone", "must be requester or channel"),
    ("ASK_TTL_SECONDS", "-5", "must be more than 0 seconds"),
    ("ASK_TTL_SECONDS", "0", "must be more than 0 seconds"),
    ("ASK_TTL_SECONDS", "soon", "must be whole seconds or a duration like 30s, 30m, 1h, 2d"),
    ("RUN_RETENTION_SECONDS", "1w", "must be whole seconds or a duration like 30s, 30m, 1h, 2d"),
    ("REDIS_URL", "notaurl", "must be a redis://, rediss:// or unix:// URL"),
    ("REDIS_URL", "http://127.0.0.1:6379", "must be a redis://, rediss:// or unix:// URL"),
    ("REDIS_URL", "redis://", "must name a host"),
    ("REDIS_URL", "redis://localhost:six", "has a port that is not a number"),
    ("REDIS_URL", "redis://127.0.0.1:6379?db=abc", "has a database (?db=) that is not a number"),
    ("LOG_LEVEL", "LOUD", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("LOG_FORMAT", "xml", "must be text or json"),
    ("SLACK_VIEW", "sidebar", "must be agent or assistant"),
    ("SLACK_API_URL", "ftp://slack.example", "must be an http:// or https:// URL"),
    ("OPENAI_BASE_URL", "localhost:8080", "must be an http:// or https:// URL"),
    ("STREAM_INTERVAL", "0.05", "must be at least 0.2"),
    ("STREAM_INTERVAL", "fast", "must be a number"),
    ("STREAM_INTERVAL", "nan", "must be a number (got 'nan')"),  # was: must be at most 10.0
    ("STREAM_INTERVAL", "50", "must be at most 10 (got"),
    ("MCP_PROGRESS_SECONDS", "inf", "must be a number"),
    ("REPLY_STREAMING", "maybe", "must be true or false (also yes/no, on/off, 1/0)"),
    ("ASK_ESCALATE_ANSWERS", "maybe", "must be true or false (also yes/no, on/off, 1/0)"),
    ("MAX_WAITING_PER_PERSON", "0", "must be at least 1"),
    ("MAX_WAITING_PER_PERSON", "many", "must be a whole number"),
    ("ASSISTANT_PROMPTS", "a|b|c|d|e", "must be 1 to 4 prompts"),
    ("ASSISTANT_PROMPTS", '[{"title": "x"}]', "prompt 1 has no message"),
    ("ASSISTANT_PROMPTS", "[not json", "is not valid JSON (a list of {title, message} objects)"),
    ("ASSISTANT_PROMPTS", '{"title": "Deploy", "message": "deploy it"}', "is one JSON object: give a list of them"),
    ("MCP_ELICIT_URL_SCHEMES", "https,javascript", "must not include javascript: such a link runs code or reads files"),
    ("MCP_ELICIT_URL_SCHEMES", "data,file", "must not include data, file"),
    ("MCP_PORT", "70000", "must be a whole number from 0 to 65535"),
    ("METRICS_PORT", "metrics", "must be a whole number from 0 to 65535"),
    ("PROMETHEUS_MULTIPROC_DIR", "/nonexistent/metrics", "must be an existing directory"),
    ("MCP_ASK_CHANNEL", "#general", "must be a channel id (C..., G... or D...)"),
    ("MCP_ASK_USER", "alice", "must be a user id (U... or W...)"),
    ("MCP_PROGRESS_SECONDS", "0", "must be at least 0.5"),
    ("HISTORY_TOKEN_BUDGET", "500", "must be a whole number of tokens from 1000 to 10000000, or off"),
    ("HISTORY_TOKEN_BUDGET", "lots", "must be a whole number of tokens from 1000 to 10000000, or off"),
    ("HISTORY_TOKEN_BUDGET", "-24000", "must be a whole number of tokens from 1000 to 10000000, or off"),
    ("TOOL_RESULT_MAX_CHARS", "10", "must be at least 1000"),
    ("TOOL_RESULT_MAX_CHARS", "lots", "must be a whole number"),
    ("TOOL_RESULT_MAX_CHARS", "99999999", "must be at most 10000000"),
    ("PORT", "\u0663\u0660\u0660\u0660", "must be a whole number from 0 to 65535"),  # Arabic-Indic digits: was 3000
    ("PORT", "\u00b2", "must be a whole number from 0 to 65535"),  # was "invalid literal for int()"
    ("METRICS_PORT", "\u0663", "must be a whole number from 0 to 65535"),
]
SHORT_MCP_TOKEN = (
    "MCP_TOKEN: must be at least 16 characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
    " (value hidden)"
)


def test_a_short_mcp_token_is_refused_without_being_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TOKEN", "tooshort")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert caught.value.problems == [SHORT_MCP_TOKEN]


@pytest.mark.parametrize(("name", "value", "reason"), BAD_VALUES)
def test_each_bad_value_is_one_line(monkeypatch: pytest.MonkeyPatch, name: str, value: str, reason: str) -> None:
    [line] = problems(monkeypatch, **{name: value})
    assert line.startswith(f"{name}: {reason}")
    assert line.endswith(f"(got {value!r})")


def test_a_long_bad_value_is_told_in_plain_words_and_shown_clipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """pydantic's own words were shown for these ("Unable to parse input string as an integer, exceeded maximum
    size", "String should have at most 3000 characters")."""
    [number] = problems(monkeypatch, MAX_RUNS_PER_PERSON="9" * 5000)
    assert number == f"MAX_RUNS_PER_PERSON: must be a whole number (got '{'9' * 77}...')"
    monkeypatch.delenv("MAX_RUNS_PER_PERSON")
    [text] = problems(monkeypatch, ASSISTANT_GREETING="x" * 3001)
    assert text == f"ASSISTANT_GREETING: must be at most 3000 characters (got '{'x' * 77}...')"


def test_every_bad_value_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "PORT": "abc",
        "ASK_ANSWERERS": "everyone",
        "ASK_TTL_SECONDS": "-5",
        "REDIS_URL": "notaurl",
        "LOG_LEVEL": "LOUD",
        "SLACK_API_URL": "nope",
    }
    lines = problems(monkeypatch, **env)
    assert sorted(line.split(":")[0] for line in lines) == sorted(env)
    assert all(line.endswith(f"(got {env[line.split(':')[0]]!r})") for line in lines)


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("SLACK_BOT_TOKEN", "xapp-1-A1-secretvalue", "is an app-level token (xapp-); it belongs in SLACK_APP_TOKEN"),
        ("SLACK_BOT_TOKEN", "hunter2-secretvalue", "must be a bot token, starting with xoxb-"),
        ("SLACK_APP_TOKEN", "xoxb-1-secretvalue", "is a bot token (xoxb-); it belongs in SLACK_BOT_TOKEN"),
        ("SLACK_APP_TOKEN", "secretvalue", "must be an app-level token, starting with xapp-"),
        ("REDIS_URL", "redis//:secretvalue@db.example", "must be a redis://, rediss:// or unix:// URL"),
        ("REDIS_URL", "redis://db.example:x?password=secretvalue", "has a port that is not a number"),
        ("REDIS_URL", "http://user:secretvalue@db.example", "must be a redis://, rediss:// or unix:// URL"),
    ],
)
def test_secret_values_are_never_echoed(monkeypatch: pytest.MonkeyPatch, name: str, value: str, reason: str) -> None:
    [line] = problems(monkeypatch, **{name: value})
    assert line.startswith(f"{name}: {reason}")
    assert line.endswith("(value hidden)")
    assert "secretvalue" not in line


def test_defaults_are_kept() -> None:
    s = load_settings()
    assert (s.port, s.ask_answerers, s.ask_ttl_seconds, s.run_retention_seconds) == (3000, "requester", 86400, 604800)
    assert (s.log_level, s.log_format, s.slack_api_url) == ("INFO", "text", "https://slack.com/api/")
    assert (s.openai_model, s.redis_prefix, s.agent_instructions) == ("gpt-4.1-mini", "askbot:", DEFAULT_INSTRUCTIONS)
    assert s.mode == "playground" and s.redis_url is None and s.openai_base_url is None
    assert (s.ask_escalate_answers, s.max_waiting_per_person) == (False, 5)  # escalation reminds; 5 may wait


def test_good_values_are_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "LOG_LEVEL": "debug",
        "ASK_ANSWERERS": " Channel ",
        "PORT": "0",
        "ASK_TTL_SECONDS": "30m",
        "RUN_RETENTION_SECONDS": "2d",
        "REDIS_URL": "rediss://:pw@db.example:6380/2",
        "SLACK_APP_TOKEN": "",  # empty counts as unset
        "SLACK_BOT_TOKEN": "xoxb-1",
    }.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    assert (s.log_level, s.ask_answerers, s.port) == ("DEBUG", "channel", 0)
    assert (s.ask_ttl_seconds, s.run_retention_seconds) == (1800, 2 * 86400)
    assert s.slack_app_token is None and s.mode == "http"
    assert s.redis_url is not None and redis_address(s.redis_url.get_secret_value()) == "db.example:6380"
    assert "pw" in s.secret_values() and "xoxb-1" in s.secret_values()


def test_secrets_are_read_without_surrounding_whitespace_and_blank_is_not_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret mounted from a file ends in a newline: kept, every Slack request was refused (signature mismatch)
    and every model call failed (a control character in a header); whitespace alone counted as set."""
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "sig123456\n")
    monkeypatch.setenv("OPENAI_API_KEY", " sk-key\r\n")
    s = load_settings()
    assert s.slack_signing_secret is not None and s.slack_signing_secret.get_secret_value() == "sig123456"
    assert s.openai_api_key is not None and s.openai_api_key.get_secret_value() == "sk-key"
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "  \n")
    assert load_settings().slack_signing_secret is None


def test_settings_that_are_not_utf8_are_one_line_each_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes that are not UTF-8 (Python keeps them as lone surrogates): a traceback for APPROVAL_POLICY, and for the
    rest a start that failed in every request that used them (a Redis key, a header)."""
    bad = {"APPROVAL_POLICY": "/tmp/\udcff.yaml", "REDIS_PREFIX": "bo\udcff:", "OPENAI_API_KEY": "k\udcff"}
    for name, value in bad.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert sorted(caught.value.problems) == sorted(f"{n}: is not valid UTF-8 text" for n in bad)


def test_the_history_budget_is_on_by_default_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.agent._loop.budget import DEFAULT_HISTORY_BUDGET

    assert load_settings().history_token_budget == DEFAULT_HISTORY_BUDGET == 24_000
    for text, budget in [("off", None), (" OFF ", None), ("8000", 8000), ("128_000", 128_000)]:
        monkeypatch.setenv("HISTORY_TOKEN_BUDGET", text)
        assert load_settings().history_token_budget == budget


def test_the_tool_result_bound_defaults_to_the_agents_and_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.agent.tools import DEFAULT_TOOL_RESULT_MAX_CHARS

    assert load_settings().tool_result_max_chars == DEFAULT_TOOL_RESULT_MAX_CHARS == 20_000
    monkeypatch.setenv("TOOL_RESULT_MAX_CHARS", "100000")
    assert load_settings().tool_result_max_chars == 100_000


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://user:pw@cache.example:6380", "unix:///run/redis.sock", "redis://h"]
)
def test_redis_urls_accepted(url: str) -> None:
    settings = load_settings(redis_url=url)
    assert settings.redis_url is not None and settings.redis_url.get_secret_value() == url


def test_keyword_values_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "abc")
    assert load_settings(port=0).port == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        (90, 90),
        ("30s", 30),
        ("30m", 1800),
        ("1h", 3600),
        ("2d", 172800),
        (" 2D ", 172800),
        ("1h30m", 5400),
        ("-5", -5),
    ],
)
def test_durations_parse(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1.5h", "1w", "10 minutes", "1hh", None, True])
def test_malformed_durations_raise(text: object) -> None:
    with pytest.raises(ValueError, match=r"^must be whole seconds or a duration like 30s, 30m, 1h, 2d$"):
        parse_duration(text)


@pytest.mark.parametrize("name", ["ASK_TTL_SECONDS", "RUN_RETENTION_SECONDS"])
def test_duration_settings_take_units(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "1h")
    assert getattr(load_settings(), name.lower()) == 3600
    monkeypatch.setenv(name, "45")
    assert getattr(load_settings(), name.lower()) == 45


# --- LOG_LEVEL / LOG_FORMAT: the run's context on every line, never a secret -------------------


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Root logging through ``configure_logging`` into a buffer; the previous handlers and level come back."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = configure_logging("INFO", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_log_lines_carry_the_known_context(captured: io.StringIO) -> None:
    log = logging.getLogger("bot.test")
    log.info("outside")
    with log_context(run_id="r-1", channel_id="C1"):
        log.info("inside")
        with log_context(user_id="U1", team_id="T1"):
            log.info("nested")
    log.info("run %s", "r-2", extra={"run_id": "r-2"})
    lines = captured.getvalue().splitlines()
    assert lines[0].endswith("INFO bot.test: outside")
    assert lines[1].endswith("bot.test: inside [run=r-1 channel=C1]")
    assert lines[2].endswith("bot.test: nested [run=r-1 team=T1 channel=C1 user=U1]")
    assert lines[3].endswith("bot.test: run r-2 [run=r-2]")
    assert current_log_context() == {}


async def test_tasks_inherit_the_context(captured: io.StringIO) -> None:
    log = logging.getLogger("bot.test")

    async def background() -> None:
        await asyncio.sleep(0)
        log.warning("later")

    with log_context(run_id="r-9", team_id="T9"):
        task = asyncio.create_task(background())
    await task

    async def bound() -> dict[str, str]:
        bind_log_context(run_id="r-10")
        return current_log_context()

    assert await asyncio.create_task(bound()) == {"run_id": "r-10"}
    assert current_log_context() == {}  # the task's binding stayed in the task
    assert captured.getvalue().strip().endswith("WARNING bot.test: later [run=r-9 team=T9]")


SECRETS = [
    "xoxb-123-456-abcdefSECRET",
    "xoxp-1-2-SECRET",
    "xapp-1-A0-123-SECRET",
    "xoxe.xoxb-1-SECRET",
    "sk-proj-SECRETSECRET",
    "Bearer SECRETtoken.value",
    "redis://:SECRETpw@db.example:6379/0",
    "rediss://user:SECRETpw@db.example",
    "https://hooks.example/?token=SECRET&x=1",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_tokens_never_reach_a_log_line(captured: io.StringIO, secret: str) -> None:
    log = logging.getLogger("bot.test")
    log.info("message %s", secret)
    log.info(f"f-string {secret}")
    try:
        raise RuntimeError(f"failed with {secret}")
    except RuntimeError:
        log.exception("boom")
    text = captured.getvalue()
    assert "SECRET" not in text
    assert text.count("[redacted]") >= 3 and "Traceback" in text


def test_registered_secrets_are_redacted(captured: io.StringIO) -> None:
    register_secrets("plain-signing-secret-4f2a", None, "")
    logging.getLogger("bot.test").warning("signature by %s", "plain-signing-secret-4f2a")
    assert "plain-signing-secret-4f2a" not in captured.getvalue()
    assert redact("no secret here: desk-top risk-free") == "no secret here: desk-top risk-free"


def test_json_format_carries_context_and_redacts() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = configure_logging("debug", "json", stream=stream)
    try:
        with log_context(run_id="r-3", user_id="U3"):
            logging.getLogger("bot.test").debug("token %s", "xoxb-1-SECRET")
    finally:
        root.removeHandler(handler)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    line = json.loads(stream.getvalue())
    assert line["level"] == "DEBUG" and line["logger"] == "bot.test"
    assert (line["run_id"], line["user_id"], "team_id" in line) == ("r-3", "U3", False)
    assert "SECRET" not in line["message"]


def test_bolts_unused_token_warning_is_dropped(captured: io.StringIO) -> None:
    logging.getLogger("slack_bolt.AsyncApp").warning("As you gave `client` as well, `token` will be unused.")
    assert captured.getvalue() == ""


def test_configure_logging_rejects_unknown_values() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("LOUD")
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("INFO", "xml")  # type: ignore[arg-type]


def test_escalation_needs_both_settings_and_a_time_before_the_deadline() -> None:
    for values, line in (
        ({"ask_escalate_to": "C123"}, "ASK_ESCALATE_AFTER: must be set when ASK_ESCALATE_TO is"),
        ({"ask_escalate_after": "1h"}, "ASK_ESCALATE_TO: must be set when ASK_ESCALATE_AFTER is"),
        ({"ask_escalate_after": "2d", "ask_escalate_to": "C123"}, "ASK_ESCALATE_AFTER: must be shorter than"),
        ({"ask_remind_after": "1\u0663"}, "ASK_REMIND_AFTER: must be whole seconds or a duration"),
        ({"ask_escalate_answers": True}, "ASK_ESCALATE_ANSWERS: means nothing without ASK_ESCALATE_TO"),
    ):
        with pytest.raises(SettingsError) as info:
            load_settings(**values)
        assert info.value.problems[0].startswith(line), info.value.problems


def test_redis_cluster_is_off_by_default_and_takes_a_boolean(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().redis_cluster is False
    monkeypatch.setenv("REDIS_CLUSTER", "1")
    assert load_settings(redis_url="redis://127.0.0.1:7000").redis_cluster is True
    [line] = problems(monkeypatch, REDIS_CLUSTER="maybe")
    assert line.startswith("REDIS_CLUSTER: must be true or false") and line.endswith("(got 'maybe')")


def test_redis_cluster_refuses_what_a_cluster_cannot_do() -> None:
    for values, line in (
        ({"redis_url": "unix:///run/redis.sock"}, "REDIS_CLUSTER: a cluster is reached over TCP"),
        ({"redis_url": "redis://127.0.0.1:7000/2"}, "REDIS_CLUSTER: a cluster has only database 0"),
        ({"redis_url": "redis://127.0.0.1:7000?db=2"}, "REDIS_CLUSTER: a cluster has only database 0"),
        ({"redis_url": "redis://127.0.0.1:7000/0?db=3"}, "REDIS_CLUSTER: a cluster has only database 0"),
        ({"redis_prefix": "app{1}:"}, "REDIS_PREFIX: must not contain { or } with REDIS_CLUSTER"),
    ):
        with pytest.raises(SettingsError) as info:
            load_settings(redis_cluster=True, **values)
        assert info.value.problems == [info.value.problems[0]] and info.value.problems[0].startswith(line)
        load_settings(**values)  # fine on one Redis
    assert load_settings(redis_cluster=True, redis_url="rediss://:pw@cache.example:6380/0").redis_cluster


@pytest.mark.parametrize(
    "text",
    [
        'token="abc" and more',
        'an option labelled password="hunter2"',
        'line\nbreak "quoted" \\ back\\slash \u00e9\u2603',
    ],
)
def test_json_lines_stay_json_whatever_the_text_redacted(text: str) -> None:
    """A line whose text (or an audit field: an option label) holds ``token="..."``: redacting ``token=...``
    after encoding ate the backslash of the escaped quote and cut the JSON string (an unparseable line)."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = configure_logging("info", "json", stream=stream)
    try:
        logging.getLogger("bot.audit").info("question answered %s", text, extra={"audit": {"answer_labels": [text]}})
    finally:
        root.removeHandler(handler)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    line = json.loads(stream.getvalue())
    assert "abc" not in stream.getvalue() and "hunter2" not in stream.getvalue()
    assert line["message"].startswith("question answered ") and len(line["answer_labels"]) == 1


def test_listen_hosts_and_link_schemes_have_safe_defaults_and_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert (s.mcp_host, s.metrics_host, s.http_host) == ("127.0.0.1", "127.0.0.1", "0.0.0.0")
    assert s.mcp_elicit_url_schemes == ("https",) and s.mcp_port is None and s.ops_on_port
    assert not load_settings(metrics_port=9100).ops_on_port  # their own port: off the public one
    assert load_settings(metrics_port=9100, metrics_on_port=True).ops_on_port
    monkeypatch.setenv("MCP_ELICIT_URL_SCHEMES", " HTTPS, http ")
    monkeypatch.setenv("MCP_HOST", "[::1]")
    s = load_settings()
    assert s.mcp_elicit_url_schemes == ("https", "http") and s.mcp_host == "::1"
    lines = problems(monkeypatch, MCP_ELICIT_URL_SCHEMES="ht tp", METRICS_HOST="256.0.0.1")
    assert lines[0].startswith("MCP_ELICIT_URL_SCHEMES: must be comma-separated URL schemes"), lines
    assert lines[1].startswith("METRICS_HOST: must be an IP address to listen on"), lines


def test_a_yes_no_setting_is_read_without_its_surrounding_whitespace_as_every_other_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``REPLY_STREAMING="true "`` was refused while ``MAX_RUNS_PER_PERSON=" 3 "`` was read as 3 (a stray space in an
    env file): every yes/no setting now reads as the numbers and words do. Nonsense is still one line."""
    for name, text, field, expected in (
        ("REPLY_STREAMING", "false ", "reply_streaming", False),
        ("REPLY_STREAMING", " True", "reply_streaming", True),
        ("ALLOW_USER_MENTIONS", "\tyes\n", "allow_user_mentions", True),
        ("REDIS_CLUSTER", " off ", "redis_cluster", False),
        ("METRICS_ON_PORT", " 0 ", "metrics_on_port", False),
    ):
        monkeypatch.setenv(name, text)
        assert getattr(load_settings(), field) is expected, name
        monkeypatch.delenv(name)
    monkeypatch.setenv("MAX_RUNS_PER_PERSON", " 3 ")
    assert load_settings().max_runs_per_person == 3
    for text in (" sometimes ", "   ", "true\x1f"):  # refused, and shown as given
        [line] = problems(monkeypatch, REPLY_STREAMING=text)
        assert line.startswith("REPLY_STREAMING: must be true or false") and line.endswith(f"(got {text!r})"), line


def test_slack_view_is_read_as_the_other_word_settings_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SLACK_VIEW=" agent "`` (a stray space in an env file) and ``Assistant`` were refused while ``LOG_FORMAT``,
    ``ASK_ANSWERERS`` and ``ASK_ON_TIMEOUT`` read the same text trimmed and in any case: one rule for every word."""
    for text, expected in ((" agent ", "agent"), ("Assistant", "assistant"), ("\tASSISTANT\n", "assistant")):
        monkeypatch.setenv("SLACK_VIEW", text)
        assert load_settings().slack_view == expected, text
    monkeypatch.setenv("LOG_FORMAT", " JSON ")
    assert load_settings().log_format == "json"


def test_a_rule_across_settings_is_not_judged_on_a_refused_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """ASK_ESCALATE_TO refused: its line alone, not also the rule that it must be set with ASK_ESCALATE_AFTER (it
    was, only wrong: the rule saw its default in its place)."""
    monkeypatch.setenv("ASK_ESCALATE_TO", "bad!")
    monkeypatch.setenv("ASK_ESCALATE_AFTER", "60")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    [line] = caught.value.problems
    assert line.startswith("ASK_ESCALATE_TO: must be a channel id")


def test_a_setting_that_is_not_utf8_is_told_with_the_other_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_LEVEL", "\udcff")
    monkeypatch.setenv("PORT", "abc")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert caught.value.problems == [
        "LOG_LEVEL: is not valid UTF-8 text",
        "PORT: must be a whole number from 0 to 65535 (got 'abc')",
    ]
