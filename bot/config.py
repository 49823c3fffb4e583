"""All settings, from the environment (pydantic-settings). Secrets are ``SecretStr``: never printed.

| variable | default | meaning |
|---|---|---|
| ``SLACK_BOT_TOKEN`` | unset | xoxb- token; unset -> the local playground |
| ``SLACK_SIGNING_SECRET`` | unset | verifies requests in HTTP mode |
| ``SLACK_APP_TOKEN`` | unset | xapp- token; set -> Socket Mode |
| ``SLACK_API_URL`` | ``https://slack.com/api/`` | Web API base (point at a fake) |
| ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` | unset | read by the openai client; no key -> demo model in the playground |
| ``OPENAI_MODEL`` | ``gpt-4.1-mini`` | chat model name |
| ``REDIS_URL`` | unset | Redis; unset -> in-process (playground only) |
| ``REDIS_PREFIX`` | ``askbot:`` | key prefix |
| ``PORT`` | ``3000`` | HTTP port for ``POST /slack/events`` |
| ``ASK_ANSWERERS`` | ``requester`` | who may answer: ``requester`` or ``channel`` |
| ``ASK_TTL_SECONDS`` | ``86400`` | how long a question waits |
| ``AGENT_INSTRUCTIONS`` | see below | the system prompt |
| ``LOG_LEVEL`` | ``INFO`` | logging level |
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_INSTRUCTIONS = (
    "You are a helpful assistant in a Slack workspace. When a request is ambiguous or needs a human "
    "decision, call the ask_user tool instead of guessing: give options when there is a small set of "
    "sensible choices (multi_select when several may apply), or none for a free-form answer. Keep replies short."
)


class Settings(BaseSettings):
    """The bot's settings; see the module docstring for the variables."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_model: str = "gpt-4.1-mini"
    redis_url: SecretStr | None = None  # may carry a password
    redis_prefix: str = "askbot:"
    port: int = Field(default=3000, ge=0, le=65535)
    ask_answerers: Literal["requester", "channel"] = "requester"
    ask_ttl_seconds: int = Field(default=24 * 3600, ge=1)
    agent_instructions: str = DEFAULT_INSTRUCTIONS
    log_level: str = "INFO"

    @property
    def mode(self) -> Literal["playground", "http", "socket"]:
        """``playground`` without a bot token, ``socket`` with an app token, else ``http``."""
        if self.slack_bot_token is None:
            return "playground"
        return "socket" if self.slack_app_token is not None else "http"
