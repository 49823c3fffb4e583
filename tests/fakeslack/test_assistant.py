"""Slack's AI app methods in the fake (assistant.threads.setStatus / setSuggestedPrompts / setTitle), the status
cleared by a bot post, persistent refusals and message metadata, through slack_sdk's AsyncWebClient over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import FakeSlack, ManualClock, Workspace
from bot.fakeslack.state import STATUS_TTL_SECONDS

TOKEN = "xoxb-test"
PROMPTS = [{"title": "Deploy", "message": "deploy the web app"}, {"title": "Plan", "message": "plan the release"}]


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


async def api_error(call: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as caught:
        await call
    data: dict[str, Any] = caught.value.response.data
    return data


async def thread(client: AsyncWebClient, channel: str = "D_ALICE") -> str:
    return str((await client.chat_postMessage(channel=channel, text="a thread to work in"))["ts"])


def drain(queue: asyncio.Queue[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    events = []
    while not queue.empty():
        event = queue.get_nowait()
        if event["type"] == kind:
            events.append(event)
    return events


# -- assistant.threads.setStatus ---------------------------------------------------------------------------------


async def test_set_status_records_shows_and_clears(client: AsyncWebClient, fake: FakeSlack) -> None:
    ts = await thread(client)
    events = fake.subscribe()
    await client.assistant_threads_setStatus(
        channel_id="D_ALICE", thread_ts=ts, status="is thinking...", loading_messages=["Reading", "Writing"]
    )
    assert fake.state.status_of("D_ALICE", ts) == "is thinking..."
    assert fake.state.current_statuses() == [{"channel_id": "D_ALICE", "thread_ts": ts, "status": "is thinking..."}]
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="")  # "" clears
    assert fake.state.status_of("D_ALICE", ts) == ""
    assert fake.state.statuses == [
        {"channel_id": "D_ALICE", "thread_ts": ts, "status": "is thinking..."},
        {"channel_id": "D_ALICE", "thread_ts": ts, "status": ""},
    ]
    first, second = drain(events, "assistant_status")
    assert first["loading_messages"] == ["Reading", "Writing"] and second["status"] == ""
    assert [c.error for c in fake.calls_to("assistant.threads.setStatus")] == [None, None]


async def test_set_status_refuses_what_slack_refuses(client: AsyncWebClient, fake: FakeSlack) -> None:
    ts = await thread(client)
    method = "assistant.threads.setStatus"
    missing = await api_error(client.api_call(method, json={"channel_id": "D_ALICE", "thread_ts": ts}))
    assert missing["error"] == "invalid_arguments"
    assert missing["response_metadata"]["messages"] == ["[ERROR] missing required field: status"]
    missing = await api_error(client.api_call(method, json={"channel_id": "D_ALICE", "status": "x"}))
    assert missing["response_metadata"]["messages"] == ["[ERROR] missing required field: thread_ts"]
    eleven = [f"step {i}" for i in range(11)]
    too_many = await api_error(
        client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="x", loading_messages=eleven)
    )
    assert too_many["error"] == "invalid_arguments"
    assert too_many["response_metadata"]["messages"] == [
        "[ERROR] no more than 10 items allowed [json-pointer:/loading_messages]"
    ]
    not_text = await api_error(
        client.api_call(
            method, json={"channel_id": "D_ALICE", "thread_ts": ts, "status": "x", "loading_messages": ["ok", 3]}
        )
    )
    assert not_text["response_metadata"]["messages"] == ["[ERROR] must be a string [json-pointer:/loading_messages/1]"]
    nowhere = client.assistant_threads_setStatus(channel_id="C_NOWHERE", thread_ts=ts, status="x")
    assert (await api_error(nowhere))["error"] == "channel_not_found"
    no_thread = client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts="1.000001", status="x")
    assert (await api_error(no_thread))["error"] == "invalid_thread_ts"
    other_channel = client.assistant_threads_setStatus(channel_id="D_BOB", thread_ts=ts, status="x")
    assert (await api_error(other_channel))["error"] == "invalid_thread_ts"
    assert fake.state.statuses == [] and fake.state.status_of("D_ALICE", ts) == ""
    ten = [f"step {i}" for i in range(10)]
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="x", loading_messages=ten)


async def test_the_status_goes_when_the_bot_posts_in_the_thread(
    client: AsyncWebClient, fake: FakeSlack, clock: ManualClock
) -> None:
    ts, other = await thread(client), await thread(client)
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="is thinking...")
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=other, status="is looking...")
    events = fake.subscribe()
    await client.chat_postMessage(channel="D_ALICE", text="elsewhere")  # not in the thread: stays
    assert fake.state.status_of("D_ALICE", ts) == "is thinking..."
    await client.chat_postMessage(channel="D_ALICE", thread_ts=ts, text="Here you are")
    assert fake.state.status_of("D_ALICE", ts) == ""
    assert fake.state.status_of("D_ALICE", other) == "is looking..."
    [cleared] = drain(events, "assistant_status")
    assert cleared == {
        "type": "assistant_status",
        "channel_id": "D_ALICE",
        "thread_ts": ts,
        "status": "",
        "cleared_by": "message",
    }
    await client.chat_startStream(channel="D_ALICE", thread_ts=other, markdown_text="Stream")
    assert fake.state.status_of("D_ALICE", other) == ""

    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="is still thinking...")
    clock.advance(STATUS_TTL_SECONDS + 1)  # Slack: "A two minute timeout applies"
    assert fake.state.status_of("D_ALICE", ts) == "" and fake.state.current_statuses() == []


# -- assistant.threads.setSuggestedPrompts -----------------------------------------------------------------------


async def test_suggested_prompts_latest_call_wins(client: AsyncWebClient, fake: FakeSlack) -> None:
    ts = await thread(client)
    events = fake.subscribe()
    await client.assistant_threads_setSuggestedPrompts(
        channel_id="D_ALICE", thread_ts=ts, title="Try these", prompts=PROMPTS
    )
    assert fake.state.prompts_of("D_ALICE", ts) == {
        "channel_id": "D_ALICE",
        "thread_ts": ts,
        "title": "Try these",
        "prompts": PROMPTS,
    }
    form = {"channel_id": "D_ALICE", "thread_ts": ts, "prompts": json.dumps(PROMPTS[:1])}  # a form body's string
    await client.api_call("assistant.threads.setSuggestedPrompts", data=form)
    latest = fake.state.prompts_of("D_ALICE", ts)
    assert latest is not None and latest["prompts"] == PROMPTS[:1] and latest["title"] is None
    assert len(fake.state.suggested_prompts) == 2
    assert [e["prompts"] for e in drain(events, "assistant_prompts")] == [PROMPTS, PROMPTS[:1]]
    assert fake.state.prompts_of("D_ALICE", "1.000001") is None


async def test_suggested_prompts_without_thread_ts_go_to_the_latest_message(
    client: AsyncWebClient, fake: FakeSlack
) -> None:
    await thread(client)
    latest = await thread(client)  # the docs: "set for the latest message in the channel"
    await client.assistant_threads_setSuggestedPrompts(channel_id="D_ALICE", prompts=PROMPTS)
    assert fake.state.suggested_prompts[-1]["thread_ts"] == latest
    empty = client.assistant_threads_setSuggestedPrompts(channel_id="C_RANDOM", prompts=PROMPTS)
    assert (await api_error(empty))["error"] == "message_not_found"


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ([], "must provide at least 1 item [json-pointer:/prompts]"),
        (PROMPTS * 2 + PROMPTS[:1], "no more than 4 items allowed [json-pointer:/prompts]"),
        ([{"title": "Deploy"}], "missing required field: message [json-pointer:/prompts/0]"),
        ([PROMPTS[0], {"title": "", "message": "m"}], "missing required field: title [json-pointer:/prompts/1]"),
        (["deploy"], "must be an object [json-pointer:/prompts/0]"),
        ({"title": "t", "message": "m"}, "must be an array [json-pointer:/prompts]"),
    ],
)
async def test_suggested_prompts_are_checked(
    client: AsyncWebClient, fake: FakeSlack, prompts: Any, message: str
) -> None:
    ts = await thread(client)
    body = {"channel_id": "D_ALICE", "thread_ts": ts, "prompts": prompts}
    refused = await api_error(client.api_call("assistant.threads.setSuggestedPrompts", json=body))
    assert refused["error"] == "invalid_arguments"
    assert refused["response_metadata"]["messages"] == [f"[ERROR] {message}"]
    assert fake.state.suggested_prompts == []


async def test_suggested_prompts_other_errors(client: AsyncWebClient) -> None:
    ts = await thread(client)
    method = "assistant.threads.setSuggestedPrompts"
    missing = await api_error(client.api_call(method, json={"channel_id": "D_ALICE", "thread_ts": ts}))
    assert missing["response_metadata"]["messages"] == ["[ERROR] missing required field: prompts"]
    broken = {"channel_id": "D_ALICE", "thread_ts": ts, "prompts": "[{not json"}
    assert (await api_error(client.api_call(method, data=broken)))["error"] == "invalid_arguments"
    nowhere = client.assistant_threads_setSuggestedPrompts(channel_id="C_NOWHERE", thread_ts=ts, prompts=PROMPTS)
    assert (await api_error(nowhere))["error"] == "channel_not_found"
    no_thread = client.assistant_threads_setSuggestedPrompts(channel_id="D_ALICE", thread_ts="1.2", prompts=PROMPTS)
    assert (await api_error(no_thread))["error"] == "invalid_thread_ts"


# -- assistant.threads.setTitle ----------------------------------------------------------------------------------


async def test_set_title_names_the_pane_thread() -> None:
    async with Workspace(bot_token=TOKEN, subscriptions=(), clock=ManualClock()) as ws:  # no app: no events
        client = AsyncWebClient(token=TOKEN, base_url=ws.api_url)
        ts = await ws.open_assistant("U_ALICE")
        events = ws.fake.subscribe()
        await client.assistant_threads_setTitle(channel_id="D_ALICE", thread_ts=ts, title="Deploying the web app")
        assert ws.state.titles == [{"channel_id": "D_ALICE", "thread_ts": ts, "title": "Deploying the web app"}]
        root = ws.messages("D_ALICE", thread_ts=ts)[0]
        assert root["text"] == "Deploying the web app" and root["subtype"] == "assistant_app_thread"
        assert root["assistant_app_thread"] == {"title": "Deploying the web app", "title_blocks": [], "artifacts": []}
        seen = [e for e in drain_all(events) if e["type"] != "api_call"]
        assert [e["type"] for e in seen] == ["message_changed", "assistant_title"]
        assert seen[0]["message"]["text"] == "Deploying the web app" and seen[1]["title"] == "Deploying the web app"

        plain = await thread(client)  # not a pane thread: recorded, the message untouched
        await client.assistant_threads_setTitle(channel_id="D_ALICE", thread_ts=plain, title="Ignored")
        assert ws.messages("D_ALICE", thread_ts=plain)[0]["text"] == "a thread to work in"
        method = "assistant.threads.setTitle"
        missing = await api_error(client.api_call(method, params={"channel_id": "D_ALICE", "thread_ts": ts}))
        assert missing["response_metadata"]["messages"] == ["[ERROR] missing required field: title"]
        nowhere = client.assistant_threads_setTitle(channel_id="C_NOWHERE", thread_ts=ts, title="x")
        assert (await api_error(nowhere))["error"] == "channel_not_found"
        no_thread = client.assistant_threads_setTitle(channel_id="D_ALICE", thread_ts="1.2", title="x")
        assert (await api_error(no_thread))["error"] == "invalid_thread_ts"
        assert [t["title"] for t in ws.state.titles] == ["Deploying the web app", "Ignored"]


def drain_all(queue: asyncio.Queue[dict[str, Any]]) -> list[dict[str, Any]]:
    events = []
    while not queue.empty():
        events.append(queue.get_nowait())
    return events


# -- refuse / allow, metadata ------------------------------------------------------------------------------------


async def test_refuse_answers_every_call_until_allowed(client: AsyncWebClient, fake: FakeSlack) -> None:
    ts = await thread(client)
    fake.refuse("assistant.threads.setStatus", "missing_scope", needed="assistant:write", provided="chat:write")
    for _ in range(3):
        refused = await api_error(client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="x"))
        assert refused == {"ok": False, "error": "missing_scope", "needed": "assistant:write", "provided": "chat:write"}
    assert fake.state.statuses == []
    await client.chat_postMessage(channel="D_ALICE", text="other methods still work")
    fake.fail_next("assistant.threads.setStatus", "internal_error")  # a queued one-off goes first
    once = await api_error(client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="x"))
    assert once["error"] == "internal_error"
    fake.allow("assistant.threads.setStatus")
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="is back")
    assert fake.state.status_of("D_ALICE", ts) == "is back"
    errors = [c.error for c in fake.calls_to("assistant.threads.setStatus")]
    assert errors == ["missing_scope"] * 3 + ["internal_error", None]
    fake.allow("chat.update")  # never refused: nothing happens

    fake.refuse("chat.startStream", "ratelimited", status=429)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_startStream(channel="D_ALICE", thread_ts=ts, markdown_text="x")
    assert caught.value.response.status_code == 429 and caught.value.response.headers["Retry-After"] == "1"


async def test_message_metadata_is_kept_and_listed_only_when_asked(client: AsyncWebClient) -> None:
    metadata = {"event_type": "assistant_thread_context", "event_payload": {"channel_id": "C_GENERAL"}}
    ts = (await client.chat_postMessage(channel="D_ALICE", text="with metadata", metadata=metadata))["ts"]
    listed = await client.conversations_replies(channel="D_ALICE", ts=ts, include_all_metadata=True)
    assert listed["messages"][0]["metadata"] == metadata
    [block] = listed["messages"][0]["blocks"]  # a text-only post is stored with the rich_text Slack derives
    assert block["type"] == "rich_text" and block["elements"][0]["elements"] == [
        {"type": "text", "text": "with metadata"}
    ]
    assert "metadata" not in (await client.conversations_replies(channel="D_ALICE", ts=ts))["messages"][0]
    newer = {"event_type": "assistant_thread_context", "event_payload": {"channel_id": "C_RANDOM"}}
    await client.chat_update(channel="D_ALICE", ts=ts, text="with metadata", metadata=newer)
    history = await client.conversations_history(channel="D_ALICE", include_all_metadata=True)
    assert history["messages"][0]["metadata"] == newer
    bad = (await client.chat_postMessage(channel="D_ALICE", text="x", metadata={"event_payload": {}}))["message"]
    assert "metadata" not in bad  # Slack ignores metadata without an event_type (a warning, not an error)
