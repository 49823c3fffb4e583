"""The fake Web API answers slack_sdk's AsyncWebClient as Slack does (real HTTP on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import FakeSlack, ManualClock
from bot.fakeslack.state import BOT_ID, BOT_USER_ID

TOKEN = "xoxb-test"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def fake(clock: ManualClock) -> AsyncIterator[FakeSlack]:
    async with FakeSlack(TOKEN, clock=clock) as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=fake.api_url)


def button(text: str, action_id: str = "a", **extra: Any) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": action_id, **extra}


def section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    if block_id:
        block["block_id"] = block_id
    return block


async def api_error(call: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as caught:
        await call
    data: dict[str, Any] = caught.value.response.data
    return data


async def test_auth_test_names_the_bot(client: AsyncWebClient) -> None:
    response = await client.auth_test()
    assert response["user_id"] == BOT_USER_ID
    assert response["bot_id"] == BOT_ID
    assert response["team_id"] == "T_PLAYGROUND"


async def test_post_update_replies_delete(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = await client.chat_postMessage(channel="C_GENERAL", text="hello", blocks=[section("hi", "b1")])
    assert parent["channel"] == "C_GENERAL"
    message = parent["message"]
    assert message["user"] == BOT_USER_ID and message["bot_id"] == BOT_ID
    assert message["blocks"][0]["block_id"] == "b1"
    assert message["ts"] == parent["ts"]

    reply = await client.chat_postMessage(channel="C_GENERAL", text="in thread", thread_ts=parent["ts"])
    assert reply["message"]["thread_ts"] == parent["ts"]
    assert float(reply["ts"]) > float(parent["ts"])

    updated = await client.chat_update(channel="C_GENERAL", ts=reply["ts"], text="edited", blocks=[section("x")])
    assert updated["message"]["text"] == "edited"
    assert "block_id" in updated["message"]["blocks"][0]  # Slack generates missing block_ids

    thread = await client.conversations_replies(channel="C_GENERAL", ts=parent["ts"])
    assert [m["ts"] for m in thread["messages"]] == [parent["ts"], reply["ts"]]
    assert thread["messages"][0]["reply_count"] == 1
    assert thread["messages"][0]["latest_reply"] == reply["ts"]
    assert thread["messages"][1]["text"] == "edited"

    await client.chat_delete(channel="C_GENERAL", ts=reply["ts"])
    thread = await client.conversations_replies(channel="C_GENERAL", ts=parent["ts"])
    assert len(thread["messages"]) == 1

    assert [c.method for c in fake.calls] == [
        "chat.postMessage",
        "chat.postMessage",
        "chat.update",
        "conversations.replies",
        "chat.delete",
        "conversations.replies",
    ]
    assert all(c.status == 200 and c.error is None and c.duration_ms >= 0 for c in fake.calls)


async def test_ephemeral_is_kept_apart_with_its_user(client: AsyncWebClient, fake: FakeSlack) -> None:
    response = await client.chat_postEphemeral(channel="C_GENERAL", user="U_BOB", text="only you")
    assert response["message_ts"]
    [ephemeral] = fake.state.conversations["C_GENERAL"].ephemerals
    assert ephemeral.user == "U_BOB" and ephemeral.message["text"] == "only you"
    assert fake.state.conversations["C_GENERAL"].messages == {}


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
async def test_errors_for_unknown_things(client: AsyncWebClient) -> None:
    assert (await api_error(client.chat_postMessage(channel="C_NOPE", text="x")))["error"] == "channel_not_found"
    assert (await api_error(client.chat_update(channel="C_GENERAL", ts="1.000001", text="x")))[
        "error"
    ] == "message_not_found"
    assert (await api_error(client.chat_postMessage(channel="C_GENERAL")))["error"] == "no_text"
    assert (await api_error(client.users_info(user="U_NOBODY")))["error"] == "user_not_found"
    assert (await client.users_info(user="U_ALICE"))["user"]["name"] == "alice"


async def test_conversations_info_as_slack_answers_it(client: AsyncWebClient) -> None:
    general = (await client.conversations_info(channel="C_GENERAL"))["channel"]
    assert general["name"] == "general" and general["is_channel"] and not general["is_im"]
    dm = (await client.conversations_info(channel="D_ALICE", include_num_members=True))["channel"]
    assert dm["is_im"] and dm["user"] == "U_ALICE"
    assert (await api_error(client.conversations_info(channel="C_NOWHERE")))["error"] == "channel_not_found"
    assert (await api_error(client.conversations_info(channel="U_ALICE")))["error"] == "channel_not_found"
    missing = await api_error(client.api_call("conversations.info", params={}))
    assert missing["error"] == "invalid_arguments"


async def test_reactions(client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C_GENERAL", text="x")
    await client.reactions_add(channel="C_GENERAL", timestamp=posted["ts"], name="eyes")
    again = await api_error(client.reactions_add(channel="C_GENERAL", timestamp=posted["ts"], name="eyes"))
    assert again["error"] == "already_reacted"
    await client.reactions_remove(channel="C_GENERAL", timestamp=posted["ts"], name="eyes")
    gone = await api_error(client.reactions_remove(channel="C_GENERAL", timestamp=posted["ts"], name="eyes"))
    assert gone["error"] == "no_reaction"


async def test_assistant_status_is_recorded(client: AsyncWebClient, fake: FakeSlack) -> None:
    posted = await client.chat_postMessage(channel="D_ALICE", text="x")
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=posted["ts"], status="is thinking...")
    assert fake.state.statuses == [{"channel_id": "D_ALICE", "thread_ts": posted["ts"], "status": "is thinking..."}]


async def test_auth_errors_and_unknown_method(fake: FakeSlack) -> None:
    wrong = AsyncWebClient(token="xoxb-wrong", base_url=fake.api_url)
    assert (await api_error(wrong.auth_test()))["error"] == "invalid_auth"
    none = AsyncWebClient(base_url=fake.api_url)
    assert (await api_error(none.auth_test()))["error"] == "not_authed"
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    unknown = await api_error(client.api_call("foo.bar"))
    assert unknown == {"ok": False, "error": "unknown_method", "req_method": "foo.bar"}
    assert fake.calls[-1].status == 200


async def test_token_in_form_is_accepted_and_redacted(fake: FakeSlack) -> None:
    async with aiohttp.ClientSession() as session:
        form = {"token": TOKEN, "channel": "C_GENERAL", "text": "x", "blocks": '[{"type": "divider"}]'}
        async with session.post(fake.api_url + "chat.postMessage", data=form) as response:
            body = await response.json()
    assert body["ok"] is True and body["message"]["blocks"][0]["type"] == "divider"
    assert fake.calls[-1].params["token"] == "[redacted]"


async def test_trigger_is_single_use_and_expires(client: AsyncWebClient, fake: FakeSlack, clock: ManualClock) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Answer"}, "blocks": [section("q")]}
    trigger = fake.state.mint_trigger("U_ALICE")
    opened = await client.views_open(trigger_id=trigger, view=view)
    assert opened["view"]["id"].startswith("V")
    assert fake.state.top_view("U_ALICE") is not None
    assert (await api_error(client.views_open(trigger_id=trigger, view=view)))["error"] == "exchanged_trigger_id"

    late = fake.state.mint_trigger("U_ALICE")
    clock.advance(3.01)
    assert (await api_error(client.views_open(trigger_id=late, view=view)))["error"] == "expired_trigger_id"
    assert (await api_error(client.views_open(trigger_id="nope", view=view)))["error"] == "invalid_trigger_id"

    updated = await client.views_update(view_id=opened["view"]["id"], view={**view, "callback_id": "cb"})
    assert updated["view"]["id"] == opened["view"]["id"] and updated["view"]["callback_id"] == "cb"
    assert (await api_error(client.views_update(view_id="V_NOPE", view=view)))["error"] == "not_found"


async def test_invalid_blocks_carry_json_pointers(client: AsyncWebClient) -> None:
    options = [{"text": {"type": "plain_text", "text": f"o{i}"}, "value": f"v{i}"} for i in range(11)]
    long_value_option = {"text": {"type": "plain_text", "text": "x"}, "value": "v" * 151}
    blocks: list[dict[str, Any]] = [
        {"type": "actions", "block_id": "a", "elements": [button("ok"), button("B" * 76, "b")]},
        {
            "type": "actions",
            "block_id": "s",
            "elements": [{"type": "static_select", "action_id": "sel", "options": [long_value_option]}],
        },
        {
            "type": "section",
            "block_id": "c",
            "text": {"type": "mrkdwn", "text": "pick"},
            "accessory": {"type": "checkboxes", "action_id": "cb", "options": options},
        },
        section("dup", "a"),
        {"type": "actions", "block_id": "many", "elements": [button(str(i), f"x{i}") for i in range(26)]},
    ]
    data = await api_error(client.chat_postMessage(channel="C_GENERAL", text="x", blocks=blocks))
    assert data["error"] == "invalid_blocks"
    assert data["errors"] == [
        "must be less than 76 characters [json-pointer:/blocks/0/elements/1/text/text]",
        "must be less than 151 characters [json-pointer:/blocks/1/elements/0/options/0/value]",
        "no more than 10 items allowed [json-pointer:/blocks/2/accessory/options]",
        '`block_id` "a" already exists [json-pointer:/blocks/3/block_id]',
        "no more than 25 items allowed [json-pointer:/blocks/4/elements]",
    ]
    assert data["response_metadata"]["messages"] == ["[ERROR] " + e for e in data["errors"]]

    too_many = await api_error(
        client.chat_postMessage(channel="C_GENERAL", text="x", blocks=[{"type": "divider"}] * 51)
    )
    assert too_many["errors"] == ["no more than 50 items allowed [json-pointer:/blocks]"]


async def test_modal_title_over_24_is_invalid_arguments(client: AsyncWebClient, fake: FakeSlack) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "T" * 25}, "blocks": []}
    data = await api_error(client.views_open(trigger_id=fake.state.mint_trigger("U_ALICE"), view=view))
    assert data["error"] == "invalid_arguments"
    assert data["response_metadata"]["messages"] == [
        "[ERROR] must be less than 25 characters [json-pointer:/view/title/text]"
    ]


async def test_msg_blocks_too_long(client: AsyncWebClient) -> None:
    blocks = [section("x" * 3000) for _ in range(5)]
    data = await api_error(client.chat_postMessage(channel="C_GENERAL", text="x", blocks=blocks))
    assert data == {"ok": False, "error": "msg_blocks_too_long"}


async def test_long_text_is_truncated_not_refused(client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C_GENERAL", text="y" * 40_010)
    assert len(posted["message"]["text"]) == 40_000


async def test_fault_injection_and_subscription(client: AsyncWebClient, fake: FakeSlack) -> None:
    queue = fake.subscribe()
    fake.fail_next("chat.postMessage", "ratelimited", status=429)
    failing = AsyncWebClient(token=TOKEN, base_url=fake.api_url, retry_handlers=[])
    data = await api_error(failing.chat_postMessage(channel="C_GENERAL", text="x"))
    assert data["error"] == "ratelimited"
    assert fake.calls[-1].status == 429
    await client.chat_postMessage(channel="C_GENERAL", text="x")
    fake.set_delay("auth.test", 0.05)
    await client.auth_test()
    assert fake.calls[-1].duration_ms >= 50
    fake.set_delay("auth.test", 0)
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [e["type"] for e in events] == ["api_call", "message", "api_call", "api_call"]
    fake.unsubscribe(queue)


async def test_replies_and_history_keep_to_oldest_latest_and_inclusive(client: AsyncWebClient) -> None:
    """Slack's bounds: messages after ``oldest`` and before ``latest``, each end only with ``inclusive``; a bound
    that is not a timestamp is ``invalid_ts_oldest`` / ``invalid_ts_latest``."""
    parent = await client.chat_postMessage(channel="C_GENERAL", text="top")
    first = await client.chat_postMessage(channel="C_GENERAL", text="one", thread_ts=parent["ts"])
    await client.chat_postMessage(channel="C_GENERAL", text="two", thread_ts=parent["ts"])
    ts = first["ts"]
    exact = await client.conversations_replies(channel="C_GENERAL", ts=ts, oldest=ts, latest=ts, inclusive=True)
    assert [m["text"] for m in exact["messages"]] == ["one"]
    shut = await client.conversations_replies(channel="C_GENERAL", ts=ts, oldest=ts, latest=ts)
    assert shut["messages"] == []
    after = await client.conversations_replies(channel="C_GENERAL", ts=parent["ts"], oldest=ts)
    assert [m["text"] for m in after["messages"]] == ["two"]
    top = await client.conversations_history(channel="C_GENERAL", latest=parent["ts"], inclusive=True)
    assert [m["text"] for m in top["messages"]] == ["top"]
    for bound in ("oldest", "latest"):
        with pytest.raises(SlackApiError) as refused:
            await client.conversations_replies(channel="C_GENERAL", ts=ts, **{bound: "yesterday"})
        assert refused.value.response["error"] == f"invalid_ts_{bound}"
