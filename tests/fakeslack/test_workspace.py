"""Workspace and response_url behaviour that needs no app: the fake's side of interactions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import ManualClock, PlaygroundError, Workspace

TOKEN = "xoxb-test"


@pytest.fixture
async def ws() -> AsyncIterator[Workspace]:
    # Nothing listens at this URL; these tests send no events.
    async with Workspace("http://127.0.0.1:9/slack/events", "secret", TOKEN, clock=ManualClock()) as workspace:
        yield workspace


@pytest.fixture
def client(ws: Workspace) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=ws.api_url)


def checkbox_blocks(block_id: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "actions",
            "block_id": block_id,
            "elements": [
                {
                    "type": "checkboxes",
                    "action_id": "pick",
                    "options": [{"text": {"type": "plain_text", "text": "A"}, "value": "a"}],
                }
            ],
        }
    ]


async def post_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, await response.json()


async def test_response_url_replace_in_channel_ephemeral_delete(ws: Workspace, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C_GENERAL", text="question")
    url = ws.fake.mint_response_url(
        channel="C_GENERAL", user="U_BOB", message_ts=posted["ts"], thread_ts=None, is_ephemeral=False
    )
    assert await post_json(url, {"text": "answered", "replace_original": True}) == (200, {"ok": True})
    assert ws.messages("C_GENERAL")[0]["text"] == "answered"
    assert "edited" in ws.messages("C_GENERAL")[0]

    await post_json(url, {"text": "everyone", "response_type": "in_channel"})
    assert [m["text"] for m in ws.messages("C_GENERAL")] == ["answered", "everyone"]
    await post_json(url, {"text": "just bob"})
    assert [m["text"] for m in ws.ephemerals(user="U_BOB")] == ["just bob"]

    status, body = await post_json(url, {"text": "x", "blocks": [{"type": "bogus"}]})
    assert body["error"] == "invalid_blocks"
    await post_json(url, {"delete_original": True})
    assert [m["text"] for m in ws.messages("C_GENERAL")] == ["everyone"]
    status, body = await post_json(url, {"text": "sixth use"})
    assert (status, body) == (404, {"ok": False, "error": "expired_url"})


async def test_user_messages_threads_and_updates_reset_ticks(ws: Workspace, client: AsyncWebClient) -> None:
    user_message = ws.add_user_message("U_ALICE", "C_GENERAL", "hi", thread_ts=None)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_update(channel="C_GENERAL", ts=user_message["ts"], text="hacked")
    assert caught.value.response["error"] == "cant_update_message"

    posted = await client.chat_postMessage(
        channel="C_GENERAL", text="q", blocks=checkbox_blocks("v1"), thread_ts=user_message["ts"]
    )
    values = ws.state.interaction_values("C_GENERAL", posted["ts"], "U_ALICE", posted["message"]["blocks"])
    values["v1"]["pick"]["selected_options"] = [{"value": "a"}]
    await client.chat_update(channel="C_GENERAL", ts=posted["ts"], text="q2", blocks=checkbox_blocks("v2"))
    fresh = ws.state.interaction_values("C_GENERAL", posted["ts"], "U_ALICE", checkbox_blocks("v2"))
    assert fresh == {"v2": {"pick": {"type": "checkboxes", "selected_options": []}}}

    thread = ws.messages("C_GENERAL", thread_ts=user_message["ts"])
    assert thread[0]["reply_users"] == ["U_BOT"] and thread[1]["parent_user_id"] == "U_ALICE"
    found = await ws.wait_for_message(thread_ts=user_message["ts"], timeout=1)
    assert found["text"] == "q2" and found["channel"] == "C_GENERAL"


async def test_views_push_limit(ws: Workspace, client: AsyncWebClient) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "T"}, "blocks": []}
    root = await client.views_open(trigger_id=ws.state.mint_trigger("U_ALICE"), view=view)
    second = await client.views_push(trigger_id=ws.state.mint_trigger("U_ALICE"), view=view)
    assert second["view"]["root_view_id"] == root["view"]["id"]
    await client.views_push(trigger_id=ws.state.mint_trigger("U_ALICE"), view=view)
    with pytest.raises(SlackApiError) as caught:
        await client.views_push(trigger_id=ws.state.mint_trigger("U_ALICE"), view=view)
    assert caught.value.response["error"] == "push_limit_reached"
    with pytest.raises(PlaygroundError, match="not open"):
        await ws.submit_view({"id": "V_NOPE"}, user="U_ALICE")
