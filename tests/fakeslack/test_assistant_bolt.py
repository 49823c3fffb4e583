"""The assistant pane's events as a real Bolt AsyncApp receives them: Bolt's AsyncAssistant middleware must route
``assistant_thread_started``, ``assistant_thread_context_changed`` and the person's messages in the pane thread to
its listeners, and its utilities (say with context metadata, set_status, set_suggested_prompts, set_title, the
default thread context store) must work against the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp, AsyncAssistant
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import PlaygroundError, Workspace

SECRET = "playground-signing-secret"
TOKEN = "xoxb-test"
PROMPTS = [{"title": "Deploy", "message": "deploy the web app"}]


class PaneBot:
    """A Bolt app with an AsyncAssistant, keeping what each listener saw."""

    def __init__(self, api_url: str) -> None:
        self.seen: dict[str, list[dict[str, Any]]] = {}
        client = AsyncWebClient(token=TOKEN, base_url=api_url)
        self.app = AsyncApp(signing_secret=SECRET, client=client, request_verification_enabled=True)
        assistant = AsyncAssistant()

        @assistant.thread_started
        async def started(payload: dict[str, Any], say: Any, set_suggested_prompts: Any) -> None:
            self.seen.setdefault("started", []).append(payload)
            await say("How can I help?")
            await set_suggested_prompts(prompts=PROMPTS, title="Try")

        @assistant.thread_context_changed
        async def changed(payload: dict[str, Any], save_thread_context: Any) -> None:
            self.seen.setdefault("changed", []).append(payload)
            await save_thread_context(payload["assistant_thread"]["context"])

        @assistant.user_message
        async def asked(
            payload: dict[str, Any], say: Any, set_status: Any, set_title: Any, get_thread_context: Any
        ) -> None:
            context = await get_thread_context()
            self.seen.setdefault("asked", []).append({**payload, "thread_context": dict(context or {})})
            await set_title(payload["text"])
            await set_status("is thinking...")
            await say(f"You said: {payload['text']}")

        self.app.assistant(assistant)


@pytest.fixture
async def env() -> AsyncIterator[tuple[Workspace, PaneBot]]:
    holder: dict[str, PaneBot] = {}

    async def handle(request: web.Request) -> web.Response:
        response = await holder["bot"].app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    server = web.Application()
    server.router.add_post("/slack/events", handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    async with Workspace(f"http://{host}:{port}/slack/events", SECRET, TOKEN) as ws:
        holder["bot"] = PaneBot(ws.api_url)
        yield ws, holder["bot"]
    await runner.cleanup()


async def test_opening_the_pane_starts_an_assistant_thread(env: tuple[Workspace, PaneBot]) -> None:
    ws, bot = env
    ts = await ws.open_assistant("U_ALICE", context_channel="C_GENERAL")
    root = ws.messages("D_ALICE", thread_ts=ts)[0]
    assert root["user"] == "U_BOT" and root["bot_id"] == "B_BOT" and root["subtype"] == "assistant_app_thread"
    assert ws.acks[-1].kind == "assistant_thread_started" and ws.acks[-1].ok
    await ws.fake.wait_until(lambda: ws.state.prompts_of("D_ALICE", ts), timeout=5, what="the suggested prompts")
    [event] = bot.seen["started"]
    assert event == {
        "type": "assistant_thread_started",
        "assistant_thread": {
            "user_id": "U_ALICE",
            "context": {"channel_id": "C_GENERAL", "team_id": "T_PLAYGROUND", "enterprise_id": None},
            "channel_id": "D_ALICE",
            "thread_ts": ts,
        },
        "event_ts": event["event_ts"],
    }
    greeting = await ws.wait_for_message(channel="D_ALICE", thread_ts=ts, predicate=lambda m: "help" in m["text"])
    assert greeting["metadata"]["event_payload"]["channel_id"] == "C_GENERAL"  # Bolt keeps the context there
    assert ws.state.prompts_of("D_ALICE", ts) == {
        "channel_id": "D_ALICE",
        "thread_ts": ts,
        "title": "Try",
        "prompts": PROMPTS,
    }
    assert ws.state.assistant_threads == [
        {
            "user_id": "U_ALICE",
            "channel_id": "D_ALICE",
            "thread_ts": ts,
            "context": event["assistant_thread"]["context"],
        }
    ]


async def test_the_person_writes_in_the_pane_and_moves_around(env: tuple[Workspace, PaneBot]) -> None:
    ws, bot = env
    ts = await ws.open_assistant("U_BOB")  # viewing no channel: Slack sends an empty context
    await ws.wait_for_message(channel="D_BOB", thread_ts=ts)
    assert bot.seen["started"][0]["assistant_thread"]["context"] == {}

    ack = await ws.change_assistant_context("U_BOB", ts, "C_RANDOM")
    assert ack is not None and ack.kind == "assistant_thread_context_changed" and ack.ok
    await ws.wait_for_call("chat.update", timeout=5)  # Bolt's default store saves the context on its first reply
    [changed] = bot.seen["changed"]
    assert changed["assistant_thread"] == {
        "user_id": "U_BOB",
        "context": {"channel_id": "C_RANDOM", "team_id": "T_PLAYGROUND", "enterprise_id": None},
        "channel_id": "D_BOB",
        "thread_ts": ts,
    }

    delivery = await ws.dm("U_BOB", "deploy the web app", thread_ts=ts)
    assert [a.kind for a in delivery.acks] == ["message"] and delivery.acks[0].ok
    reply = await ws.wait_for_message(channel="D_BOB", thread_ts=ts, predicate=lambda m: "You said" in m["text"])
    assert reply["text"] == "You said: deploy the web app"
    [asked] = bot.seen["asked"]
    assert asked["channel_type"] == "im" and asked["thread_ts"] == ts and asked["parent_user_id"] == "U_BOT"
    assert asked["thread_context"]["channel_id"] == "C_RANDOM"
    assert ws.state.statuses == [{"channel_id": "D_BOB", "thread_ts": ts, "status": "is thinking..."}]
    assert ws.state.status_of("D_BOB", ts) == ""  # the reply cleared it
    assert ws.messages("D_BOB", thread_ts=ts)[0]["text"] == "deploy the web app"  # set_title


async def test_pane_events_follow_the_subscriptions_and_checks() -> None:
    async with Workspace(bot_token=TOKEN, subscriptions=("message.im",)) as ws:  # no app listens: none is sent
        ts = await ws.open_assistant("U_CAROL", context_channel="D_CAROL")
        assert ws.state.assistant_threads[0]["context"]["channel_id"] == "D_CAROL"
        assert await ws.change_assistant_context("U_CAROL", ts, "C_GENERAL") is None
        assert ws.state.assistant_threads[0]["context"]["channel_id"] == "C_GENERAL"
        assert ws.acks == []
        with pytest.raises(PlaygroundError, match="no channel"):
            await ws.open_assistant("U_CAROL", context_channel="C_NOWHERE")
        with pytest.raises(PlaygroundError, match="no assistant thread"):
            await ws.change_assistant_context("U_ALICE", ts, "C_GENERAL")  # Carol's, not Alice's
        with pytest.raises(PlaygroundError, match="no person"):
            await ws.open_assistant("U_BOT")
