"""The start-up check of SLACK_BOT_TOKEN (``bot.serving.slack_team``) against Slack API answers that are not
Slack's JSON (a proxy, a gateway): served by a small aiohttp server on loopback."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError
from bot.serving import slack_team
from bot.testing.loopback import one_route

TOKEN = "xoxb-start-up-check-token-0123456789"


@pytest.fixture
async def answering(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    body, content_type, status = request.param

    async def auth_test(_request: web.Request) -> web.Response:
        return web.Response(text=body, content_type=content_type, status=status, headers={"Retry-After": "0"})

    async with one_route("/api/auth.test", auth_test) as url:
        yield f"{url}/api/"


@pytest.mark.parametrize(
    "answering",
    [
        ("oops", "application/json", 200),  # not JSON
        ("[]", "application/json", 200),  # JSON, not an object
        ("<html>bad gateway</html>", "text/html", 502),
    ],
    indirect=True,
    ids=["not-json", "a-list", "html-502"],
)
async def test_an_answer_that_is_not_slacks_json_only_warns_and_never_shows_the_token(
    answering: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a break-it pass: a proxy's odd answer crashed start-up with a traceback ('list' object has no
    attribute 'get') instead of the warning; the MCP server, which needs the team id, says it in one line."""
    caplog.set_level(logging.WARNING, logger="bot.serving")
    client = AsyncWebClient(token=TOKEN, base_url=answering)
    assert await slack_team(client, required=False, within=10) is None
    assert "start-up: Slack's auth.test failed" in caplog.text and TOKEN not in caplog.text
    with pytest.raises(ConfigError) as refused:
        await slack_team(client, required=True, within=10)
    assert "auth.test failed" in str(refused.value) and TOKEN not in str(refused.value)
