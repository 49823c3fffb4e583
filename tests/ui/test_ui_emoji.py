"""Slack emoji shortcodes in the playground: every one the bot writes (``:raised_hand:`` on an approval, ``:bell:`` on a
reminder, ``:arrow_up:`` on an escalation...) is in the browser renderer's table (static/text.js), found by reading
bot/'s own strings, so a new one can't be missed; and the page shows them as characters, unknown ones as typed."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from bot.playground.ui import STATIC_DIR

ROOT = Path(__file__).resolve().parents[2]
SHORTCODE = re.compile(r"(?<![\w}:]):([a-z][a-z0-9_+-]*):(?![\w{`<])")
SPHINX_ROLES = {"class", "meth", "func", "mod", "data", "attr", "exc", "obj", "ref", "doc"}


def emitted_shortcodes() -> dict[str, str]:
    """Every ``:name:`` in a string of bot/'s code (docstrings left out) -> where it is."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                for name in SHORTCODE.findall(node.value):
                    if name not in SPHINX_ROLES:
                        found.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def renderer_table() -> set[str]:
    source = (STATIC_DIR / "text.js").read_text()
    table = source[source.index("const EMOJI = {") : source.index("};", source.index("const EMOJI = {"))]
    table = "\n".join(line.split("//")[0] for line in table.splitlines())
    return set(re.findall(r'"?([a-z0-9_+-]+)"?\s*:\s*"', table))


def test_every_shortcode_the_bot_writes_has_a_character() -> None:
    emitted = emitted_shortcodes()
    assert {"raised_hand", "bell", "arrow_up", "warning", "white_check_mark"} <= set(emitted)  # the scan finds them
    missing = {name: where for name, where in emitted.items() if name not in renderer_table()}
    assert missing == {}, f"add these to EMOJI in bot/playground/static/text.js: {missing}"


async def test_the_page_shows_shortcodes_as_characters_and_unknown_ones_as_typed(page: Any) -> None:
    rendered = await page.evaluate(
        """async () => {
            const text = await import("/static/text.js");
            const ctx = { userName: () => "", channelName: () => "", me: "U_ALICE" };
            const show = (frag) => { const div = document.createElement("div"); div.append(frag); return div; };
            const mrkdwn = show(text.mrkdwn(
                ":raised_hand: *Approval* :bell: :arrow_up: :+1::skin-tone-2: :no_such_emoji: :constructor: 12:30:00",
                ctx));
            const plain = show(text.plainText({ type: "plain_text", text: ":octagonal_sign: Stop", emoji: true }));
            const rich = show(text.richText({ type: "rich_text", elements: [{ type: "rich_text_section", elements: [
                { type: "emoji", name: "double_vertical_bar" }, { type: "emoji", name: "custom_one", unicode: "1f680" },
                { type: "emoji", name: "custom_two" }] }] }, ctx));
            return { mrkdwn: mrkdwn.textContent, plain: plain.textContent, rich: rich.textContent,
                     titles: [...mrkdwn.querySelectorAll(".emoji")].map((e) => e.title) };
        }"""
    )
    assert rendered["mrkdwn"] == "✋ Approval 🔔 ⬆️ 👍🏻 :no_such_emoji: :constructor: 12:30:00"
    assert rendered["titles"] == [":raised_hand:", ":bell:", ":arrow_up:", ":+1:", ":skin-tone-2:"]  # hover: the code
    assert rendered["plain"] == "🛑 Stop"
    assert rendered["rich"] == "⏸️🚀:custom_two:"


async def test_a_user_group_mention_shows_as_its_handle(page: Any) -> None:
    """``<!subteam^S…>`` (how the bot names a rule's approver group, e.g. "Waiting for @finance") shows as the
    group's handle, as Slack shows it (before: "!subteam^S_FINANCE", raw), from its label or, without one, the
    workspace's user groups (the page's state)."""
    rendered = await page.evaluate(
        """async () => {
            const text = await import("/static/text.js");
            const store = await import("/static/store.js");
            const show = (frag) => { const div = document.createElement("div"); div.append(frag); return div; };
            return [
                show(text.mrkdwn("Waiting for <!subteam^S_FINANCE> to approve", store.textCtx())).textContent,
                show(text.mrkdwn("or <!subteam^S9|@ops>", store.textCtx())).textContent,
            ];
        }"""
    )
    assert rendered == ["Waiting for @finance to approve", "or @ops"]
