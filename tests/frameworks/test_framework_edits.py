"""Edit before approving, for a framework agent's approval (issue 25: "edited arguments where they support them"),
through the fake Slack: the real Pydantic AI agent against the loopback model shows an Edit button where the policy
rule's ``edit:`` allows (its form built from the tool's ``parameters_json_schema``), runs the call once with the
edited arguments (``ToolApproved(override_args=...)``) and tells the model; the OpenAI Agents SDK, which takes no
edited arguments, shows no Edit button under the same rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, blocks_text, current, has_controls, text_is

EDIT_FORM = "approval_edit_modal"


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def settings(tmp_path: Path, factory: str) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        f"  - tool: restart_service\n    approvers: [{BOB}]\n    edit: [name]\n"
        "  - name: default\n    tool: '*'\n"
    )
    return {"agent": f"bot.testing.approval_agent:{factory}", "approval_policy": str(path)}


def buttons(message: dict[str, Any]) -> list[str]:
    return [
        str(e["text"]["text"])
        for b in message.get("blocks") or []
        if b.get("type") == "actions"
        for e in b.get("elements") or []
        if e.get("type") == "button"
    ]


async def test_a_pydantic_ai_call_edited_in_slack_runs_once_with_the_edited_arguments(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=settings(tmp_path, "pydantic_ai")) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]), Reply(text="Done."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Edit" in buttons(request)
        await h.ws.click(request, "Edit", user=BOB)
        form = await h.ws.wait_for_view(user=BOB, predicate=lambda v: v.get("callback_id") == EDIT_FORM)
        fields = {b["block_id"]: b["element"] for b in form["blocks"] if b["type"] == "input"}
        assert list(fields) == ["edit:name"] and fields["edit:name"]["initial_value"] == "api"
        ack = await h.ws.submit_view(form, {"edit:name": {"edit_value": "api-canary"}}, user=BOB)
        assert ack.status == 200 and not ack.body
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api-canary"]  # the edited argument, once; never the model's
        last = h.model.requests[-1]["messages"]
        [result] = [m for m in last if m["role"] == "tool"]
        assert result["content"] == "api-canary restarted"
        told = last[-1]
        assert told["role"] == "user" and told["content"].startswith(f"Note: {BOB} changed the arguments of tool call")
        assert 'Before (yours): {"name": "api"}' in told["content"]
        assert 'After (what ran): {"name": "api-canary"}' in told["content"]
        done = blocks_text(await current(h, request))
        assert f"Approved by <@{BOB}>" in done and "api-canary" in done


async def test_an_openai_agents_sdk_approval_shows_no_edit_button_it_could_not_honour(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=settings(tmp_path, "openai_agents")) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]), Reply(text="Done."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Approve" in buttons(request) and "Edit" not in buttons(request)
        await h.ws.click(request, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]
