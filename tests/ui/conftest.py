"""Fixtures of the browser tests: the real playground (bot on the DemoModel + fake Slack + UI) and a page on it in
headless Debian Chromium (Playwright, async API).

Needs ``/usr/bin/chromium`` and the ``playwright`` package; without them the ``browser`` fixture skips, unless
``REQUIRE_BROWSER=1`` (CI), which turns the skip into a failure. ``page`` fails its test on any script error or CSP
violation. ``shoot(page, name)`` saves a screenshot to ``test-artifacts/<name>.png``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from bot.playground.launcher import Playground

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_SHOT = ROOT / "docs" / "playground.png"
TIMEOUT_MS = 8000


def missing_browser() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (pip install playwright)"
    return None


@pytest.fixture
async def playground() -> AsyncIterator[Playground]:
    settings = Settings(slack_bot_token=None, openai_api_key=None, redis_url=None, port=0, mcp_port=0)
    async with Playground(settings, ui_port=0) as pg:
        yield pg


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    reason = missing_browser()
    if reason is not None:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        instance = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        await instance.close()


@pytest.fixture
async def page(browser: Any, playground: Playground) -> AsyncIterator[Any]:
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    await tab.goto(playground.url)
    await tab.wait_for_selector("body[data-ready='1']", timeout=TIMEOUT_MS)
    yield tab
    await context.close()
    assert errors == [], errors  # no script errors, no CSP violations


async def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
