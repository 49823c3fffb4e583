"""The app's Messages tab in the playground (agent_view), in headless Chromium through the REAL bot on the DemoModel:
opening it sends app_home_opened (tab "messages"), the app greets there with its suggested prompts, a prompt clicked
or a message written there starts a conversation whose reply shows its agent session (status, title, Stop while it
works). Fixtures: tests/ui/conftest.py (skips without Chromium unless REQUIRE_BROWSER=1)."""

from __future__ import annotations

import json
import re
from typing import Any

from bot.config import DEFAULT_GREETING
from bot.playground.launcher import Playground
from tests.ui.conftest import shoot


async def open_messages_tab(page: Any) -> Any:
    await page.locator("#app-list").get_by_role("button", name="Messages").click()
    return page.locator("#messages")


async def test_ui_messages_tab_greets_with_prompts_and_a_prompt_gets_a_reply_with_its_session(
    page: Any, playground: Playground
) -> None:
    from playwright.async_api import expect

    assert playground.workspace is not None
    tab = await open_messages_tab(page)
    await expect(page.locator("#channel-title")).to_have_text("Messages")
    await expect(page.locator("#channel-sub")).to_have_text(re.compile(r"Messages tab, as @alice$"))
    await expect(tab.get_by_text(DEFAULT_GREETING)).to_be_visible()
    acks = playground.workspace.sender.acks
    sent = [json.loads(a.request_body)["event"] for a in acks if a.kind == "app_home_opened"]
    assert [(e["tab"], e["user"]) for e in sent] == [("messages", "U_ALICE")]  # by the page's click, as Slack sends it
    prompts = page.locator("#tab-prompts")
    # the offline demo model's own words, each a demo (before: the deployment's prompts, which it answered with
    # another demo: "Pick a restaurant" asked where to deploy)
    await expect(prompts.get_by_role("button")).to_have_count(4)
    await prompts.get_by_role("button", name="Plan a release").click()
    thread = page.locator("#thread-pane")
    said = thread.locator("#thread-messages")
    await expect(said.locator(".msg").first).to_contain_text("plan the release: which features go in?")
    await expect(said.locator(".msg.bot").first).to_be_visible()  # the app's reply in the conversation's thread
    await expect(said.locator("input[type=checkbox]").first).to_be_visible()  # the plan demo: several choices
    session = thread.locator(".session-line")
    await expect(session.locator(".session-title")).to_have_text("plan the release: which features go in?")
    # once the reply is whole (streamed at one Web API call a second, it can take several seconds under load)
    await expect(session).to_have_attribute("data-session", re.compile("^(active|suspended)$"), timeout=60_000)
    await expect(tab.locator(".session-line")).to_have_count(1)  # under the conversation's root in the tab too
    await shoot(page, "ui-messages-tab")


async def test_ui_messages_tab_composer_writes_to_the_app_and_stop_shows_while_it_works(
    page: Any, playground: Playground
) -> None:
    from playwright.async_api import expect

    assert playground.bot is not None and playground.workspace is not None
    playground.bot.agent.model.delay = 0.25  # type: ignore[attr-defined]  # the demo model writes slowly: time to click
    tab = await open_messages_tab(page)
    await expect(tab.get_by_text(DEFAULT_GREETING)).to_be_visible()
    box = page.locator("#composer-text")
    await expect(box).to_have_attribute("placeholder", "Message askbot")
    await box.fill("help")
    await box.press("Enter")
    thread = page.locator("#thread-pane")
    session = tab.locator(".session-line")
    await expect(session.locator(".session-title")).to_have_text("help")
    await thread.locator(".msg.streaming").wait_for()  # mid-reply
    await session.get_by_role("button", name="Stop").click()
    await expect(thread.get_by_text("Stopped by")).to_be_visible()
    await expect(session.locator(".session-status")).to_have_text("ready")
    await expect(session.get_by_role("button", name="Stop")).to_have_count(0)
    said = [m for m in playground.workspace.messages("D_ALICE") if m.get("user") == "U_ALICE"]
    assert [m["text"] for m in said] == ["help"]  # written to the app in the person's DM with it
