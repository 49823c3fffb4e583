"""The fake's agent sessions (agents.sessions.setStatus / rename, Stop, the Messages tab, app_context_changed),
through slack_sdk's AsyncWebClient over real HTTP and a signed event receiver."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import Workspace
from bot.fakeslack.webapi.agent_sessions import MISSING_STOP_SUBSCRIPTION

TOKEN = "xoxb-test"
SUBSCRIBED = ("app_mention", "message.im", "agent_session_stopped", "app_context_changed", "app_home_opened")


@pytest.fixture
async def events() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback receiver of the fake's signed events: (its url, the events received)."""
    received: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        received.append(json.loads(await request.text()))
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/slack/events", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}/slack/events", received
    await runner.cleanup()


async def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as caught:
        await call
    data: dict[str, Any] = caught.value.response.data
    return data


async def test_set_status_creates_the_session_with_its_title_once_then_changes_its_status() -> None:
    async with Workspace(bot_token=TOKEN, agent_view=True, subscriptions=SUBSCRIBED) as ws:
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = (await client.chat_postMessage(channel="C_GENERAL", text="deploy please"))["ts"]
        first = await client.agents_sessions_setStatus(
            channel_id="C_GENERAL", thread_ts=root, status="processing", title="Deploy", initiator_user_id="U_ALICE"
        )
        assert first["status"] == "processing" and first["title"] == "Deploy" and "warning" not in first.data
        await client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="suspended", title="x")
        session = ws.session("C_GENERAL", root)
        assert session is not None
        assert session["title"] == "Deploy" and session["initiator_user_id"] == "U_ALICE"  # title only on creation
        assert session["statuses"] == ["processing", "suspended"]
        await client.agents_sessions_rename(channel_id="C_GENERAL", thread_ts=root, title="Deploy web 2.1")
        assert ws.session("C_GENERAL", root)["title"] == "Deploy web 2.1"  # type: ignore[index]


async def test_set_status_refusals_are_slacks_shapes() -> None:
    async with Workspace(bot_token=TOKEN, agent_view=True, subscriptions=SUBSCRIBED) as ws:
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = (await client.chat_postMessage(channel="C_GENERAL", text="hi"))["ts"]
        bad = await refused(client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="busy"))
        assert bad["error"] == "invalid_arguments" and "/status" in bad["response_metadata"]["messages"][0]
        lost = await refused(client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts="1.2", status="active"))
        assert lost["error"] == "thread_not_found"
        none = await refused(client.agents_sessions_setStatus(channel_id="C_GENERAL", status="active"))
        assert none["error"] == "invalid_arguments"
        long = await refused(
            client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="active", title="x" * 201)
        )
        assert long["error"] == "invalid_arguments"
        unknown = await refused(client.agents_sessions_rename(channel_id="C_GENERAL", thread_ts=root, title="t"))
        assert unknown["error"] == "session_not_found"
        assert ws.session("C_GENERAL", root) is None


async def test_an_app_not_declared_an_agent_is_refused_and_a_missing_subscription_warns() -> None:
    async with Workspace(bot_token=TOKEN) as ws:  # assistant_view app: no sessions
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = (await client.chat_postMessage(channel="C_GENERAL", text="hi"))["ts"]
        data = await refused(client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="active"))
        assert data["error"] == "not_an_agent"
    async with Workspace(bot_token=TOKEN, agent_view=True, subscriptions=("app_mention",)) as ws:
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = (await client.chat_postMessage(channel="C_GENERAL", text="hi"))["ts"]
        answer = await client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="processing")
        assert answer["warning"] == MISSING_STOP_SUBSCRIPTION


async def test_stop_stops_the_threads_streams_and_sends_the_event_but_leaves_the_status(
    events: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = events
    async with Workspace(url, "secret", bot_token=TOKEN, agent_view=True, subscriptions=SUBSCRIBED) as ws:
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = ws.add_user_message("U_ALICE", "C_GENERAL", "write a poem")["ts"]
        with pytest.raises(Exception, match="no processing agent session"):
            await ws.stop_session("U_ALICE", "C_GENERAL", root)
        await client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="processing")
        stream = await client.chat_startStream(
            channel="C_GENERAL",
            thread_ts=root,
            recipient_user_id="U_ALICE",
            recipient_team_id="T_PLAYGROUND",
            markdown_text="Roses",
        )
        ack = await ws.stop_session("U_ALICE", "C_GENERAL", root)
        assert ack is not None and ack.ok
        event = received[-1]["event"]
        assert event["type"] == "agent_session_stopped" and event["user"] == "U_ALICE"
        assert event["thread_ts"] == root and event["streaming_message_ts"] == [stream["ts"]]
        assert ws.session("C_GENERAL", root)["status"] == "processing"  # type: ignore[index]  # the app moves it
        again = await refused(client.chat_appendStream(channel="C_GENERAL", ts=stream["ts"], markdown_text=" are"))
        assert again["error"] == "message_not_in_streaming_state"


async def test_messages_tab_and_app_context_events(events: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = events
    async with Workspace(url, "secret", bot_token=TOKEN, agent_view=True, subscriptions=SUBSCRIBED) as ws:
        await ws.open_messages_tab("U_ALICE")
        opened = received[-1]["event"]
        assert opened["type"] == "app_home_opened" and opened["tab"] == "messages" and opened["channel"] == "D_ALICE"
        await ws.change_app_context("U_ALICE", "C_GENERAL")
        changed = received[-1]["event"]
        assert changed["type"] == "app_context_changed"
        assert changed["context"]["entities"][0] == {
            "type": "slack#/types/channel_id",
            "value": "C_GENERAL",
            "team_id": "T_PLAYGROUND",
        }
        await ws.change_app_context("U_ALICE", None)
        assert received[-1]["event"]["context"] == {}


async def test_a_plan_stream_shows_its_title_above_its_tasks() -> None:
    async with Workspace(bot_token=TOKEN) as ws:
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        root = ws.add_user_message("U_ALICE", "D_ALICE", "check both")["ts"]
        started = await client.chat_startStream(
            channel="D_ALICE",
            thread_ts=root,
            task_display_mode="plan",
            chunks=[
                {"type": "plan_update", "title": "Checking 2 things"},
                {"type": "task_update", "id": "a", "title": "disk", "status": "in_progress"},
            ],
        )
        message = ws.messages("D_ALICE", thread_ts=root)[-1]
        assert message["ts"] == started["ts"] and message["blocks"][0]["text"]["text"] == "Checking 2 things"
        wrong = await refused(client.chat_startStream(channel="D_ALICE", thread_ts=root, task_display_mode="grid"))
        assert wrong["error"] == "invalid_arguments"
