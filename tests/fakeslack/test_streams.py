"""Streamed messages in the fake Slack (chat.startStream / appendStream / stopStream), through slack_sdk's
AsyncWebClient and its chat_stream helper over real HTTP: the message grows, ends, and refuses what Slack refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import FakeSlack, ManualClock

TOKEN = "xoxb-test"
RECIPIENT = {"recipient_user_id": "U_ALICE", "recipient_team_id": "T_PLAYGROUND"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(TOKEN, clock=ManualClock()) as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=fake.api_url)


async def error_of(call: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


async def asked(client: AsyncWebClient, channel: str = "C_GENERAL") -> str:
    return str((await client.chat_postMessage(channel=channel, text="a person's question"))["ts"])


async def test_a_stream_grows_then_ends_and_can_not_be_appended_after(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = await asked(client)
    started = await client.chat_startStream(channel="C_GENERAL", thread_ts=parent, markdown_text="**Hel", **RECIPIENT)
    ts = started["ts"]
    await client.chat_appendStream(channel="C_GENERAL", ts=ts, markdown_text="lo** world")
    message = fake.state.message("C_GENERAL", ts)
    assert message is not None and message["streaming"] and message["text"] == "**Hello** world"
    assert message["thread_ts"] == parent and message["blocks"][0]["type"] == "markdown"
    await client.chat_stopStream(channel="C_GENERAL", ts=ts, markdown_text=".")
    assert not message["streaming"] and message["text"] == "**Hello** world."
    assert await error_of(client.chat_appendStream(channel="C_GENERAL", ts=ts, markdown_text="x")) == (
        "message_not_in_streaming_state"
    )
    assert await error_of(client.chat_stopStream(channel="C_GENERAL", ts=ts)) == "message_not_in_streaming_state"


async def test_the_sdks_chat_stream_helper_works_against_it(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = await asked(client)
    streamer = await client.chat_stream(channel="C_GENERAL", thread_ts=parent, buffer_size=10, **RECIPIENT)
    for piece in ["Deploying ", "to *production*", ", as you chose."]:
        await streamer.append(markdown_text=piece)
    await streamer.stop()
    messages = fake.state.conversations["C_GENERAL"].messages.values()
    [reply] = [m for m in messages if m.get("thread_ts") == parent and m["ts"] != parent]
    assert reply["text"] == "Deploying to *production*, as you chose." and not reply["streaming"]


async def test_chunks_as_newer_sdks_send_them_add_text_task_lines_and_blocks(
    client: AsyncWebClient, fake: FakeSlack
) -> None:
    """slack_sdk's helper sends ``chunks`` (from 3.39 on) instead of ``markdown_text``; sent raw here, so the test
    does not depend on the installed SDK's version."""
    parent = await asked(client)
    started = await client.api_call(
        "chat.startStream",
        json={
            "channel": "C_GENERAL",
            "thread_ts": parent,
            **RECIPIENT,
            "chunks": [{"type": "markdown_text", "text": "Hi"}],
        },
    )
    task = {"type": "task_update", "id": "t1", "title": "Deploying", "status": "in_progress"}
    await client.api_call("chat.appendStream", json={"channel": "C_GENERAL", "ts": started["ts"], "chunks": [task]})
    done = {**task, "status": "complete"}
    await client.api_call("chat.stopStream", json={"channel": "C_GENERAL", "ts": started["ts"], "chunks": [done]})
    message = fake.state.message("C_GENERAL", started["ts"])
    assert message is not None and message["text"] == "Hi" and not message["streaming"]
    [tasks] = [b for b in message["blocks"] if b["type"] == "context"]
    assert [e["text"] for e in tasks["elements"]] == ["● Deploying"]  # one line per task, its latest status
    with pytest.raises(SlackApiError) as caught:
        await client.api_call(
            "chat.startStream",
            json={"channel": "C_GENERAL", "thread_ts": parent, **RECIPIENT, "chunks": [{"type": "nope"}]},
        )
    assert caught.value.response["error"] == "invalid_arguments"


async def test_what_slack_refuses(client: AsyncWebClient, fake: FakeSlack) -> None:
    parent = await asked(client)
    no_recipient = client.chat_startStream(channel="C_GENERAL", thread_ts=parent, markdown_text="x")
    assert await error_of(no_recipient) == "invalid_arguments"
    dm_parent = await asked(client, "D_ALICE")
    in_dm = await client.chat_startStream(channel="D_ALICE", thread_ts=dm_parent, markdown_text="ok")  # no recipient
    assert in_dm["ok"]
    missing = client.chat_startStream(channel="C_GENERAL", thread_ts="1.000001", markdown_text="x", **RECIPIENT)
    assert await error_of(missing) == "message_not_found"
    started = await client.chat_startStream(channel="C_GENERAL", thread_ts=parent, **RECIPIENT)
    too_long = client.chat_appendStream(channel="C_GENERAL", ts=started["ts"], markdown_text="x" * 12_001)
    assert await error_of(too_long) == "msg_too_long"
    wrong_ts = client.chat_appendStream(channel="C_GENERAL", ts="9.999999", markdown_text="x")
    assert await error_of(wrong_ts) == "message_not_found"
    not_a_stream = client.chat_appendStream(channel="C_GENERAL", ts=parent, markdown_text="x")
    assert await error_of(not_a_stream) in ("cant_update_message", "message_not_in_streaming_state")
    bad_blocks = client.chat_stopStream(channel="C_GENERAL", ts=started["ts"], blocks=[{"type": "nope"}])
    assert await error_of(bad_blocks) == "invalid_blocks"
    fake.fail_next("chat.appendStream", "ratelimited", status=429)
    limited = AsyncWebClient(token=TOKEN, base_url=fake.api_url, retry_handlers=[])
    assert await error_of(limited.chat_appendStream(channel="C_GENERAL", ts=started["ts"], markdown_text="x")) == (
        "ratelimited"
    )
