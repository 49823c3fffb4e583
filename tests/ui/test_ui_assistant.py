"""Slack's AI app surfaces in the playground UI, through the real bot on the DemoModel: a streamed message growing
live, the status line, and the assistant pane (open, context, title, suggested prompts, a question answered there).
The fake is driven directly through an AsyncWebClient where the test needs exact timing; the browser fixtures are in
tests/ui/conftest.py. The pane's screenshot goes to /tmp/pane.png (and test-artifacts/ui-assistant-pane.png)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack.workspace import Workspace
from bot.playground.launcher import Playground
from tests.ui.conftest import shoot

RECIPIENT = {"recipient_user_id": "U_ALICE", "recipient_team_id": "T_PLAYGROUND"}
PROMPTS = [
    {"title": "Deploy it", "message": "deploy please"},
    {"title": "Plan the release", "message": "plan the release"},
]


def bot_client(ws: Workspace) -> AsyncWebClient:
    return AsyncWebClient(token=ws.fake.bot_token, base_url=ws.api_url)


def workspace(playground: Playground) -> Workspace:
    assert playground.workspace is not None
    return playground.workspace


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


async def post(http: aiohttp.ClientSession, playground: Playground, name: str, body: Any) -> tuple[int, Any]:
    async with http.post(f"{playground.url}api/{name}", json=body) as response:
        return response.status, await response.json()


async def test_pane_routes_open_a_thread_and_follow_the_context(
    playground: Playground, http: aiohttp.ClientSession
) -> None:
    ws = workspace(playground)
    status, opened = await post(http, playground, "open_assistant", {"user": "U_BOB", "context_channel": "C_GENERAL"})
    assert status == 200 and opened["ok"] and opened["channel"] == "D_BOB"
    assert opened["ack"]["name"] == "assistant_thread_started" and opened["ack"]["ok"]
    ts = opened["thread_ts"]
    assert ws.state.assistant_threads[-1]["context"]["channel_id"] == "C_GENERAL"
    status, moved = await post(
        http, playground, "assistant_context", {"user": "U_BOB", "thread_ts": ts, "channel": "C_RANDOM"}
    )
    assert status == 200 and moved["ack"]["name"] == "assistant_thread_context_changed"
    assert ws.state.assistant_threads[-1]["context"]["channel_id"] == "C_RANDOM"
    status, refused = await post(
        http, playground, "assistant_context", {"user": "U_ALICE", "thread_ts": ts, "channel": "C_RANDOM"}
    )
    assert status == 400 and "no assistant thread" in refused["error"]  # Bob's pane, not Alice's
    status, refused = await post(http, playground, "open_assistant", {"user": "U_BOT"})
    assert status == 400

    await ws.wait_for_call("assistant.threads.setSuggestedPrompts", timeout=10)  # the bot greets the new thread
    await bot_client(ws).assistant_threads_setTitle(channel_id="D_BOB", thread_ts=ts, title="Bob's chat")
    async with http.get(f"{playground.url}api/state") as response:
        assistant = (await response.json())["assistant"]
    assert assistant["threads"][-1]["thread_ts"] == ts
    assert assistant["titles"] == [{"channel_id": "D_BOB", "thread_ts": ts, "title": "Bob's chat"}]
    assert [p["thread_ts"] for p in assistant["prompts"]] == [ts]


async def test_ui_streamed_message_grows_and_the_status_line_comes_and_goes(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    client = bot_client(workspace(playground))
    parent = str((await client.chat_postMessage(channel="C_GENERAL", text="Release notes, please"))["ts"])
    root = page.locator(f'#messages .msg[data-ts="{parent}"]')
    await root.get_by_role("button", name="Reply in thread").click()
    thread = page.locator("#thread-pane")
    await expect(thread.locator(f'.msg[data-ts="{parent}"]')).to_contain_text("Release notes, please")

    await client.assistant_threads_setStatus(channel_id="C_GENERAL", thread_ts=parent, status="is thinking...")
    await expect(thread.locator(".status-line")).to_have_text("askbot is thinking...")
    await expect(root.locator(".status-line")).to_have_text("askbot is thinking...")  # under the root, in the channel
    await shoot(page, "ui-status-line")
    await client.assistant_threads_setStatus(channel_id="C_GENERAL", thread_ts=parent, status="")
    await expect(thread.locator(".status-line")).to_have_count(0)
    await expect(root.locator(".status-line")).to_have_count(0)

    await client.assistant_threads_setStatus(channel_id="C_GENERAL", thread_ts=parent, status="is writing...")
    await expect(thread.locator(".status-line")).to_have_text("askbot is writing...")
    started = await client.chat_startStream(
        channel="C_GENERAL", thread_ts=parent, markdown_text="Deploying ", **RECIPIENT
    )
    streamed = thread.locator(f'.msg[data-ts="{started["ts"]}"]')
    await expect(streamed).to_contain_text("Deploying")
    await expect(streamed.locator(".stream-caret")).to_be_visible()
    await expect(thread.locator(".status-line")).to_have_count(0)  # the reply cleared the status, as in Slack
    await client.chat_appendStream(channel="C_GENERAL", ts=started["ts"], markdown_text="to **production**")
    await expect(streamed.locator(".md")).to_have_text("Deploying to production")
    await expect(streamed.locator(".md strong")).to_have_text("production")
    await shoot(page, "ui-streaming-live")
    await client.chat_appendStream(channel="C_GENERAL", ts=started["ts"], markdown_text=", as you chose.")
    await expect(streamed.locator(".md")).to_have_text("Deploying to production, as you chose.")
    await expect(streamed.locator(".stream-caret")).to_be_visible()
    await client.chat_stopStream(channel="C_GENERAL", ts=started["ts"])
    await expect(streamed.locator(".stream-caret")).to_have_count(0)
    await expect(streamed).not_to_have_attribute("aria-busy", "true")
    await expect(streamed.locator(".md")).to_have_text("Deploying to production, as you chose.")
    await shoot(page, "ui-streaming")


async def test_ui_assistant_pane(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    ws = workspace(playground)
    client = bot_client(ws)
    await page.get_by_role("button", name="Assistant", exact=True).click()
    pane = page.locator("#assistant-pane")
    await expect(pane).to_be_visible()
    await expect(page.locator("#thread-pane")).to_be_hidden()
    [opened] = ws.state.assistant_threads
    ts = opened["thread_ts"]
    assert opened["user_id"] == "U_ALICE" and opened["channel_id"] == "D_ALICE"
    assert opened["context"]["channel_id"] == "C_GENERAL"  # the channel Alice was viewing
    await expect(pane.locator("#assistant-sub")).to_have_text("viewing #general")
    await ws.wait_for_call("assistant.threads.setSuggestedPrompts", timeout=10)  # the bot's own, on thread start
    await expect(pane.locator(".prompt-chip").first).to_be_visible()

    await page.locator("#channel-list").get_by_role("button", name="random").click()  # moving beside the pane
    await ws.fake.wait_until(lambda: opened["context"].get("channel_id") == "C_RANDOM", timeout=5, what="the move")
    await expect(pane.locator("#assistant-sub")).to_have_text("viewing #random")
    await expect(pane).to_be_visible()

    await client.assistant_threads_setTitle(channel_id="D_ALICE", thread_ts=ts, title="Release help")
    await expect(pane.locator("#assistant-title")).to_have_text("Release help")
    await client.assistant_threads_setSuggestedPrompts(channel_id="D_ALICE", thread_ts=ts, title="Try", prompts=PROMPTS)
    await expect(pane.locator(".prompts-title")).to_have_text("Try")
    await expect(pane.locator(".prompt-chip")).to_have_text(["Deploy it", "Plan the release"])
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="is getting ready...")
    await expect(pane.locator("#assistant-status")).to_have_text("askbot is getting ready...")
    await client.assistant_threads_setStatus(channel_id="D_ALICE", thread_ts=ts, status="")
    await expect(pane.locator("#assistant-status .status-line")).to_have_count(0)

    await pane.get_by_role("button", name="Deploy it").click()
    sent = await ws.wait_for_message(
        channel="D_ALICE", thread_ts=ts, from_bot=False, predicate=lambda m: m["user"] == "U_ALICE", timeout=5
    )
    assert sent["user"] == "U_ALICE" and sent["text"] == "deploy please" and sent["thread_ts"] == ts
    await expect(pane.locator(".msg:not(.bot)")).to_contain_text("deploy please")
    question = pane.get_by_role("button", name="production")  # the bot's question, rendered as in channels
    await expect(question).to_be_visible(timeout=10_000)
    await question.click()
    await expect(pane.get_by_text("Deploying to")).to_be_visible(timeout=10_000)
    await expect(pane.get_by_role("button", name="production")).to_have_count(0)
    await page.locator("#assistant-composer textarea").blur()
    await page.screenshot(path="/tmp/pane.png")
    await shoot(page, "ui-assistant-pane")

    await page.get_by_role("button", name="Assistant", exact=True).click()  # closes it
    await expect(pane).to_be_hidden()
