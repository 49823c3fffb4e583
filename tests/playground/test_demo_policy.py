"""The playground's demo approval policy (bot/playground/demo_policy.yaml, issue 23 part 7) through the real
playground (bot on the DemoModel + fake Slack, signed HTTP on loopback): which policy the bot runs with, a refund
over 100 asked of @finance (Carol) by DM, a small refund run at once, a prod deploy's arguments only in Details, and
a restart asked by one of its two approvers declined at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.approval_policy import load_policy
from bot.config import Settings
from bot.playground.demo_agent import DEMO_POLICY
from bot.playground.launcher import DEMO_AGENT, Playground, demo_policy, run_playground
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, has_controls


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"slack_bot_token": None, "openai_api_key": None, "redis_url": None, "port": 0}
    return Settings(**{**values, "mcp_port": 0, **overrides})


def said(message: dict[str, Any]) -> str:
    return f"{message.get('text') or ''}\n{blocks_text(message)}"


def test_the_demo_policy_is_the_default_for_the_demo_agent_only(tmp_path: Any) -> None:
    own = tmp_path / "policy.yaml"
    own.write_text("rules:\n  - tool: '*'\n    approvers: [requester]\n")
    assert demo_policy(settings(), agent_spec=DEMO_AGENT) == str(DEMO_POLICY)
    assert demo_policy(settings(approval_policy=str(own)), agent_spec=DEMO_AGENT) == str(own)  # the operator's
    assert demo_policy(settings(approvers="channel"), agent_spec=DEMO_AGENT) is None  # APPROVERS decides
    assert demo_policy(settings(), agent_spec="bot.playground.framework_demos:pydantic_ai") is None
    assert demo_policy(settings(), agent_spec=None) is None
    names = [rule.name for rule in load_policy(str(DEMO_POLICY)).rules]
    assert names == ["restarts need two", "big refunds by finance", "small refunds", "prod deploys", "default"]


async def test_a_big_refund_is_asked_of_finance_by_dm_and_a_small_one_runs_at_once() -> None:
    async with Playground(settings(), ui_port=0) as pg:
        assert pg.workspace is not None and pg.approval_policy == str(DEMO_POLICY)
        ws = pg.workspace
        await ws.mention(BOB, GENERAL, "<@U_BOT> refund 250")
        copy = await ws.wait_for_message(channel="D_CAROL", predicate=has_controls)  # Carol is @finance
        assert "refund" in said(copy) and "*amount*: 250" in said(copy) and "250.0" not in said(copy)
        dms = [cid for cid in ws.state.conversations if cid.startswith("D_") and cid != "D_CAROL"]
        assert not [cid for cid in dms if any(has_controls(m) for m in ws.messages(cid))]  # only finance's copy
        await ws.click(copy, "Approve", user=CAROL)
        done = await ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: not m.get("streaming") and "Done: refunded" in said(m)
        )
        assert "refunded 250.00 on order ORD-1" in said(done)

        await ws.mention(ALICE, GENERAL, "<@U_BOT> refund 40")  # small refunds: require: never
        small = await ws.wait_for_message(channel=GENERAL, predicate=lambda m: "refunded 40.00" in said(m))
        assert not has_controls(small)


async def test_a_prod_deploy_shows_its_arguments_only_in_details() -> None:
    async with Playground(settings(), ui_port=0) as pg:
        assert pg.workspace is not None
        ws = pg.workspace
        await ws.mention(ALICE, GENERAL, "<@U_BOT> deploy 1.5.0 to prod")
        request = await ws.wait_for_message(channel=GENERAL, predicate=has_controls)
        assert "only in Details" in said(request) and "1.5.0" not in said(request)
        await ws.mention(ALICE, GENERAL, "<@U_BOT> deploy 1.5.0 to staging")
        staging = await ws.wait_for_message(channel=GENERAL, predicate=lambda m: has_controls(m) and m != request)
        assert "1.5.0" in said(staging) and "only in Details" not in said(staging)


@pytest.mark.parametrize("asker", [BOB, CAROL])
async def test_a_restart_asked_by_one_of_its_two_approvers_is_declined_at_once(asker: str) -> None:
    async with Playground(settings(), ui_port=0) as pg:
        assert pg.workspace is not None
        await pg.workspace.mention(asker, GENERAL, "<@U_BOT> restart web")
        reply = await pg.workspace.wait_for_message(
            channel=GENERAL, predicate=lambda m: not m.get("streaming") and "won't restart" in said(m)
        )  # the reply whole, not a streamed part of it
        assert "nobody can approve it" in said(reply)


async def test_the_banner_names_the_approval_policy(capsys: pytest.CaptureFixture[str]) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(run_playground(settings(), ui_port=0, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        assert f"Approval policy: {DEMO_POLICY} (the demo policy)" in capsys.readouterr().out
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


def test_docs_show_the_demo_policy_as_shipped() -> None:
    """docs/playground.md's "The demo approval policy" shows the rules of bot/playground/demo_policy.yaml."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "playground.md").read_text()
    section = page.split("## The demo approval policy", 1)[1]
    shown = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(shown)["rules"] == yaml.safe_load(DEMO_POLICY.read_text())["rules"]
