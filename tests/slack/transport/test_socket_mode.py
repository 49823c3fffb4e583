"""Socket Mode end to end: the real bot (``run_socket_mode``) connected to the fake Slack's websocket."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import OpenAIChatModel
from bot.config import Settings
from bot.fakeslack import Workspace
from bot.slack.app import Bot, build_bot
from bot.slack.transport.socket_mode import run_socket_mode
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.slack_scenarios import SINGLE, is_answer_form

TOKEN = "xoxb-socket-test-0123456789"
APP_TOKEN = "xapp-1-A0PLAYGRND-socket-test"
ALICE, GENERAL = "U_ALICE", "C_GENERAL"


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message.get("blocks", []))


@pytest.fixture
async def socket_bot(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> AsyncIterator[tuple[Workspace, Bot]]:
    """The fake Slack in Socket Mode and the real bot connected to it (no signing secret)."""
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN, ack_timeout=5) as ws:
        settings = Settings(
            slack_bot_token=TOKEN,
            slack_app_token=APP_TOKEN,
            slack_api_url=ws.api_url,
            redis_prefix=prefix,
            slack_view="assistant",  # the fake workspace's app is an assistant_view app
        )
        assert settings.mode == "socket" and settings.slack_signing_secret is None
        model = OpenAIChatModel(model="test", base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
        bot = build_bot(settings, model=model, redis_client=fake_redis)
        task = asyncio.create_task(run_socket_mode(bot, app_token=APP_TOKEN))
        try:
            await ws.fake.socket_mode.wait_connected(timeout=5)
            yield ws, bot
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await bot.drain()
            await bot.aclose()
            assert ws.fake.socket_mode.connections == [] or all(c.closed for c in ws.fake.socket_mode.connections)


async def test_mention_question_click_reply_over_socket(
    socket_bot: tuple[Workspace, Bot], openai_server: FakeOpenAI
) -> None:
    ws, bot = socket_bot
    opens = ws.calls("apps.connections.open")
    assert len(opens) == 1 and opens[0].error is None and opens[0].response["url"].startswith("ws://127.0.0.1:")
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Summarizing *web*."))
    d = await ws.mention(ALICE, GENERAL, "summarize my project")
    assert [a.kind for a in d.acks] == ["app_mention", "message"]
    assert all(a.status == 200 and a.envelope_id and a.json is None for a in d.acks)
    envelope = json.loads(d.acks[0].request_body)
    assert envelope["type"] == "events_api" and envelope["payload"]["event"]["type"] == "app_mention"
    assert envelope["accepts_response_payload"] is False and envelope["retry_attempt"] == 0
    thread = d.message["ts"]
    q = await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_buttons)
    ack = await ws.click(q, "web", user=ALICE)
    assert ack.status == 200 and ack.in_time and ack.envelope_id
    assert json.loads(ack.request_body)["type"] == "interactive"
    await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "Summarizing" in m["text"])
    await bot.drain()
    assert [c for c in ws.calls() if c.error] == []
    assert ws.acks == [*d.acks, ack]


async def test_blank_modal_submit_gets_errors_ack_over_socket(
    socket_bot: tuple[Workspace, Bot], openai_server: FakeOpenAI
) -> None:
    ws, _bot = socket_bot
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", {"question": "What is the goal?"}, id="f1")]),
        Reply(text="Goal noted."),
    )
    d = await ws.mention(ALICE, GENERAL, "help me")
    q = await ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_buttons)
    await ws.click(q, "Answer", user=ALICE)
    view = await ws.wait_for_view(user=ALICE, predicate=is_answer_form)
    blank = await ws.submit_view(view, {"answer_input": {"answer_text": "   "}}, user=ALICE)
    assert blank.status == 200 and blank.envelope_id
    assert json.loads(blank.request_body)["accepts_response_payload"] is True
    assert blank.json == {"response_action": "errors", "errors": {"answer_input": "Please write an answer."}}
    assert ws.view_errors[view["id"]] == {"answer_input": "Please write an answer."}
    assert len(openai_server.requests) == 1
    ok = await ws.submit_view(view, {"answer_input": {"answer_text": "Ship v2"}}, user=ALICE)
    assert ok.status == 200 and ok.body == "" and ok.json is None
    await ws.wait_for_message(
        channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Goal noted."
    )


async def test_reconnects_when_slack_asks(socket_bot: tuple[Workspace, Bot], openai_server: FakeOpenAI) -> None:
    ws, _bot = socket_bot
    hub = ws.fake.socket_mode
    await hub.refresh()
    await ws.fake.wait_until(lambda: len(ws.calls("apps.connections.open")) == 2, timeout=5, what="a reconnect")
    openai_server.script(Reply(text="Still here."))
    await ws.fake.wait_until(lambda: hub.connects == 2, timeout=5, what="the new connection")
    d = await ws.mention(ALICE, GENERAL, "ping")
    assert d.ack is not None and d.ack.ok
    await ws.wait_for_message(
        channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Still here."
    )


async def test_apps_connections_open_takes_only_the_app_token() -> None:
    async with Workspace(bot_token=TOKEN, transport="socket", app_token=APP_TOKEN) as ws:
        session = aiohttp.ClientSession()
        try:
            client = AsyncWebClient(base_url=ws.api_url, session=session)
            ok = await client.apps_connections_open(app_token=APP_TOKEN)
            assert str(ok["url"]).startswith(ws.fake.base_url.replace("http", "ws", 1) + "/socket-mode?ticket=")
            for token, error in ((TOKEN, "not_allowed_token_type"), ("xapp-1-wrong", "invalid_auth")):
                with pytest.raises(SlackApiError) as exc:
                    await client.apps_connections_open(app_token=token)
                assert exc.value.response["error"] == error
            with pytest.raises(SlackApiError) as exc:
                await AsyncWebClient(token=APP_TOKEN, base_url=ws.api_url, session=session).auth_test()
            assert exc.value.response["error"] == "not_allowed_token_type"
            async with session.ws_connect(str(ok["url"])) as sock:  # the ticket works once
                hello = await sock.receive_json(timeout=5)
                assert hello["type"] == "hello" and hello["connection_info"]["app_id"]
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await session.ws_connect(str(ok["url"]))
        finally:
            await session.close()
