"""Each framework's demo agent end to end in the playground (``--agent bot.playground.framework_demos:...``): the
fake Slack, the real bot, the framework's own client talking to the demo model the playground serves on loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.config import Settings
from bot.playground import framework_demos
from bot.playground.launcher import Playground, agent_label
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framework_demos, "RESTART_DELAY", 0)


def settings(agent: str) -> Settings:
    values: dict[str, Any] = {"slack_bot_token": None, "openai_api_key": None, "redis_url": None, "port": 0}
    return Settings(**values, mcp_port=0, agent=f"bot.playground.framework_demos:{agent}")


@pytest.mark.parametrize(
    ("agent", "say", "click", "reply"),
    [
        ("pydantic_ai", "deploy", "production", "production"),
        ("langgraph", "deploy", "staging", "staging"),
        ("openai_agents", "restart web", "Approve", "restarted web"),
    ],
)
async def test_a_framework_demo_agent_asks_in_the_playground_and_the_click_continues_it(
    agent: str, say: str, click: str, reply: str
) -> None:
    async with Playground(settings(agent), ui_port=0) as pg:
        assert agent_label(pg).endswith("agent)")
        ws = pg.workspace
        assert ws is not None
        d = await ws.mention(ALICE, GENERAL, f"<@U_BOT> {say}")
        thread = d.message["ts"]
        q = await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls, timeout=20)
        await ws.click(q, click, user=ALICE)
        done = await ws.wait_for_message(
            channel=GENERAL,
            thread_ts=thread,
            predicate=lambda m: "(demo model)" in m["text"] and reply in m["text"],
            timeout=20,
        )
        assert reply in json.dumps(done)
