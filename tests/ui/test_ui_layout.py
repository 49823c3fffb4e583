"""The playground page's layout and focus in headless Chromium (fixtures: tests/ui/conftest.py): the Deadlines form's
labels belong to their own inputs, keyboard focus stays with the question after answering it, and at 800 px the
header shows every badge whole and a thread or the assistant pane opens in front of the developer panel."""

from __future__ import annotations

from typing import Any

import pytest

from bot.playground.launcher import Playground
from tests.ui.conftest import shoot
from tests.ui.test_ui_browser import mention

TIMING_LABELS = {
    "Question deadline (s)": "ask_ttl_seconds",
    "At the deadline": "on_timeout",
    "Remind after (s, 0 = off)": "remind_after",
    "Reminders at most": "remind_max",
    "Escalate after (s, 0 = off)": "escalate_after",
    "Escalate to": "escalate_to",
}


async def open_dev_panel(page: Any) -> Any:
    dev = page.locator("#devpanel")
    if not await dev.is_visible():
        await page.locator("#dev-toggle").click()
    return dev


async def test_each_deadlines_label_is_for_its_own_input_on_its_own_row(page: Any) -> None:
    from playwright.async_api import expect

    dev = await open_dev_panel(page)
    await dev.locator("#timing summary").click()
    form = dev.locator("#timing-form")
    await expect(form).to_be_visible()
    pairs = await form.evaluate(
        """form => [...form.querySelectorAll("input, select")].map((input) => {
            const labels = [...form.querySelectorAll(`label[for="${input.id}"]`)];
            const box = (node) => {
                const r = node.getBoundingClientRect();
                return [r.left, r.top, r.right, r.bottom];
            };
            return { name: input.name, id: input.id, labels: labels.map((l) => l.textContent.trim()),
                     inside: labels.some((l) => l.contains(input)), input: box(input), label: labels.map(box)[0] };
        })"""
    )
    assert {p["name"]: p["labels"] for p in pairs} == {name: [label] for label, name in TIMING_LABELS.items()}
    assert all(p["id"] and not p["inside"] for p in pairs), pairs  # label for= the input's id, not wrapped text
    for p in pairs:  # the label is on its input's row, left of it: never beside the next one
        left, top, _right, bottom = p["input"]
        _l_left, l_top, l_right, l_bottom = p["label"]
        middle = (l_top + l_bottom) / 2
        assert top <= middle <= bottom and l_right <= left, p
    for label, name in TIMING_LABELS.items():
        await expect(form.get_by_label(label, exact=True)).to_have_attribute("name", name)


async def test_focus_stays_with_the_question_after_answering_it_with_the_keyboard(page: Any) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "deploy")
    staging = thread.get_by_role("button", name="staging")
    await expect(staging).to_be_visible()
    await staging.focus()
    await page.keyboard.press("Enter")
    await expect(thread.get_by_text("Deploying to")).to_be_visible()
    await expect(thread.get_by_role("button", name="staging")).to_have_count(0)  # the question was updated
    focused = await page.evaluate(
        """() => { const a = document.activeElement; const msg = a && a.closest(".msg");
                   return { tag: a ? a.tagName : null, inThread: Boolean(a && a.closest("#thread-pane")),
                            text: msg ? msg.textContent : "" }; }"""
    )
    assert focused["tag"] != "BODY" and focused["inThread"], focused
    assert "Which environment" in focused["text"], focused  # the answered question itself
    await page.keyboard.press("Tab")  # and the keyboard goes on from there, inside the thread
    assert await page.evaluate("() => Boolean(document.activeElement.closest('#thread-pane'))")


async def test_focus_on_the_sessions_stop_button_survives_live_updates_and_its_going_away(
    page: Any, playground: Playground
) -> None:
    """The thread's status line is redrawn at every live update: a keyboard user on the session's Stop button stays
    on it while the reply streams, and lands in the thread's composer when it goes away (the run ended), never on
    the page (a Tab after an answer could land there and be thrown to the top of the page)."""
    from playwright.async_api import expect

    assert playground.bot is not None
    playground.bot.agent.model.delay = 0.2  # type: ignore[attr-defined]  # the demo model writes slowly
    thread = await mention(page, "help")
    stop = thread.locator(".session-line").get_by_role("button", name="Stop")
    await stop.focus()
    await thread.locator(".msg.streaming").wait_for()
    await page.wait_for_timeout(600)  # a few live updates of the status line while it streams
    if await stop.count():  # still working: the redrawn Stop button is the one focused
        await expect(stop).to_be_focused()
    playground.bot.agent.model.delay = 0.0  # type: ignore[attr-defined]
    await expect(stop).to_have_count(0, timeout=30_000)  # the reply ended
    await expect(page.locator("#thread-text")).to_be_focused()


async def test_focus_comes_back_to_the_question_after_answering_it_in_the_modal(page: Any) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "what's the name?")
    answer_button = thread.get_by_role("button", name="Answer")
    await answer_button.focus()
    await page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Your answer")
    await expect(dialog.get_by_label("Answer")).to_be_focused()
    await page.keyboard.type("Apollo")
    await dialog.get_by_role("button", name="Send").focus()
    await page.keyboard.press("Enter")
    await expect(dialog).to_have_count(0)
    await expect(thread.get_by_text("The project is called")).to_be_visible()
    focused = await page.evaluate(
        """() => { const a = document.activeElement; const msg = a && a.closest(".msg");
                   return { tag: a ? a.tagName : null, text: msg ? msg.textContent : "" }; }"""
    )
    assert focused["tag"] != "BODY" and "What's the project called?" in focused["text"], focused


@pytest.mark.parametrize("width", [800, 1000])
async def test_the_header_shows_every_badge_whole(page: Any, width: int) -> None:
    from playwright.async_api import expect

    await page.set_viewport_size({"width": width, "height": 700})
    await expect(page.locator("#policy-badge")).not_to_be_empty()
    layout = await page.evaluate(
        """() => {
            const box = (node) => node.getBoundingClientRect();
            const strip = box(document.querySelector(".badges"));
            const badges = [...document.querySelectorAll(".badges .badge")].map((b) => ({
                id: b.id, text: b.textContent, left: box(b).left, right: box(b).right,
                clipped: b.scrollWidth > b.clientWidth + 1, visible: getComputedStyle(b).display !== "none" }));
            const controls = ["user-select", "assistant-toggle", "dev-toggle"].map((id) => {
                const r = box(document.getElementById(id)); return { id, left: r.left, right: r.right, top: r.top,
                                                                     bottom: r.bottom }; });
            const topbar = box(document.querySelector(".topbar"));
            return { strip: [strip.left, strip.right], badges, controls, topbar: [topbar.top, topbar.bottom],
                     width: document.documentElement.clientWidth };
        }"""
    )
    await shoot(page, f"ui-header-{width}")
    assert [b["visible"] for b in layout["badges"]] == [True, True, True], layout
    strip_left, strip_right = layout["strip"]
    for badge in layout["badges"]:
        assert badge["text"] and not badge["clipped"], badge
        assert strip_left - 1 <= badge["left"] and badge["right"] <= strip_right + 1, (badge, layout["strip"])
    first_control = min(c["left"] for c in layout["controls"])
    assert strip_right <= first_control, layout  # nothing covers a badge
    top, bottom = layout["topbar"]
    for control in layout["controls"]:  # one row: no button wraps out of the bar, none beyond the window
        assert top <= control["top"] and control["bottom"] <= bottom and control["right"] <= layout["width"], control


@pytest.mark.parametrize("side", ["assistant", "thread"])
async def test_at_800_px_a_side_pane_opens_in_front_of_the_developer_panel(
    page: Any, playground: Playground, side: str
) -> None:
    from playwright.async_api import expect

    await page.set_viewport_size({"width": 800, "height": 700})
    await open_dev_panel(page)
    await expect(page.locator("#devpanel")).to_be_visible()
    if side == "assistant":
        await page.locator("#assistant-toggle").click()
        pane = page.locator("#assistant-pane")
        await expect(pane.get_by_role("button", name="Plan a release")).to_be_visible()  # its suggested prompts
        composer = page.locator("#assistant-text")
    else:
        box = page.locator("#composer-text")  # under the floating panel: the keyboard reaches it
        await box.focus()
        await box.press_sequentially("@askbot deploy")
        await page.keyboard.press("Escape")  # close the suggestions, keep the typed name
        await page.keyboard.press("Enter")
        pane = page.locator("#thread-pane")
        await expect(pane.get_by_role("button", name="staging")).to_be_visible()
        composer = page.locator("#thread-text")
    await shoot(page, f"ui-800-{side}-over-devpanel")
    on_top = await pane.evaluate(
        """pane => { const r = pane.getBoundingClientRect();
                     const points = [[r.left + 10, r.top + 60], [(r.left + r.right) / 2, (r.top + r.bottom) / 2],
                                     [r.right - 10, r.bottom - 10]];
                     return points.map(([x, y]) => pane.contains(document.elementFromPoint(x, y))); }"""
    )
    assert on_top == [True, True, True]  # no part of it under the developer panel
    await composer.click()  # and it takes clicks
    await expect(composer).to_be_focused()
    await page.locator("#dev-toggle").click()  # the panel comes back when asked for
    await expect(page.locator("#devpanel")).to_be_visible()


async def test_focus_stays_in_the_thread_after_dismissing_an_ephemeral_with_the_keyboard(page: Any) -> None:
    from playwright.async_api import expect

    thread = await mention(page, "deploy")
    await expect(thread.get_by_role("button", name="staging")).to_be_visible()
    await page.select_option("#user-select", "U_BOB")
    await thread.get_by_role("button", name="staging").click()  # Bob may not answer: an ephemeral tells him
    dismiss = thread.locator(".msg.ephemeral").get_by_role("button", name="Dismiss")
    await dismiss.focus()
    await page.keyboard.press("Enter")
    await expect(thread.locator(".msg.ephemeral")).to_have_count(0)
    focused = await page.evaluate(
        """() => { const a = document.activeElement;
                   return { tag: a.tagName, inThread: Boolean(a.closest("#thread-pane")) }; }"""
    )
    assert focused == {"tag": "ARTICLE", "inThread": True}, focused  # the message now in its place
