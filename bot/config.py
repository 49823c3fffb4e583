"""All settings, from the environment (pydantic-settings), validated here once. Secrets are ``SecretStr``.

| variable | default | meaning |
|---|---|---|
| ``SLACK_BOT_TOKEN`` | unset | xoxb- token; unset -> the local playground |
| ``SLACK_SIGNING_SECRET`` | unset | verifies requests in HTTP mode |
| ``SLACK_APP_TOKEN`` | unset | xapp- token; set -> Socket Mode (unless ``--http``) |
| ``SLACK_API_URL`` | ``https://slack.com/api/`` | Web API base (point at a fake); an http(s) URL |
| ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` | unset | read by the openai client; no key -> demo model in the playground |
| ``OPENAI_MODEL`` | ``gpt-4.1-mini`` | chat model name |
| ``REDIS_URL`` | unset | ``redis://``, ``rediss://`` or ``unix://``; unset -> in-process (playground only) |
| ``REDIS_PREFIX`` | ``askbot:`` | key prefix |
| ``REDIS_CLUSTER`` | ``false`` | ``REDIS_URL`` names a node of a Redis Cluster (``redis://``/``rediss://``, db 0) |
| ``PORT`` | ``3000`` | HTTP port for ``POST /slack/events`` (0..65535; 0 = any free port) |
| ``HTTP_HOST`` | ``0.0.0.0`` | the address ``POST /slack/events`` listens on (Slack must reach it; signed requests) |
| ``ASK_ANSWERERS`` | ``requester`` | who may answer: ``requester`` or ``channel`` |
| ``APPROVERS`` | ``requester`` | who may approve tool calls: ``requester``, ``channel``, or user and user-group ids |
| ``APPROVAL_POLICY`` | unset | path of a YAML or TOML approval policy (docs/approvals.md); not with ``APPROVERS`` |
| ``ASK_TTL_SECONDS`` | ``86400`` (1 day) | how long a question waits (a duration) |
| ``ASK_ON_TIMEOUT`` | ``resume`` | at the deadline: ``resume`` (the agent goes on, told nobody answered) or ``close`` |
| ``ASK_REMIND_AFTER`` | unset (off) | remind the requester (and named approvers) after this long, and again |
| ``ASK_REMIND_MAX`` | ``1`` | how many reminders at most |
| ``ASK_ESCALATE_AFTER`` | unset (off) | also ask ``ASK_ESCALATE_TO`` after this long (a duration) |
| ``ASK_ESCALATE_TO`` | unset | a channel id, or user ids and user-group ids (each person gets a DM) |
| ``ASK_ESCALATE_ANSWERS`` | ``false`` | ``true``: escalation targets may answer questions too (never approvals) |
| ``RUN_RETENTION_SECONDS`` | ``604800`` (7 days) | how long an ended or expired run (and its message refs) is kept |
| ``MODEL_TURN_TIMEOUT`` | ``300`` (5 min) | longest one model turn may take; past it the run fails, retryable |
| ``MAX_REPLY_CHARS`` | ``40000`` | longest text one model turn may write; past it the run fails, retryable |
| ``HISTORY_TOKEN_BUDGET`` | ``24000`` | tokens a request may carry (oldest turns out; still over: refused); ``off`` |
| ``TOOL_RESULT_MAX_CHARS`` | ``20000`` | most of a tool result the model gets (1000-10000000 chars); rest cut, marked |
| ``MAX_RUNS_PER_PERSON`` | ``3`` | runs one person may have working at once, in all processes (not waiting ones) |
| ``MAX_WAITING_PER_PERSON`` | ``5`` | questions waiting on one person's runs at most; past it, new requests refused |
| ``MAX_RUNS_PER_PROCESS`` | ``50`` | runs one process works on at once |
| ``ALLOW_USER_MENTIONS`` | ``false`` | let model or people text ping a person (never channel/here/everyone/groups) |
| ``AGENT`` | unset | your agent: ``module:attribute`` of a factory ``build(model=..., store=...)`` returning an Agent |
| ``AGENT_INSTRUCTIONS`` | see below | the system prompt (of the built-in agent) |
| ``MCP_CONFIG`` | unset | path of an ``{"mcpServers": {...}}`` file: the agent gets those MCP servers' tools |
| ``SLACK_VIEW`` | ``agent`` | ``agent``: threads show agent sessions and Stop (``agent_view``); ``assistant``: not |
| ``REPLY_STREAMING`` | ``true`` | replies show as the model writes them (chat streaming); ``false``: posted, updated |
| ``STREAM_INTERVAL`` | ``1.0`` | seconds between a streaming reply's Web API calls (0.2 to 10; Slack's rate limits) |
| ``ASSISTANT_GREETING`` | see below | what the bot says when a person opens a thread in its assistant pane |
| ``ASSISTANT_PROMPTS`` | see below | the pane's 1-4 suggested prompts: JSON ``[{"title", "message"}]`` or ``a|b`` |
| ``MCP_PORT`` | ``3100`` | ``python -m bot mcp --http``: the port of ``/mcp``; the playground: 3100 unless ``PORT`` |
| | | or another process has it, then a free port (set: exactly this port, never ``PORT``) |
| ``MCP_HOST`` | ``127.0.0.1`` | ``python -m bot mcp --http``: the address it listens on (put TLS in front; README) |
| ``MCP_ELICIT_URL_SCHEMES`` | ``https`` | the schemes a link an MCP server asks a person to open may have |
| ``METRICS_PORT`` | unset (none) | serve ``/metrics``, ``/healthz``, ``/readyz`` on this port of ``METRICS_HOST`` |
| ``METRICS_HOST`` | ``127.0.0.1`` | the address ``METRICS_PORT`` listens on (``0.0.0.0`` for a scraper elsewhere) |
| ``METRICS_ON_PORT`` | unset | HTTP mode: also serve them on ``PORT``; unset: yes unless ``METRICS_PORT`` is set |
| ``PROMETHEUS_MULTIPROC_DIR`` | unset | multiprocess metrics: an existing directory this process can write |
| ``MCP_TOKEN`` | unset | ``python -m bot mcp --http``: the bearer token every request must carry (required there) |
| ``MCP_ASK_CHANNEL`` | unset | ``python -m bot mcp``: the channel id its questions go to when a call names none |
| ``MCP_PROGRESS_SECONDS`` | ``10`` | ``python -m bot mcp``: seconds between progress notifications while a call waits |
| ``MCP_ASK_USER`` | unset | ``python -m bot mcp``: the user id asked when a call names none |
| ``LOG_LEVEL`` | ``INFO`` | ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL`` (any case) |
| ``LOG_FORMAT`` | ``text`` | ``text`` (one line per record) or ``json`` (one JSON object per line) |
| ``OTEL_TRACES_EXPORTER`` | unset | span exporters (``otlp``, ``console``, ``none``): docs/operations.md, tracing |

Durations are whole seconds (``90``) or a number with a unit, ``30s`` / ``30m`` / ``1h`` / ``2d``, or several
(``1h30m``); each must be more than 0. A variable set to the empty string counts as unset.

:func:`load_settings` reads and checks them all at once: every malformed value becomes one line
``NAME: reason (got 'value')`` of the :class:`SettingsError` it raises (a secret's value never appears:
``(value hidden)``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.errors import ConfigError
from bot.settings_values import MAX_DURATION as MAX_DURATION
from bot.settings_values import (
    PositiveDuration,
    SuggestedPrompts,
    describe_errors,
    http_url,
    listen_host,
    one_of,
    people_ids,
    redis_url_value,
    suggested_prompts,
    url_db,
    url_schemes,
)
from bot.settings_values import parse_duration as parse_duration
from bot.settings_values import redis_address as redis_address

if TYPE_CHECKING:
    from bot.approval_policy import Policy

DEFAULT_INSTRUCTIONS = (
    "You are a helpful assistant in a Slack workspace. When a request is ambiguous or needs a human "
    "decision, call the ask_user tool instead of guessing: give options when there is a small set of "
    "sensible choices (multi_select when several may apply), or none for a free-form answer. Keep replies short."
)

DEFAULT_GREETING = "Hi! What can I do for you? When a decision is yours, I'll ask you right here."
DEFAULT_PROMPTS = (
    '[{"title": "Plan a change", "message": "Help me plan a change; ask me whatever you need to decide."},'
    ' {"title": "Pick a restaurant", "message": "Help me choose where to have lunch with the team."},'
    ' {"title": "Draft an announcement", "message": "Draft a short announcement for this channel."}]'
)

Answerers = Literal["requester", "channel"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LogFormat = Literal["text", "json"]
OnTimeout = Literal["resume", "close"]
SlackView = Literal["agent", "assistant"]  # manifest features.agent_view (agent sessions, Stop) or assistant_view
Mode = Literal["playground", "http", "socket"]
Transport = Literal["http", "socket"]

MCP_PORT_DEFAULT = 3100  # python -m bot mcp --http, and the playground's first choice
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|KEY|PASSWORD)$", re.IGNORECASE)


_CHECK_ACROSS: ContextVar[bool] = ContextVar("check_across", default=True)
"""Whether :class:`Settings` checks its rules across settings (not while :func:`settings_beside` reads the rest)."""


class SettingsError(ConfigError):
    """Malformed settings: ``problems`` holds one ``NAME: reason (got 'value')`` line per bad setting.

    ``str(error)`` is those lines joined by newlines. No line contains a secret's value.
    """

    def __init__(self, problems: list[str], *, fields: tuple[str, ...] = ()) -> None:
        self.problems = problems
        self.fields = fields  # the settings' field names that were refused (``port``, ``redis_url``...)
        super().__init__("\n".join(problems))


# The text pydantic reads as a bool, in any case (pydantic docs, "Standard Library Types": bool)
_BOOL_WORDS = frozenset({"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"})


class Settings(BaseSettings):
    """The bot's settings; see the module docstring for the variables.

    Construct it with :func:`load_settings` to get readable errors; ``Settings(**values)`` raises pydantic's
    ``ValidationError`` (keyword values override the environment).
    """

    model_config = SettingsConfigDict(
        env_file=None, extra="ignore", case_sensitive=False, env_ignore_empty=True, allow_inf_nan=False
    )

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_model: str = "gpt-4.1-mini"
    redis_url: SecretStr | None = None  # may carry a password
    redis_prefix: str = "askbot:"
    redis_cluster: bool = False
    port: int = 3000
    http_host: str = "0.0.0.0"  # Slack must reach POST /slack/events; every request's signature is checked
    ask_answerers: Answerers = "requester"
    approvers: str = "requester"
    approval_policy: str | None = None  # a file, checked here (bot.approval_policy); APPROVERS is its one-rule case
    ask_ttl_seconds: PositiveDuration = 24 * 3600
    ask_on_timeout: OnTimeout = "resume"
    ask_remind_after: PositiveDuration | None = None
    ask_remind_max: int = Field(default=1, ge=1, le=100)
    ask_escalate_after: PositiveDuration | None = None
    ask_escalate_to: str | None = None
    ask_escalate_answers: bool = False
    run_retention_seconds: PositiveDuration = 7 * 24 * 3600
    model_turn_timeout: PositiveDuration = 300
    max_reply_chars: int = Field(default=40_000, ge=100)
    history_token_budget: int | None = 24_000  # bot.agent._loop.budget.DEFAULT_HISTORY_BUDGET (not imported)
    tool_result_max_chars: int = Field(default=20_000, ge=1000, le=10_000_000)  # bot.agent.tools' default
    max_runs_per_person: int = Field(default=3, ge=1)
    max_waiting_per_person: int = Field(default=5, ge=1, le=100_000)
    max_runs_per_process: int = Field(default=50, ge=1)
    allow_user_mentions: bool = False
    agent: str | None = None
    agent_instructions: str = DEFAULT_INSTRUCTIONS
    mcp_config: str | None = None
    reply_streaming: bool = True
    slack_view: SlackView = "agent"
    stream_interval: float = Field(default=1.0, ge=0.2, le=10)
    assistant_greeting: str = Field(default=DEFAULT_GREETING, min_length=1, max_length=3000)
    assistant_prompts: SuggestedPrompts = Field(default_factory=lambda: suggested_prompts(DEFAULT_PROMPTS))
    mcp_port: int | None = None  # MCP_PORT_DEFAULT for mcp --http; see bot.playground.mcp for the playground
    mcp_host: str = "127.0.0.1"
    mcp_elicit_url_schemes: Annotated[tuple[str, ...], NoDecode] = ("https",)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_on_port: bool | None = None
    prometheus_multiproc_dir: str | None = None  # read by prometheus-client itself; checked here before it is
    mcp_token: SecretStr | None = None
    mcp_callers: str | None = None  # a file: bot.mcp_server.callers (no MCP SDK import)
    mcp_caller: str | None = None
    mcp_ask_channel: str | None = None
    mcp_ask_user: str | None = None
    mcp_progress_seconds: float = Field(default=10.0, ge=0.5, le=600)
    log_level: LogLevel = "INFO"
    log_format: LogFormat = "text"
    otel_traces_exporter: str | None = None  # read by bot.ops.tracing from the environment; checked here with the rest

    @field_validator("slack_bot_token", mode="before")
    @classmethod
    def _bot_token(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and text.strip().startswith("xapp-"):
            raise ValueError("is an app-level token (xapp-); it belongs in SLACK_APP_TOKEN, the bot token is xoxb-")
        if isinstance(text, str) and not text.strip().startswith(("xoxb-", "xoxe.xoxb-")):
            raise ValueError("must be a bot token, starting with xoxb-")
        return text.strip() if isinstance(text, str) else value

    @field_validator("slack_app_token", mode="before")
    @classmethod
    def _app_token(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and text.strip().startswith(("xoxb-", "xoxe.xoxb-")):
            raise ValueError("is a bot token (xoxb-); it belongs in SLACK_BOT_TOKEN, the app-level token is xapp-")
        if isinstance(text, str) and not text.strip().startswith("xapp-"):
            raise ValueError("must be an app-level token, starting with xapp- (scope connections:write)")
        return text.strip() if isinstance(text, str) else value

    @field_validator("slack_api_url", mode="before")
    @classmethod
    def _slack_api_url(cls, value: object) -> str:
        return http_url(value, "https://slack.com/api/")

    @field_validator("openai_base_url", mode="before")
    @classmethod
    def _openai_base_url(cls, value: object) -> str | None:
        return None if value is None else http_url(value, "https://api.openai.com/v1")

    @field_validator("redis_url", mode="before")
    @classmethod
    def _redis_url(cls, value: object) -> SecretStr | None:
        if value is None:
            return None
        return SecretStr(redis_url_value(value.get_secret_value() if isinstance(value, SecretStr) else value))

    @field_validator("metrics_port", "mcp_port", mode="before")
    @classmethod
    def _optional_port(cls, value: object) -> int | None:
        return None if value is None else cls._port(value)

    @field_validator("http_host", "mcp_host", "metrics_host", mode="before")
    @classmethod
    def _host(cls, value: object) -> str:
        return listen_host(value)

    @field_validator("mcp_elicit_url_schemes", mode="before")
    @classmethod
    def _url_schemes(cls, value: object) -> tuple[str, ...]:
        return url_schemes(",".join(value) if isinstance(value, (list, tuple)) else value)

    @field_validator("prometheus_multiproc_dir", mode="before")
    @classmethod
    def _multiproc_dir(cls, value: object) -> object:
        """prometheus-client opens its files there when the metrics are defined (a missing or read-only directory
        was a traceback at import)."""
        if not isinstance(value, str):
            return value
        if not os.path.isdir(value):
            raise ValueError("must be an existing directory (prometheus-client's multiprocess mode writes there)")
        if not os.access(value, os.W_OK | os.X_OK):
            raise ValueError("must be a directory this process can write")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _yes_no_text(cls, value: object, info: ValidationInfo) -> object:
        """A yes/no setting given as text (``REPLY_STREAMING="true "``) is read without its surrounding ASCII
        whitespace, as a number is: pydantic's bool parsing keeps it, so ``"true "`` was refused while
        ``MAX_RUNS_PER_PERSON=" 3 "`` was read as 3. Only a word pydantic reads as a bool is trimmed, so a refused
        value is still shown as it was given."""
        if isinstance(value, str) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            trimmed = value.strip(" \t\n\r\v\f")
            if (annotation is bool or bool in get_args(annotation)) and trimmed.lower() in _BOOL_WORDS:
                return trimmed
        return value

    @field_validator("slack_signing_secret", "openai_api_key", mode="before")
    @classmethod
    def _secret_text(cls, value: object) -> object:
        """A secret without the whitespace around it (a file-mounted secret ends in a newline: kept, every Slack
        request was refused "signature mismatch", every model call "control character in headers"); nothing but
        whitespace is not set."""
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("port", mode="before")
    @classmethod
    def _port(cls, value: object) -> int:
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
            return value
        raise ValueError("must be a whole number from 0 to 65535")

    @field_validator("history_token_budget", mode="before")
    @classmethod
    def _history_token_budget(cls, value: object) -> int | None:
        if value is None or (isinstance(value, str) and value.strip().lower() == "off"):
            return None
        text = value.strip().replace("_", "") if isinstance(value, str) else value
        if isinstance(text, str) and text.isascii() and text.isdigit():
            text = int(text)
        if isinstance(text, int) and not isinstance(text, bool) and 1000 <= text <= 10_000_000:
            return text
        raise ValueError("must be a whole number of tokens from 1000 to 10000000, or off")

    @field_validator("ask_answerers", mode="before")
    @classmethod
    def _ask_answerers(cls, value: object) -> str:
        return one_of(value, get_args(Answerers))

    @field_validator("agent", mode="before")
    @classmethod
    def _agent(cls, value: object) -> object:
        if isinstance(value, str) and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", value.strip()):
            raise ValueError("must look like module:attribute, e.g. mypkg.agents:build")
        return value.strip() if isinstance(value, str) else value

    @field_validator("mcp_config", mode="before")
    @classmethod
    def _mcp_config(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        from bot.agent.mcp.config import McpConfigError, load_mcp_config  # no MCP SDK import

        try:
            load_mcp_config(value.strip())
        except McpConfigError as exc:
            raise ValueError(str(exc)) from None
        return value.strip()

    @field_validator("approvers", mode="before")
    @classmethod
    def _approvers(cls, value: object) -> str:
        text = str(value).strip()
        if text.lower() in ("requester", "channel"):
            return text.lower()
        return people_ids(
            text, "must be requester, channel, or comma-separated user ids (U..., W...) and user-group ids (S...)"
        )

    @field_validator("approval_policy", mode="before")
    @classmethod
    def _approval_policy(cls, value: object) -> object:
        """Loaded and validated now, so a bad file refuses the start (one line per problem: :func:`load_settings`)."""
        if not isinstance(value, str):
            return value
        from bot.approval_policy import load_policy  # pydantic and pyyaml only

        load_policy(value.strip())  # raises PolicyError, a ValueError for pydantic
        return value.strip()

    @model_validator(mode="after")
    def _across(self) -> Settings:
        """The rules across settings, every one checked (one ``NAME: reason`` line each, all told at once); not while
        :func:`settings_beside` reads the rest of refused settings."""
        if not _CHECK_ACROSS.get():
            return self
        problems = [*self._one_approval_rule(), *self._mcp_caller(), *self._cluster(), *self._escalation()]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _one_approval_rule(self) -> list[str]:
        if self.approval_policy is not None and "approvers" in self.model_fields_set:
            return [
                "APPROVERS: not with APPROVAL_POLICY (the policy's rules say who approves): put these approvers in"
                " its default rule, or unset one of them"
            ]
        return []

    @field_validator("ask_on_timeout", mode="before")
    @classmethod
    def _ask_on_timeout(cls, value: object) -> str:
        return one_of(value, get_args(OnTimeout))

    @field_validator("ask_escalate_to", mode="before")
    @classmethod
    def _ask_escalate_to(cls, value: object) -> str | None:
        if value is None:
            return None
        text = str(value).strip()
        if re.fullmatch(r"[CG][A-Z0-9_]{1,63}", text):
            return text
        return people_ids(
            text, "must be a channel id (C...), or comma-separated user ids (U..., W...) and group ids (S...)"
        )

    @field_validator("mcp_token", mode="before")
    @classmethod
    def _mcp_token(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and len(text.strip()) < 16:
            raise ValueError(
                "must be at least 16 characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
            )
        return text.strip() if isinstance(text, str) else value

    @field_validator("mcp_callers", mode="before")
    @classmethod
    def _mcp_callers(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        from bot.mcp_server.callers import load_callers  # yaml and pydantic only

        try:
            load_callers(value.strip())
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value.strip()

    def _mcp_caller(self) -> list[str]:
        problems = []
        if self.mcp_callers is not None and self.mcp_token is not None:
            problems.append("MCP_TOKEN: set MCP_TOKEN (one caller) or MCP_CALLERS (each its token), not both")
        problems += self._callers_rules()
        if self.mcp_caller is None:
            return problems
        if self.mcp_callers is None:
            return [*problems, "MCP_CALLER: names one of MCP_CALLERS' callers; MCP_CALLERS is not set"]
        from bot.mcp_server.callers import load_callers

        names = [c.name for c in load_callers(self.mcp_callers).entries]
        if self.mcp_caller not in names:
            problems.append(f"MCP_CALLER: {self.mcp_caller!r} is none of MCP_CALLERS' callers ({', '.join(names)})")
        return problems

    def _callers_rules(self) -> list[str]:
        """Every ``policy_rule`` of ``MCP_CALLERS`` names a rule of ``APPROVAL_POLICY``."""
        if self.mcp_callers is None:
            return []
        from bot.approval_policy import load_policy
        from bot.mcp_server.callers import load_callers

        entries = load_callers(self.mcp_callers).entries
        named = [(i, c) for i, c in enumerate(entries) if c.policy_rule is not None]
        if not named:
            return []
        if self.approval_policy is None:
            i, caller = named[0]
            return [
                f"MCP_CALLERS: callers[{i}] ({caller.name}).policy_rule: names a rule of APPROVAL_POLICY, which is"
                " not set"
            ]
        rules = [r.name for r in load_policy(self.approval_policy).rules if r.name]
        return [
            f"MCP_CALLERS: callers[{i}] ({caller.name}).policy_rule: {caller.policy_rule!r} is no rule of"
            f" APPROVAL_POLICY (its named rules: {', '.join(rules) or 'none'})"
            for i, caller in named
            if caller.policy_rule not in rules
        ]

    @field_validator("mcp_ask_channel", mode="before")
    @classmethod
    def _mcp_ask_channel(cls, value: object) -> str | None:
        text = None if value is None else str(value).strip()
        if text is not None and not re.fullmatch(r"[CGD][A-Z0-9_]{1,63}", text):
            raise ValueError("must be a channel id (C..., G... or D...)")
        return text

    @field_validator("mcp_ask_user", mode="before")
    @classmethod
    def _mcp_ask_user(cls, value: object) -> str | None:
        text = None if value is None else str(value).strip()
        if text is not None and not re.fullmatch(r"[UW][A-Z0-9_]{1,63}", text):
            raise ValueError("must be a user id (U... or W...)")
        return text

    def _cluster(self) -> list[str]:
        if not self.redis_cluster:
            return []
        problems = []
        if "{" in self.redis_prefix or "}" in self.redis_prefix:
            problems.append("REDIS_PREFIX: must not contain { or } with REDIS_CLUSTER (they decide a key's slot)")
        if self.redis_url is not None:
            parts = urlsplit(self.redis_url.get_secret_value())
            if parts.scheme.lower() == "unix":
                problems.append("REDIS_CLUSTER: a cluster is reached over TCP; REDIS_URL must be redis:// or rediss://")
            elif url_db(self.redis_url.get_secret_value()).lstrip("0") != "":
                problems.append("REDIS_CLUSTER: a cluster has only database 0; drop it from REDIS_URL")
        return problems

    def _escalation(self) -> list[str]:
        problems = []
        if self.ask_escalate_after is not None and self.ask_escalate_to is None:
            problems.append("ASK_ESCALATE_TO: must be set when ASK_ESCALATE_AFTER is (whom to ask)")
        if self.ask_escalate_to is not None and self.ask_escalate_after is None:
            problems.append("ASK_ESCALATE_AFTER: must be set when ASK_ESCALATE_TO is (when to ask them)")
        if self.ask_escalate_answers and self.ask_escalate_to is None:
            problems.append("ASK_ESCALATE_ANSWERS: means nothing without ASK_ESCALATE_TO (whom questions escalate to)")
        if self.ask_escalate_after is not None and self.ask_escalate_after >= self.ask_ttl_seconds:
            problems.append("ASK_ESCALATE_AFTER: must be shorter than ASK_TTL_SECONDS (the question's deadline)")
        return problems

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: object) -> str:
        return one_of(value, get_args(LogLevel), upper=True)

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> str:
        return one_of(value, get_args(LogFormat))

    @field_validator("otel_traces_exporter", mode="before")
    @classmethod
    def _otel_traces_exporter(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        from bot.ops.tracing import exporter_problem  # importlib only: no OpenTelemetry import

        problem = exporter_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("slack_view", mode="before")
    @classmethod
    def _slack_view(cls, value: object) -> str:
        return one_of(value, get_args(SlackView))

    @property
    def ops_on_port(self) -> bool:
        """Whether the HTTP server serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``PORT`` beside
        ``/slack/events``: ``METRICS_ON_PORT`` when set, else only while ``METRICS_PORT`` is unset (then they have
        their own port, loopback by default, and stay off the public one)."""
        return self.metrics_on_port if self.metrics_on_port is not None else self.metrics_port is None

    @property
    def mode(self) -> Mode:
        """``playground`` without a bot token, ``socket`` with an app token, else ``http``."""
        if self.slack_bot_token is None:
            return "playground"
        return "socket" if self.slack_app_token is not None else "http"

    def secret_values(self) -> list[str]:
        """Every secret set (tokens, keys, the Redis URL's password, and the secret-bearing values of the
        ``MCP_CONFIG`` file, :meth:`bot.agent.mcp.config.McpServerConfig.secret_values`), e.g. to redact them from
        logs."""
        values = [
            v.get_secret_value()
            for name, v in self.__dict__.items()
            if isinstance(v, SecretStr) and v.get_secret_value() and name != "redis_url"
        ]
        if self.redis_url is not None:
            password = urlsplit(self.redis_url.get_secret_value()).password
            if password:
                values.append(password)
        if self.mcp_config:
            from bot.agent.mcp.config import McpConfigError, load_mcp_config  # no MCP SDK import

            try:
                servers = load_mcp_config(self.mcp_config)
            except McpConfigError:  # checked when the settings were read; changed since: nothing of it is used
                servers = []
            values += [v for server in servers for v in server.secret_values()]
        return values


def _is_secret(field: str) -> bool:
    info = Settings.model_fields.get(field)
    return bool(_SECRET_NAME.search(field)) or (info is not None and "SecretStr" in repr(info.annotation))


def _surrogates(value: object) -> bool:
    """Whether ``value`` is text holding a lone surrogate (bytes that were not UTF-8)."""
    return isinstance(value, str) and any("\ud800" <= ch <= "\udfff" for ch in value)


def load_settings(**values: Any) -> Settings:
    """The settings from the environment (``values``, by field name, take precedence over it).

    Raises :class:`SettingsError` (a ``ConfigError``) listing every malformed setting at once, one line each.
    """
    not_utf8 = [  # Python keeps the environment's non-UTF-8 bytes as lone surrogates, which pydantic can't read:
        # each is told, and the rest is checked with it left at its default
        name
        for name in Settings.model_fields
        if _surrogates(values.get(name, os.environ.get(name.upper())))
    ]
    unreadable = [f"{name.upper()}: is not valid UTF-8 text" for name in not_utf8]
    values = {**values, **_defaults(not_utf8)}
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        problems = describe_errors(exc, order=list(Settings.model_fields), is_secret=_is_secret)
        fields = tuple(
            dict.fromkeys(str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["loc"][0] in Settings.model_fields)
        )
        problems = [*unreadable, *_policy_problems(exc, problems)]
        fields = (*not_utf8, *fields)
        if fields:  # the rules across settings, which pydantic checks only once every setting is valid: now too
            try:
                Settings(**{**values, **_defaults(fields)})
            except ValidationError as across:  # each rule about settings all given well (one refused stands in for
                # its default here: a rule naming it would judge a value nobody gave)
                refused = {name.upper() for name in fields}
                lines = [line for e in across.errors() if not e["loc"] for line in _across_lines(e)]
                problems += [line for line in lines if not refused & set(re.findall(r"[A-Z][A-Z0-9_]+", line))]
        raise SettingsError(problems, fields=fields) from None
    if unreadable:
        raise SettingsError(unreadable, fields=tuple(not_utf8))
    return settings


def _defaults(fields: Sequence[str]) -> dict[str, Any]:
    """``{field: its default}`` for ``fields`` (settings refused or unreadable, left out of a further check)."""
    return {name: Settings.model_fields[name].get_default() for name in fields}


def _across_lines(error: Any) -> list[str]:
    """The ``NAME: reason`` lines of a rule across settings' refusal (pydantic's error dict, no ``loc``)."""
    return str(error.get("ctx", {}).get("error", error["msg"])).splitlines()


def settings_beside(error: SettingsError, **values: Any) -> Settings | None:
    """The settings as they would be with the values ``error`` refused left at their defaults (``values`` as for
    :func:`load_settings`), so that what else is wrong with them (a required setting not set) is told in the same
    round; None when even they can't be loaded (a check across settings, with no field to leave out)."""
    checking = _CHECK_ACROSS.set(False)  # what the rules across settings say is told already
    try:
        return Settings(**{**values, **_defaults(error.fields)})
    except ValidationError:
        return None
    finally:
        _CHECK_ACROSS.reset(checking)


def deployed_policy(settings: Settings) -> Policy:
    """The approval policy ``settings`` deploy: ``APPROVAL_POLICY``'s file (read again: raises
    :class:`~bot.approval_policy.PolicyError` if it changed for the worse since the settings were checked), else the
    one rule ``APPROVERS`` stands for (:meth:`~bot.approval_policy.Policy.from_approvers`)."""
    from bot.approval_policy import Policy, load_policy

    if settings.approval_policy:
        return load_policy(settings.approval_policy)
    return Policy.from_approvers(settings.approvers)


def _policy_problems(exc: ValidationError, problems: list[str]) -> list[str]:
    """``problems`` with ``APPROVAL_POLICY``'s one line replaced by one line per problem of its file."""
    from bot.approval_policy import PolicyError

    for item in exc.errors(include_url=False):
        error = item.get("ctx", {}).get("error")
        if item["loc"][:1] == ("approval_policy",) and isinstance(error, PolicyError):
            lines = [f"APPROVAL_POLICY: {problem}" for problem in error.problems]
            at = next(i for i, p in enumerate(problems) if p.startswith("APPROVAL_POLICY: "))
            return [*problems[:at], *lines, *problems[at + 1 :]]
    return problems
