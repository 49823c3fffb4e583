"""The playground UI in headless Chromium (Playwright, async API), through the REAL bot on the DemoModel.

Needs ``/usr/bin/chromium`` (Debian's ``chromium`` package; no Playwright browser download) and the
``playwright`` Python package. Without them these tests skip, unless ``REQUIRE_BROWSER=1`` (CI), which
turns the skip into a failure (the fixtures: tests/ui/conftest.py). Screenshots of each finished flow go to
``test-artifacts/``; the README's ``docs/playground.png`` is (re)written when missing or when
``UPDATE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.playground.launcher import Playground
from tests.ui.conftest import DOCS_SHOT, shoot


async def mention(page: Any, text: str) -> Any:
    """Alice (or whoever acts) types ``@askbot <text>`` in #general and presses Enter; returns the thread pane."""
    box = page.locator("#composer-text")
    await box.click()
    await box.press_sequentially("@ask")
    await page.locator(".mention-popup li.active").filter(has_text="@askbot").wait_for()
    await box.press("Enter")  # picks the bot from the suggestions
    await box.press_sequentially(text)
    await box.press("Enter")  # sends
    return page.locator("#thread-pane")


async def test_ui_single_select(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "deploy please")
    assert playground.workspace is not None
    await expect(thread.get_by_role("button", name="production")).to_be_visible()  # the mention was posted, asked
    sent = playground.workspace.messages("C_GENERAL")[0]
    assert sent["text"] == "<@U_BOT> deploy please" and sent["user"] == "U_ALICE"
    await thread.get_by_role("button", name="production").click()
    await expect(thread.get_by_text("Deploying to")).to_be_visible()
    await expect(thread.get_by_text("answered: production")).to_be_visible()
    await expect(thread.get_by_role("button", name="production")).to_have_count(0)  # the question was updated
    await expect(page.locator("#messages").get_by_role("button", name="2 replies")).to_be_visible()
    await shoot(page, "ui-single-select")


async def test_ui_multi_select(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "plan the release")
    await thread.get_by_label("Dark mode").check()
    await thread.get_by_label("Search").check()
    await thread.get_by_role("button", name="Submit").click()
    await expect(thread.get_by_text("Planned: Dark mode, Search")).to_be_visible()
    await expect(thread.get_by_role("checkbox")).to_have_count(0)
    await shoot(page, "ui-multi-select")


async def test_ui_free_form_modal(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "what's the name?")
    await thread.get_by_role("button", name="Answer").click()
    dialog = page.get_by_role("dialog", name="Your answer")
    await expect(dialog).to_be_visible()
    answer = dialog.get_by_label("Answer")
    await expect(answer).to_be_focused()

    await dialog.get_by_role("button", name="Send").click()  # blank: Slack's client refuses to send
    await expect(dialog.get_by_text("Please complete this required field.")).to_be_visible()
    await answer.fill("   ")  # only spaces: the bot answers response_action=errors
    await dialog.get_by_role("button", name="Send").click()
    await expect(dialog.get_by_text("Please write an answer.")).to_be_visible()
    await expect(answer).to_have_attribute("aria-invalid", "")
    await shoot(page, "ui-modal-error")

    await answer.fill("Apollo & <Zeus>")
    await dialog.get_by_role("button", name="Send").click()
    await expect(dialog).to_have_count(0)
    await expect(thread.get_by_text("The project is called")).to_be_visible()
    await expect(thread.get_by_text("Apollo & <Zeus>").first).to_be_visible()  # unescaped, shown as text
    await shoot(page, "ui-free-form")


async def test_ui_other_user_is_refused(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "deploy")
    await expect(thread.get_by_role("button", name="staging")).to_be_visible()
    await page.select_option("#user-select", "U_BOB")
    await thread.get_by_role("button", name="staging").click()
    await expect(thread.get_by_text("Only visible to you")).to_be_visible()
    await expect(thread.locator(".msg.ephemeral")).to_contain_text("Only @alice can answer")
    await expect(thread.get_by_role("button", name="staging")).to_be_visible()  # still open for Alice
    await shoot(page, "ui-refused")
    await page.select_option("#user-select", "U_ALICE")  # Alice does not see Bob's ephemeral
    await expect(thread.get_by_text("Only visible to you")).to_have_count(0)


async def test_ui_select_menus(page: Any, playground: Playground) -> None:
    """More options than buttons/checkboxes allow: a multi-select menu, then a single-select menu."""
    from playwright.async_api import expect

    thread = await mention(page, "lots of toppings")
    await thread.locator(".bk-multi summary").click()
    await thread.get_by_label("Basil").check()
    await thread.get_by_label("Olives").check()
    await expect(thread.locator(".bk-multi summary")).to_have_text("Basil, Olives")
    await thread.get_by_role("button", name="Submit").click()
    await expect(thread.get_by_text("Pizza with Basil, Olives")).to_be_visible()
    await page.locator("#thread-close").click()
    thread = await mention(page, "many cities")
    await thread.get_by_role("combobox", name="Choose one").select_option(label="Lisbon")
    await expect(thread.get_by_text("The next meetup is in")).to_be_visible()
    await shoot(page, "ui-select-menus")


async def test_ui_renders_block_kit_and_developer_panel(page: Any, playground: Playground) -> None:
    """Every block type the bot may send, mrkdwn escaping (no markup injection), and an invalid_blocks error."""
    from playwright.async_api import expect

    assert playground.workspace is not None
    client = AsyncWebClient(token=playground.workspace.fake.bot_token, base_url=playground.workspace.api_url)
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Release check"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": "*bold* _italic_ ~gone~ `code` <https://example.com|a link> <@U_BOB> "
                "&lt;img src=x onerror=alert(1)&gt; a &amp; b :white_check_mark:",
            },
            "fields": [{"type": "mrkdwn", "text": "*Env*\nstaging"}, {"type": "plain_text", "text": "Owner: bob"}],
            "accessory": {"type": "button", "text": {"type": "plain_text", "text": "Side"}, "action_id": "side"},
        },
        {"type": "divider"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "context note"}]},
        {"type": "image", "image_url": "https://example.com/x.png", "alt_text": "a chart"},
        {
            "type": "markdown",  # as the bot escapes brackets (safe_markdown): shown as written, outside code only
            "text": "**Done** with [docs](https://example.com/docs), \\[beta\\] \\*as is\\* `\\[x\\]`\n- one\n- two",
        },
        {
            "type": "actions",
            "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "style": "primary", "action_id": "a"},
                {"type": "button", "text": {"type": "plain_text", "text": "Stop"}, "style": "danger", "action_id": "b"},
                {
                    "type": "static_select",
                    "action_id": "c",
                    "placeholder": {"type": "plain_text", "text": "Pick"},
                    "options": [{"text": {"type": "plain_text", "text": "Tea"}, "value": "t"}],
                },
                {
                    "type": "multi_static_select",
                    "action_id": "d",
                    "placeholder": {"type": "plain_text", "text": "Many"},
                    "options": [{"text": {"type": "plain_text", "text": "Cake"}, "value": "k"}],
                },
            ],
        },
    ]
    await client.chat_postMessage(channel="C_GENERAL", text="fallback", blocks=blocks)
    bad = [{"type": "section", "text": {"type": "mrkdwn", "text": ""}}]
    with pytest.raises(Exception, match="invalid_blocks"):
        await client.chat_postMessage(channel="C_GENERAL", text="broken", blocks=bad)

    msg = page.locator("#messages .msg.bot")
    await expect(msg.locator(".bk-header")).to_have_text("Release check")
    await expect(msg.locator("strong", has_text="bold")).to_be_visible()
    await expect(msg.locator("em", has_text="italic")).to_be_visible()
    await expect(msg.locator("s", has_text="gone")).to_be_visible()
    await expect(msg.locator("code", has_text="code")).to_be_visible()
    await expect(msg.get_by_role("link", name="a link")).to_have_attribute("href", "https://example.com")
    await expect(msg.locator(".mention", has_text="@bob")).to_be_visible()
    await expect(msg.get_by_text("<img src=x onerror=alert(1)> a & b")).to_be_visible()
    assert await msg.locator("img[src=x]").count() == 0
    await expect(msg.locator(".bk-field")).to_have_count(2)
    await expect(msg.locator(".bk-accessory").get_by_role("button", name="Side")).to_be_visible()
    await expect(msg.locator("hr.bk-divider")).to_have_count(1)
    await expect(msg.locator(".bk-context")).to_have_text("context note")
    await expect(msg.get_by_role("link", name="a chart")).to_have_attribute("href", "https://example.com/x.png")
    await expect(msg.locator(".md strong", has_text="Done")).to_be_visible()
    await expect(msg.locator(".md li")).to_have_count(2)
    await expect(msg.locator(".md p").first).to_contain_text("docs, [beta] *as is* ")
    await expect(msg.locator(".md code")).to_have_text("\\[x\\]")
    await expect(msg.get_by_role("button", name="Go")).to_have_class("bk-btn primary")
    await expect(msg.get_by_role("button", name="Stop")).to_have_class("bk-btn danger")
    await expect(msg.get_by_role("combobox", name="Pick")).to_be_visible()
    await expect(msg.locator(".bk-multi summary")).to_have_text("Many")

    panel = page.locator("#devpanel")
    failed = panel.locator(".entry.bad", has_text="chat.postMessage")
    await expect(failed).to_contain_text("invalid_blocks")
    await expect(failed).to_contain_text("json-pointer:/blocks/0/text")
    await failed.locator("summary").click()
    await expect(failed.locator("pre.json").first).to_contain_text('"type": "section"')
    await expect(page.locator("#dev-errors")).to_have_text("1")
    await shoot(page, "ui-block-kit")


async def test_ui_keyboard_only(page: Any, playground: Playground) -> None:
    """Enter sends; Tab reaches the question's buttons; Enter/Space on them answers."""
    from playwright.async_api import expect

    box = page.locator("#composer-text")
    await box.focus()
    await box.press_sequentially("@askbot deploy")
    await page.keyboard.press("Escape")  # close the suggestions, keep the typed name
    await page.keyboard.press("Enter")
    thread = page.locator("#thread-pane")
    staging = thread.get_by_role("button", name="staging")
    await expect(staging).to_be_visible()
    await page.locator("#thread-close").focus()
    for _ in range(12):
        await page.keyboard.press("Tab")
        if await staging.evaluate("node => node === document.activeElement"):
            break
    await expect(staging).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(thread.get_by_text("Deploying to")).to_be_visible()


async def test_ui_narrow_window(page: Any, playground: Playground) -> None:
    from playwright.async_api import expect

    await page.set_viewport_size({"width": 390, "height": 760})
    if await page.locator("#devpanel").is_visible():
        await page.locator("#dev-toggle").click()
    await expect(page.locator("#sidebar")).to_be_hidden()
    await expect(page.locator("#model-badge")).to_have_text("Demo model (offline)")
    await page.get_by_role("button", name="Channels").click()
    await page.locator("#sidebar").get_by_role("button", name="random").click()
    await expect(page.locator("#channel-title")).to_have_text("# random")
    thread = await mention(page, "deploy")
    await thread.get_by_role("button", name="development").click()
    await expect(thread.get_by_text("Deploying to")).to_be_visible()
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390
    await shoot(page, "ui-narrow")


async def test_ui_playground_screenshot(page: Any, playground: Playground) -> None:
    """The whole playground at 1280x800 for the README: a finished flow, a fresh question, the developer panel."""
    from playwright.async_api import expect

    await expect(page.locator("#model-badge")).to_have_text("Demo model (offline)")
    await expect(page.locator("#redis-badge")).to_have_text("In-process Redis")
    thread = await mention(page, "plan the release")
    await thread.get_by_label("Search").check()
    await thread.get_by_label("Notifications").check()
    await thread.get_by_role("button", name="Submit").click()
    await expect(thread.get_by_text("Planned: Search, Notifications")).to_be_visible()
    await page.locator("#thread-close").click()
    thread = await mention(page, "deploy the new build")
    await expect(thread.get_by_role("button", name="production")).to_be_visible()
    await expect(page.locator("#devpanel")).to_be_visible()
    await page.locator("#composer-text").blur()
    await shoot(page, "playground")
    if not DOCS_SHOT.exists() or os.environ.get("UPDATE_SCREENSHOTS") == "1":
        DOCS_SHOT.parent.mkdir(exist_ok=True)
        await page.screenshot(path=str(DOCS_SHOT))


async def test_ui_ticks_and_a_submit_made_fast_reach_the_app_in_order(page: Any, playground: Playground) -> None:
    """Each tick of a checkbox is a block_actions the app records; the Submit sends what was ticked. Made faster than
    the network answers (the first tick's request held back 1 s in the browser), the Submit still counts both ticks:
    a message's actions go one at a time, in order (it was sent before the held tick and planned one feature)."""
    from playwright.async_api import expect

    held = asyncio.Event()

    async def hold_first_tick(route: Any) -> None:
        if not held.is_set():
            held.set()
            await asyncio.sleep(1.0)
        await route.continue_()

    await page.route("**/api/toggle", hold_first_tick)
    thread = await mention(page, "plan the release")
    await thread.get_by_label("Search").check()
    await thread.get_by_label("Notifications").check()
    await thread.get_by_role("button", name="Submit").click()
    await expect(thread.get_by_text("Planned: Search, Notifications")).to_be_visible()
    assert held.is_set()


async def test_ui_tool_approval_approve_then_decline_with_a_reason(page: Any, playground: Playground) -> None:
    """The demo agent's deploy needs the requester's approval (the demo policy): the request shows the tool and its
    arguments, Details shows the full JSON, Approve runs it ("ran in"); a prod deploy shows its arguments only in
    Details, and declined with a reason it never runs."""
    from playwright.async_api import expect

    thread = await mention(page, "deploy staging")
    await expect(thread.get_by_text("Approval needed")).to_be_visible()
    await expect(thread.get_by_text("deploy", exact=True).first).to_be_visible()
    await expect(thread.get_by_text("staging").first).to_be_visible()
    await thread.get_by_role("button", name="Details").click()
    details = page.get_by_role("dialog", name="Details")
    await expect(details.get_by_text("environment", exact=True)).to_be_visible()  # each key over its value
    await expect(details.get_by_text("staging", exact=True)).to_be_visible()
    await details.get_by_role("button", name="Close").first.click()
    await expect(details).to_have_count(0)
    await thread.get_by_role("button", name="Approve").click()
    await expect(thread.get_by_text("Approved by").first).to_be_visible()
    await expect(thread.get_by_text("ran in").first).to_be_visible(timeout=10_000)
    await expect(thread.get_by_text("Done: deployed 1.4.2 to staging")).to_be_visible()
    await shoot(page, "ui-approval")

    second = await mention(page, "deploy prod")
    await expect(second.get_by_text("only in Details").first).to_be_visible()  # arguments: details-only
    await second.get_by_role("button", name="Decline").last.click()
    dialog = page.get_by_role("dialog", name="Decline")
    await expect(dialog).to_be_visible()
    await dialog.get_by_label("Reason (optional)").fill("change freeze")
    await dialog.get_by_role("button", name="Decline").click()
    await expect(dialog).to_have_count(0)
    await expect(second.get_by_text("OK, I won't deploy it (change freeze)")).to_be_visible()


async def test_ui_home_tab_and_timing_panel(page: Any, playground: Playground) -> None:
    """The developer panel shortens the deadline; the question then waits on Alice's Home tab, where she
    answers it with a click; the thread shows the answer."""
    from playwright.async_api import expect

    dev = page.locator("#devpanel")
    if not await dev.is_visible():
        await page.locator("#dev-toggle").click()
    await dev.locator("#timing summary").click()
    form = dev.locator("#timing-form")
    await expect(dev.locator("#timing-coalesce")).to_have_text("10")  # COALESCE_SECONDS, as the bot serves it
    await form.locator("input[name=ask_ttl_seconds]").fill("120")
    await form.get_by_role("button", name="Apply").click()
    await expect(page.locator("#toasts")).to_contain_text("Applied")
    assert playground.bot is not None and playground.bot.agent.ask_ttl == 120
    thread = await mention(page, "deploy please")
    await expect(thread.get_by_role("button", name="production")).to_be_visible()
    await page.locator("#app-list").get_by_role("button", name="Home").click()
    await expect(page.locator("#channel-sub")).to_have_text(re.compile(r"App Home, as @alice$"))  # not "as U_ALICE"
    home = page.locator("#messages .home")
    await expect(home.get_by_text("Waiting for you")).to_be_visible()
    await expect(home.get_by_role("button", name="production")).to_be_visible()
    await home.get_by_role("button", name="production").click()
    await expect(home.get_by_text("Nothing is waiting for you.")).to_be_visible(timeout=15000)
    await page.locator("#channel-list").get_by_role("button", name="general").click()
    await page.locator("#messages").get_by_role("button", name="2 replies").click()
    # the whole reply (the Home shows the answer at once now, before the reply has finished streaming)
    await expect(page.locator("#thread-pane").get_by_text(re.compile(r"Deploying to .* chose"))).to_be_visible(
        timeout=20000  # a loaded CI machine: the reply may take a while to finish
    )
    said = await page.locator("#thread-pane").get_by_text("Deploying to").inner_text()
    assert "U_ALICE" not in said and "as @\u2060alice chose" in said, said  # a name, not "as @U_ALICE chose"
    await expect(page.locator("#thread-pane").get_by_text("answered: production")).to_be_visible()
    await shoot(page, "ui-home-tab")


async def test_ui_home_tab_ticks_and_submit(page: Any, playground: Playground) -> None:
    """A multi-select question waits on Alice's Home tab: she ticks two boxes there (each tick a block_actions from
    her Home view, drawn ticked from the view's state) and presses Submit, which sends them; the thread's question is
    answered with both. (The Home's checkboxes only showed a toast saying to use the buttons.)"""
    from playwright.async_api import expect

    thread = await mention(page, "plan the release")
    await expect(thread.get_by_label("Dark mode")).to_be_visible()
    await page.locator("#app-list").get_by_role("button", name="Home").click()
    home = page.locator("#messages .home")
    await expect(home.get_by_label("Dark mode")).to_be_visible()
    await home.get_by_label("Dark mode").check()
    await home.get_by_label("Search").check()
    await expect(home.get_by_label("Dark mode")).to_be_checked()  # both still ticked once the state came back
    await expect(home.get_by_label("Search")).to_be_checked()
    await expect(page.locator("#toasts")).not_to_contain_text("use the buttons")
    await home.get_by_role("button", name="Submit").click()
    await expect(home.get_by_text("Nothing is waiting for you.")).to_be_visible(timeout=15000)
    await page.locator("#channel-list").get_by_role("button", name="general").click()
    await page.locator("#messages").get_by_role("button", name="2 replies").click()
    await expect(page.locator("#thread-pane").get_by_text("Planned: Dark mode, Search")).to_be_visible(timeout=20000)
    await expect(page.locator("#thread-pane").get_by_role("checkbox")).to_have_count(0)
    await shoot(page, "ui-home-ticks")


async def test_ui_stop_button_of_a_working_thread_stops_its_reply(page: Any, playground: Playground) -> None:
    """Each thread shows its agent session (title, status); while it works Slack's Stop shows, and a click stops the
    reply mid-way (agent_session_stopped through the real bot), in the thread pane and under the thread's root."""
    from playwright.async_api import expect

    assert playground.bot is not None
    playground.bot.agent.model.delay = 0.25  # type: ignore[attr-defined]  # the demo model writes slowly: time to click
    thread = await mention(page, "help")
    session = thread.locator(".session-line")
    await expect(session.locator(".session-title")).to_have_text("help")
    await expect(page.locator("#messages .session-line .session-stop")).to_be_visible()  # under the root too
    await thread.locator(".msg.streaming").wait_for()  # mid-reply
    await shoot(page, "ui-session-processing")  # docs/agent-sessions.png is a copy of it
    await session.get_by_role("button", name="Stop").click()
    await expect(thread.get_by_text("Stopped by")).to_be_visible()
    await expect(session.locator(".session-status")).to_have_text("ready")
    await expect(session.get_by_role("button", name="Stop")).to_have_count(0)
    await shoot(page, "ui-stop-session")


async def test_ui_a_dm_approval_asked_while_someone_else_acts_shows_unread_to_its_approver(
    page: Any, playground: Playground
) -> None:
    """Alice asks for a big refund; @finance's Carol is asked by DM while Alice acts. Acting as Carol then, her DM
    with the app shows the unread request (it was counted only for whoever acted when it came: nothing showed)."""
    from playwright.async_api import expect

    thread = await mention(page, "refund 250")
    await expect(thread.locator(".session-status").get_by_text("waiting for a person")).to_be_visible()
    assert playground.workspace is not None
    for _ in range(100):  # the DM reached the page while Alice acted
        if playground.workspace.messages("D_CAROL"):
            break
        await asyncio.sleep(0.05)
    await expect(page.locator("#dm-list .count")).to_have_count(0)  # Alice's own DM: nothing new
    await page.select_option("#user-select", "U_CAROL")
    dm = page.locator("#dm-list").get_by_role("button").first
    await expect(dm.locator(".count")).to_have_text("1")
    await dm.click()
    await expect(page.locator("#dm-list .count")).to_have_count(0)  # read once opened
    await page.select_option("#user-select", "U_ALICE")
    await expect(page.locator("#dm-list .count")).to_have_count(0)


async def test_ui_a_link_to_a_thread_opens_the_thread_in_place(page: Any, playground: Playground) -> None:
    """A big refund is asked of Carol by DM, with a link back to its thread (a ``chat.getPermalink`` link). Clicked
    in the playground it opens that thread in place, as Slack's clients do: it opened a browser tab on a slack.com
    page that does not exist. The Home's "Open the thread" link does the same."""
    from playwright.async_api import expect

    thread = await mention(page, "refund 250")
    await expect(thread.get_by_text("refund", exact=False).first).to_be_visible()
    # Alice asked, @finance decides: her thread waits for a person, not for her (it said "waiting for you")
    await expect(thread.locator(".session-status").get_by_text("waiting for a person")).to_be_visible()
    await page.select_option("#user-select", "U_CAROL")
    await page.locator("#dm-list").get_by_role("button").first.click()
    link = page.locator("#messages").get_by_role("link", name="the thread").first
    await expect(link).to_be_visible(timeout=10_000)
    await expect(page.locator("#thread-pane")).to_be_hidden()  # the DM is open, no thread
    await link.click()
    pane = page.locator("#thread-pane")
    await expect(pane).to_be_visible()
    await expect(pane.get_by_role("log", name="Thread messages").get_by_text("@askbot refund 250")).to_be_visible()
    await expect(page.locator("#channel-title")).to_contain_text("general")
    assert len(page.context.pages) == 1  # no browser tab opened

    await page.select_option("#user-select", "U_ALICE")
    await page.locator("#thread-close").click()
    thread = await mention(page, "deploy please")
    await expect(thread.get_by_role("button", name="production")).to_be_visible()
    await page.locator("#app-list").get_by_role("button", name="Home").click()
    await expect(page.locator("#thread-pane")).to_be_hidden()
    await page.locator("#messages .home").get_by_role("link", name="Open the thread").first.click()
    pane = page.locator("#thread-pane")
    await expect(pane.get_by_role("log", name="Thread messages").get_by_text("@askbot").first).to_be_visible()
    await expect(page.locator("#channel-title")).to_contain_text("general")  # out of the Home, into the channel
    assert len(page.context.pages) == 1
    await shoot(page, "ui-linked-thread")
