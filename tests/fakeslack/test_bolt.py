"""A tiny real Bolt AsyncApp, served over aiohttp on loopback, driven through the Workspace.

Bolt verifies every signature (request_verification_enabled) and talks to the fake Web API, so each
test checks both directions: what the sender builds parses in Bolt, and what Bolt posts lands in the fake.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond, AsyncSay
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import PlaygroundError, Sender, Workspace
from bot.fakeslack.sender import sign

SECRET = "playground-signing-secret"
TOKEN = "xoxb-test"


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def option(label: str) -> dict[str, Any]:
    return {"text": plain(label), "value": label.lower()}


QUESTION_BLOCKS: list[dict[str, Any]] = [
    {"type": "section", "block_id": "q", "text": {"type": "mrkdwn", "text": "Which colours?"}},
    {
        "type": "actions",
        "block_id": "colours",
        "elements": [
            {"type": "button", "action_id": "colour", "text": plain("Red"), "value": "red"},
            {"type": "button", "action_id": "colour_2", "text": plain("Blue"), "value": "blue", "style": "primary"},
            {"type": "button", "action_id": "answer", "text": plain("Answer")},
        ],
    },
    {
        "type": "actions",
        "block_id": "multi",
        "elements": [
            {"type": "checkboxes", "action_id": "pick", "options": [option("Cats"), option("Dogs"), option("Fish")]},
            {"type": "button", "action_id": "submit", "text": plain("Submit")},
        ],
    },
    {
        "type": "actions",
        "block_id": "menu",
        "elements": [
            {
                "type": "static_select",
                "action_id": "choose",
                "placeholder": plain("Pick one"),
                "options": [option("Tea"), option("Coffee")],
            },
        ],
    },
]

MODAL = {
    "type": "modal",
    "callback_id": "answer_modal",
    "title": plain("Your answer"),
    "submit": plain("Send"),
    "private_metadata": "run-1",
    "blocks": [
        {
            "type": "input",
            "block_id": "answer_block",
            "label": plain("Answer"),
            "element": {"type": "plain_text_input", "action_id": "text"},
        }
    ],
}


class Bot:
    """The Bolt app under test plus what it received."""

    def __init__(self, api_url: str) -> None:
        self.received: dict[str, list[dict[str, Any]]] = {}
        client = AsyncWebClient(token=TOKEN, base_url=api_url)
        app = AsyncApp(signing_secret=SECRET, client=client, request_verification_enabled=True)
        self.app = app

        def keep(kind: str, body: dict[str, Any]) -> None:
            self.received.setdefault(kind, []).append(body)

        @app.event("app_mention")
        async def on_mention(body: dict[str, Any], say: AsyncSay) -> None:
            keep("app_mention", body)
            await say(text="Which colours?", blocks=QUESTION_BLOCKS, thread_ts=body["event"]["ts"])

        @app.event("message")
        async def on_message(body: dict[str, Any], say: AsyncSay) -> None:
            keep("message", body)
            if body["event"].get("channel_type") == "im":
                await say(text="ephemeral next")
                await app.client.chat_postEphemeral(
                    channel=body["event"]["channel"],
                    user=body["event"]["user"],
                    text="just you",
                    blocks=[
                        {
                            "type": "actions",
                            "elements": [{"type": "button", "action_id": "secret", "text": plain("Secret")}],
                        }
                    ],
                )

        @app.action("colour_2")
        async def on_colour(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
            await ack()
            keep("colour", body)
            await respond(text=f"Chosen: {body['actions'][0]['value']}", replace_original=True)

        @app.action("pick")
        async def on_pick(ack: AsyncAck, body: dict[str, Any]) -> None:
            await ack()
            keep("pick", body)

        @app.action("submit")
        async def on_submit(ack: AsyncAck, body: dict[str, Any]) -> None:
            await ack()
            keep("submit", body)

        @app.action("choose")
        async def on_choose(ack: AsyncAck, body: dict[str, Any]) -> None:
            await ack()
            keep("choose", body)

        @app.action("secret")
        async def on_secret(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
            await ack()
            keep("secret", body)
            await respond(text="thanks", response_type="ephemeral")

        @app.action("answer")
        async def on_answer(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
            await ack()
            await client.views_open(trigger_id=body["trigger_id"], view=MODAL)

        @app.view("answer_modal")
        async def on_view(ack: AsyncAck, body: dict[str, Any]) -> None:
            keep("view_submission", body)
            text = body["view"]["state"]["values"]["answer_block"]["text"]["value"]
            if len(text) < 3:
                await ack(response_action="errors", errors={"answer_block": "Too short"})
            else:
                await ack()


@pytest.fixture
async def env() -> AsyncIterator[tuple[Workspace, Bot]]:
    holder: dict[str, Bot] = {}

    async def handle(request: web.Request) -> web.Response:
        response = await holder["bot"].app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    server = web.Application()
    server.router.add_post("/slack/events", handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    async with Workspace(f"http://{host}:{port}/slack/events", SECRET, TOKEN) as ws:
        holder["bot"] = Bot(ws.api_url)
        yield ws, holder["bot"]
    await runner.cleanup()


def test_sender_signature_passes_slack_sdk_verifier() -> None:
    body = json.dumps({"type": "event_callback"})
    timestamp = str(int(__import__("time").time()))
    headers = {"x-slack-request-timestamp": timestamp, "x-slack-signature": sign(SECRET, timestamp, body)}
    assert SignatureVerifier(SECRET).is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)


async def test_mention_click_and_respond(env: tuple[Workspace, Bot]) -> None:
    ws, bot = env
    delivery = await ws.mention("U_ALICE", "C_GENERAL", "which colours?")
    assert [a.kind for a in delivery.acks] == ["app_mention", "message"]
    assert all(a.status == 200 for a in delivery.acks)
    assert delivery.message["text"] == "<@U_BOT> which colours?"

    question = await ws.wait_for_message(channel="C_GENERAL", thread_ts=delivery.message["ts"])
    assert question["blocks"][1]["block_id"] == "colours"
    [mention] = bot.received["app_mention"]
    assert mention["event"]["user"] == "U_ALICE" and mention["event"]["channel"] == "C_GENERAL"
    assert mention["event_id"].startswith("Ev")
    assert bot.received["message"][0]["event"]["channel_type"] == "channel"
    assert [c.method for c in ws.calls()][:2] == ["auth.test", "chat.postMessage"]

    ack = await ws.click(question, "Blue", user="U_BOB")
    assert ack.kind == "block_actions" and ack.status == 200 and ack.duration_ms < 3000
    [body] = bot.received["colour"]
    assert body["actions"][0]["value"] == "blue" and body["actions"][0]["text"]["text"] == "Blue"
    assert body["container"] == {
        "type": "message",
        "message_ts": question["ts"],
        "channel_id": "C_GENERAL",
        "is_ephemeral": False,
        "thread_ts": delivery.message["ts"],
    }
    assert body["user"]["id"] == "U_BOB" and body["message"]["ts"] == question["ts"]
    assert body["state"]["values"]["multi"]["pick"] == {"type": "checkboxes", "selected_options": []}

    replaced = await ws.wait_for_message(channel="C_GENERAL", predicate=lambda m: m["text"] == "Chosen: blue")
    assert replaced["ts"] == question["ts"] and replaced["blocks"] == []


async def test_toggles_then_submit_carry_the_ticks(env: tuple[Workspace, Bot]) -> None:
    ws, bot = env
    delivery = await ws.mention("U_ALICE", "C_GENERAL", "pets?")
    question = await ws.wait_for_message(channel="C_GENERAL", thread_ts=delivery.message["ts"])
    await ws.toggle(question, "Cats", user="U_ALICE")
    await ws.toggle(question, "Fish", user="U_ALICE")
    await ws.toggle(question, "Cats", user="U_ALICE")
    await ws.click(question, "Dogs", user="U_ALICE")  # a checkbox option by label toggles too
    ticks = [[o["value"] for o in b["actions"][0]["selected_options"]] for b in bot.received["pick"]]
    assert ticks == [["cats"], ["cats", "fish"], ["fish"], ["dogs", "fish"]]

    await ws.click(question, "Submit", user="U_ALICE")
    [submit] = bot.received["submit"]
    chosen = submit["state"]["values"]["multi"]["pick"]["selected_options"]
    assert [o["value"] for o in chosen] == ["dogs", "fish"]

    await ws.click(question, "Submit", user="U_BOB")  # another user ticked nothing
    assert bot.received["submit"][1]["state"]["values"]["multi"]["pick"]["selected_options"] == []

    await ws.select(question, "Coffee", user="U_ALICE")
    [choose] = bot.received["choose"]
    assert choose["actions"][0]["selected_option"]["value"] == "coffee"
    with pytest.raises(PlaygroundError, match="Purple"):
        await ws.click(question, "Purple", user="U_ALICE")


async def test_modal_errors_ack_then_close(env: tuple[Workspace, Bot]) -> None:
    ws, bot = env
    delivery = await ws.mention("U_ALICE", "C_GENERAL", "free form")
    question = await ws.wait_for_message(channel="C_GENERAL", thread_ts=delivery.message["ts"])
    await ws.click(question, "Answer", user="U_ALICE")
    view = await ws.wait_for_view(user="U_ALICE")
    assert view["callback_id"] == "answer_modal" and view["private_metadata"] == "run-1"

    with pytest.raises(PlaygroundError, match="required"):
        await ws.submit_view(view, {}, user="U_ALICE")

    ack = await ws.submit_view(view, {"Answer": "no"}, user="U_ALICE")
    assert ack.status == 200
    assert ack.json == {"response_action": "errors", "errors": {"answer_block": "Too short"}}
    assert ws.view_errors[view["id"]] == {"answer_block": "Too short"}
    assert ws.state.top_view("U_ALICE") is not None

    ack = await ws.submit_view(view, {"answer_block": {"text": "a long answer"}}, user="U_ALICE")
    assert ack.status == 200 and ack.json is None
    assert ws.state.top_view("U_ALICE") is None
    submitted = bot.received["view_submission"][-1]
    assert submitted["view"]["state"]["values"]["answer_block"]["text"] == {
        "type": "plain_text_input",
        "value": "a long answer",
    }
    assert submitted["user"]["id"] == "U_ALICE"


async def test_dm_ephemeral_click_and_retry(env: tuple[Workspace, Bot]) -> None:
    ws, bot = env
    delivery = await ws.dm("U_CAROL", "hello")
    assert [a.kind for a in delivery.acks] == ["message"]
    assert bot.received["message"][0]["event"]["channel_type"] == "im"
    ephemeral = await ws.wait_for_ephemeral(user="U_CAROL")
    assert ephemeral["channel"] == "D_CAROL"

    await ws.click(ephemeral, "Secret", user="U_CAROL")
    [body] = bot.received["secret"]
    assert "message" not in body and body["container"]["is_ephemeral"] is True
    await ws.wait_for_ephemeral(user="U_CAROL", predicate=lambda m: m["text"] == "thanks")

    retry = await ws.retry(delivery.acks[0], 1)
    assert retry.status == 200 and retry.retry_num == 1
    first, second = bot.received["message"][0], bot.received["message"][-1]
    assert second["event_id"] == first["event_id"] and len(bot.received["message"]) == 2


async def test_bad_signature_is_refused_and_url_verification(env: tuple[Workspace, Bot]) -> None:
    ws, _bot = env
    liar = Sender(ws.sender.bot_url, "wrong-secret")
    try:
        ack = await liar.send_event({"type": "app_mention", "text": "x", "user": "U_ALICE", "channel": "C_GENERAL"})
    finally:
        await liar.close()
    assert ack.status == 401
    challenge = await ws.sender.url_verification("abc")
    assert challenge.status == 200 and challenge.json == {"challenge": "abc"}


async def test_wait_for_message_times_out(env: tuple[Workspace, Bot]) -> None:
    ws, _bot = env
    started = asyncio.get_running_loop().time()
    with pytest.raises(PlaygroundError, match="timed out"):
        await ws.wait_for_message(channel="C_RANDOM", timeout=0.2)
    assert asyncio.get_running_loop().time() - started < 1
