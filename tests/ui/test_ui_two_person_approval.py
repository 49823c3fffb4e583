"""The playground's demo approval policy in headless Chromium (issue 23 part 7): ``restart web`` needs two of Bob and
Carol (``bot/playground/demo_policy.yaml``), either may edit the service's name first. Through the REAL bot on the
DemoModel, the fake Slack and the browser UI switching who acts (the fixtures: tests/ui/conftest.py)."""

from __future__ import annotations

from typing import Any

from bot.playground.launcher import Playground
from tests.ui.conftest import shoot
from tests.ui.test_ui_browser import mention


def _replies_saying(playground: Playground, text: str) -> list[str]:
    """The texts of the messages in #general (thread replies included) that contain ``text``."""
    assert playground.workspace is not None
    said = [str(m.get("text") or "") for m in playground.workspace.messages("C_GENERAL")]
    return [t for t in said if text in t]


async def test_ui_two_person_approval_with_an_edit_runs_once_with_the_edited_name(
    page: Any, playground: Playground
) -> None:
    """Alice asks for a restart; she may not approve it (the rule's approvers are Bob and Carol). Bob edits the name
    and approves (1 of 2), Carol approves (2 of 2): the restart runs once, with Bob's name, and the model is told."""
    from playwright.async_api import expect

    thread = await mention(page, "restart web")
    await expect(thread.get_by_text("Approval needed")).to_be_visible()
    await expect(thread.get_by_text("0 of 2")).to_be_visible()

    await page.select_option("#user-select", "U_BOB")
    await thread.get_by_role("button", name="Edit").click()
    edit = page.get_by_role("dialog", name="Edit arguments")
    await expect(edit).to_be_visible()
    name = edit.get_by_role("textbox").first
    await expect(name).to_have_value("web")
    await name.fill("web-canary")
    await edit.get_by_role("button", name="Approve").click()
    await expect(edit).to_have_count(0)
    await expect(thread.get_by_text("1 of 2: approved by")).to_be_visible()
    await expect(thread.get_by_text("web-canary").first).to_be_visible()
    assert _replies_saying(playground, "Done: restarted") == []  # one approval of two: nothing ran

    await page.select_option("#user-select", "U_CAROL")
    await thread.get_by_role("button", name="Approve").first.click()
    await expect(thread.get_by_text("(2 of 2)").first).to_be_visible()
    await expect(thread.get_by_text("Done: restarted web-canary")).to_be_visible(timeout=10_000)
    await expect(thread.get_by_text("changed the arguments before approving")).to_be_visible()  # the model was told
    await shoot(page, "ui-two-person-approval")

    done = _replies_saying(playground, "Done: restarted")
    assert len(done) == 1 and "restarted web-canary" in done[0], done  # ran once, with the edited name
    assert not _replies_saying(playground, "restarted web (")  # never with the model's "web"
