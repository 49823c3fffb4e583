"""Edit before approving (issue 23 part 3), through the fake Slack over signed HTTP: an "Edit" button where the
policy rule's ``edit:`` allows opens a modal built from the tool's JSON schema, refuses what doesn't fit it with an
error under the field, runs the call with the edited arguments, tells the model plainly (before / after), and under a
quorum resets the approvals gathered so far."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, current, has_controls, text_is
from tests.ops.test_audit_log import audit_lines, json_logs  # noqa: F401 (a fixture)

AGENT = {"agent": "bot.testing.approval_agent:build"}
EDIT_FORM = "approval_edit_modal"


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    approval_agent.SCALES.clear()
    yield


def policy(tmp_path: Path, body: str) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n" + body + "  - name: default\n    tool: '*'\n")
    return {**AGENT, "approval_policy": str(path)}


async def requested(
    h: Any, tool: str, args: dict[str, Any], *, then: str | None = "Done."
) -> tuple[str, dict[str, Any]]:
    """Alice's request that the agent call ``tool`` with ``args`` (``then``: its reply afterwards; None: left
    unscripted, the call is never decided); returns (thread_ts, the approval request)."""
    h.model.script(Reply(tool_calls=[tool_call(tool, args, id="c1")]), *([Reply(text=then)] if then else []))
    d = await h.ws.mention(ALICE, GENERAL, "please")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def edit_form(h: Any, request: dict[str, Any], *, user: str) -> dict[str, Any]:
    await h.ws.click(request, "Edit", user=user)
    return await h.ws.wait_for_view(user=user, predicate=lambda v: v.get("callback_id") == EDIT_FORM)


def inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}


async def test_the_call_runs_with_the_edited_arguments_and_the_model_is_told(
    fake_redis: aioredis.Redis,
    harness: Any,
    tmp_path: Path,
    json_logs: io.StringIO,  # noqa: F811
) -> None:
    settings = policy(tmp_path, f"  - tool: restart_service\n    approvers: [{BOB}]\n    edit: [name]\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h, "restart_service", {"name": "api"})
        form = await edit_form(h, request, user=BOB)
        fields = inputs(form)
        assert list(fields) == ["edit:name"]  # force is not in the rule's edit: not offered
        assert fields["edit:name"]["type"] == "plain_text_input" and fields["edit:name"]["initial_value"] == "api"
        ack = await h.ws.submit_view(form, {"edit:name": {"edit_value": "api-canary"}}, user=BOB)
        assert ack.status == 200 and not ack.body
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api-canary"]
        told = h.model.requests[-1]["messages"][-1]["content"]
        assert told.startswith(f"Note: {BOB} changed this call's arguments before approving it")
        assert 'Before (yours): {"force": false, "name": "api"}' in told
        assert 'After (what ran): {"force": false, "name": "api-canary"}' in told and told.endswith(
            "api-canary restarted"
        )
        done = blocks_text(await current(h, request))
        assert f"Arguments changed by <@{BOB}>; the model asked for: *name*: api" in done
        assert f"Approved by <@{BOB}>" in done and "*name*: api-canary" in done
    [approved] = [line for line in audit_lines(json_logs) if line["event"] == "approval.approved"]
    assert approved["edited_by"] == BOB and approved["edited_args"] == ["name"]
    assert approved["args_before_sha256"] != approved["args_sha256"] and "api-canary" not in json.dumps(approved)


@pytest.mark.parametrize("blank", ["   ", "\u200b", " \n\t"])
async def test_a_required_text_argument_edited_to_nothing_visible_is_refused_under_it(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, blank: str
) -> None:
    """Slack refuses a required input left empty, not one of spaces: a name edited to spaces (or zero-width
    characters) is refused under the field, nothing runs (before: the tool ran with name "   ")."""
    settings = policy(tmp_path, f"  - tool: restart_service\n    approvers: [{BOB}]\n    edit: [name]\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h, "restart_service", {"name": "api"})
        form = await edit_form(h, request, user=BOB)
        ack = await h.ws.submit_view(form, {"edit:name": {"edit_value": blank}}, user=BOB)
        assert ack.json["response_action"] == "errors" and "spaces alone" in ack.json["errors"]["edit:name"]
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))


@pytest.mark.parametrize("depth", [120, 1500])
async def test_an_argument_edited_to_json_nested_too_deeply_is_refused_under_it(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, depth: int
) -> None:
    """3,000 characters of nested arrays (within Slack's input limit) in a JSON argument: an error under the field,
    as for a model's arguments (before: a RecursionError in the listener, HTTP 500)."""
    settings = policy(tmp_path, f"  - tool: scale_service\n    approvers: [{BOB}]\n    edit: [labels]\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h, "scale_service", {"name": "api", "replicas": 3, "labels": {"a": "b"}})
        form = await edit_form(h, request, user=BOB)
        ack = await h.ws.submit_view(form, {"edit:labels": {"edit_value": "[" * depth + "]" * depth}}, user=BOB)
        assert ack.status == 200 and "levels" in ack.json["errors"]["edit:labels"]
        await h.settle()
        assert approval_agent.SCALES == [] and has_controls(await current(h, request))


async def test_the_form_is_built_from_the_schema_and_refuses_what_does_not_fit_under_each_field(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(
        tmp_path, f"  - tool: scale_service\n    approvers: [{BOB}]\n    edit: [replicas, region, labels]\n"
    )
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h, "scale_service", {"name": "api", "replicas": 3, "labels": {"a": "b"}})
        form = await edit_form(h, request, user=BOB)
        fields = inputs(form)
        assert fields["edit:replicas"]["type"] == "plain_text_input" and fields["edit:replicas"]["initial_value"] == "3"
        assert fields["edit:region"]["type"] == "static_select"
        assert [o["value"] for o in fields["edit:region"]["options"]] == ['"eu"', '"us"']
        assert fields["edit:region"]["initial_option"]["value"] == '"eu"'
        assert json.loads(fields["edit:labels"]["initial_value"]) == {"a": "b"}  # not a plain type: JSON text
        bad = {"edit:replicas": {"edit_value": "three"}, "edit:labels": {"edit_value": "{not json"}}
        ack = await h.ws.submit_view(form, bad, user=BOB)
        errors = ack.json["errors"]
        assert ack.json["response_action"] == "errors" and set(errors) == {"edit:replicas", "edit:labels"}
        assert errors["edit:replicas"] == "must be a whole number" and errors["edit:labels"].startswith("must be JSON")
        ack = await h.ws.submit_view(form, {"edit:replicas": {"edit_value": "500"}}, user=BOB)  # le=50
        assert set(ack.json["errors"]) == {"edit:replicas"} and "500" in ack.json["errors"]["edit:replicas"]
        await h.settle()
        assert approval_agent.SCALES == [] and has_controls(await current(h, request))
        good = {
            "edit:replicas": {"edit_value": "5"},
            "Region: Origin.": "us",
            "edit:labels": {"edit_value": '{"t": "x"}'},
        }
        ack = await h.ws.submit_view(form, good, user=BOB)
        assert ack.status == 200 and not ack.body
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.SCALES == [{"name": "api", "replicas": 5, "region": "us", "labels": {"t": "x"}}]


async def test_no_edit_button_unless_the_rule_allows_and_only_approvers_may_edit(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(
        tmp_path,
        f"  - tool: restart_service\n    when: {{name: api}}\n    approvers: [{BOB}]\n    edit: [name]\n"
        f"  - tool: restart_service\n    approvers: [{BOB}]\n",
    )
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h, "restart_service", {"name": "db"}, then=None)
        assert "Edit" not in [
            e["text"]["text"] for b in request["blocks"] if b["type"] == "actions" for e in b["elements"]
        ]
        _thread, request = await requested(h, "restart_service", {"name": "api"})
        await h.ws.click(request, "Edit", user=CAROL)  # not an approver of this call
        await h.ws.wait_for_view(user=CAROL, predicate=lambda v: "configured approvers" in json.dumps(v["blocks"]))
        await h.settle()
        assert approval_agent.RESTARTS == []


async def test_under_a_quorum_an_edit_resets_the_approvals_gathered_so_far(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(
        tmp_path, f"  - tool: restart_service\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n    edit: [name]\n"
    )
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h, "restart_service", {"name": "api"})
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(await current(h, request))
        form = await edit_form(h, await current(h, request), user=CAROL)
        assert "The approvals given so far are reset" in json.dumps(form["blocks"])
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "web"}}, user=CAROL)
        await h.settle()
        now = blocks_text(await current(h, request))
        assert f"1 of 2: approved by <@{CAROL}>" in now and "*name*: web" in now  # Bob approved "api", not "web"
        assert approval_agent.RESTARTS == []
        await h.ws.click(await current(h, request), "Approve", user=BOB)  # Bob approves the new arguments
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["web"]
        assert f"Approved by <@{CAROL}>, <@{BOB}> (2 of 2)" in blocks_text(await current(h, request))


async def test_an_approval_clicked_on_a_copy_drawn_before_an_edit_is_not_counted_for_the_edited_arguments(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Carol's client still shows the request for ``name: api``; Bob edits it to ``db`` (under a quorum, his
    approval: 1 of 2); Carol's click on what she sees completed the quorum for ``db``, which she never saw (a break-it
    pass). It is refused, she is told, the copy shows the current arguments, and her click on it counts. (Only under
    a quorum does a request wait on after an edit: one approval decides it, and a quorum offers no grant buttons.)"""
    rule = f"  - tool: restart_service\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n    edit: [name]\n"
    async with harness(fake_redis, settings=policy(tmp_path, rule)) as h:
        thread, request = await requested(h, "restart_service", {"name": "api"})
        seen_by_carol = dict(request)  # her client has not redrawn it
        form = await edit_form(h, request, user=BOB)
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "db"}}, user=BOB)
        await h.settle()
        await h.ws.click(seen_by_carol, "Approve", user=CAROL, as_seen=True)
        told = await h.ws.wait_for_ephemeral(user=CAROL, predicate=lambda m: "Not approved" in m["text"])
        assert f"the arguments were changed by <@{BOB}>" in told["text"], told["text"]
        await h.settle()
        assert approval_agent.RESTARTS == []
        now = await current(h, request)
        assert "*name*: db" in blocks_text(now) and f"1 of 2: approved by <@{BOB}>" in blocks_text(now)
        await h.ws.click(now, "Approve", user=CAROL)  # the copy as it is now: counted
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["db"]


async def test_an_edit_back_to_arguments_approved_before_does_not_bring_those_approvals_back(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Bob approves "api" (1 of 2); Carol edits it to "web" (the approvals so far are reset: hers is the first);
    Dave edits it back to "api": Bob's reset approval must not count again (before: the tally of "api" came back,
    and Dave's approval ran the call on it). Found by a break-it review."""
    from bot.fakeslack.state import Directory

    dave = "U_DAVE"
    directory = Directory.default()
    directory.add_user(dave, "dave")
    rule = f"  - tool: restart_service\n    approvers: [{BOB}, {CAROL}, {dave}]\n    required: 2\n    edit: [name]\n"
    async with harness(fake_redis, settings=policy(tmp_path, rule), directory=directory) as h:
        thread, request = await requested(h, "restart_service", {"name": "api"})
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        form = await edit_form(h, await current(h, request), user=CAROL)
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "web"}}, user=CAROL)
        await h.settle()
        assert f"1 of 2: approved by <@{CAROL}>" in blocks_text(await current(h, request))
        form = await edit_form(h, await current(h, request), user=dave)
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "api"}}, user=dave)
        await h.settle()
        shown = blocks_text(await current(h, request))
        assert approval_agent.RESTARTS == [] and f"1 of 2: approved by <@{dave}>" in shown, shown
        await h.ws.click(await current(h, request), "Approve", user=BOB)  # now Bob's counts, for these arguments
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


@pytest.mark.parametrize("replicas", ["50", "6"])
async def test_an_edit_that_would_move_the_call_under_another_rule_is_refused_in_the_form(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, replicas: str
) -> None:
    """Rule "small scales" (``replicas <= 5``) lets the requester approve and edit ``replicas``; "big scales" is
    Bob's. Alice edits 3 to 50 (or to 6, just past it): the form says the call would fall under "big scales" and
    nothing is saved or run; an edit within the rule (4) goes through. Before: it ran with 50, approved by Alice.
    Found by a break-it review."""
    rules = (
        "  - name: small scales\n    tool: scale_service\n    when: {replicas: {lte: 5}}\n"
        "    approvers: [requester]\n    edit: [replicas]\n"
        f"  - name: big scales\n    tool: scale_service\n    approvers: [{BOB}]\n"
    )
    async with harness(fake_redis, settings=policy(tmp_path, rules)) as h:
        thread, request = await requested(h, "scale_service", {"name": "api", "replicas": 3})
        form = await edit_form(h, request, user=ALICE)
        ack = await h.ws.submit_view(form, {"edit:replicas": {"edit_value": replicas}}, user=ALICE)
        assert ack.json["response_action"] == "errors"
        assert "falls under the approval policy's rule 'big scales'" in next(iter(ack.json["errors"].values()))
        await h.settle()
        assert approval_agent.SCALES == [] and has_controls(await current(h, request))
        ack = await h.ws.submit_view(form, {"edit:replicas": {"edit_value": "4"}}, user=ALICE)
        assert ack.status == 200 and not ack.json
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert [s["replicas"] for s in approval_agent.SCALES] == [4]


@pytest.mark.parametrize("edited", [False, True])
async def test_details_show_every_argument_when_a_long_one_is_cut(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, edited: bool
) -> None:
    """Under ``arguments: details-only`` Details is the only place the arguments show; a ~4,000-character ``name``
    pushed ``force: true`` out of it, with nothing saying anything was cut (a break-it pass). Every key stays in
    view, the long value cut saying so; an edited call's "model asked for" too."""
    rule = f"  - tool: restart_service\n    approvers: [{BOB}, {CAROL}]\n    arguments: details-only\n"
    rule += "    required: 2\n    edit: [name]\n" if edited else ""
    name = "api-" + "-".join(f"shard{i}" for i in range(500))
    async with harness(fake_redis, settings=policy(tmp_path, rule)) as h:
        _thread, request = await requested(h, "restart_service", {"name": name, "force": True}, then=None)
        if edited:
            form = await edit_form(h, request, user=BOB)
            await h.ws.submit_view(form, {"edit:name": {"edit_value": "db-" + name[:2000]}}, user=BOB)
            await h.settle()
        await h.ws.click(await current(h, request), "Details", user=CAROL)
        view = await h.ws.wait_for_view(user=CAROL, predicate=lambda v: "restart_service" in json.dumps(v["blocks"]))
        text = blocks_text(view)
        assert "*force*\\n```true```" in text and "(cut to fit)" in text, text[-400:]
        assert ("*The model asked for*" in text) is edited
        assert len(json.loads(text)[0]["text"]["text"]) <= 3000


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\r", "\u2028", "\u2029", "\x0b", "\x85"])
async def test_an_argument_value_stays_on_its_own_line_whatever_breaks_its_text(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, brk: str
) -> None:
    """A model-chosen value with line breaks drew lines of its own on the card: a false ``force: false`` and a
    "checked" note above the real ``force: true`` (a break-it pass). Each argument is one line, its breaks shown."""
    settings = policy(tmp_path, f"  - tool: restart_service\n    approvers: [{BOB}]\n")
    name = f"api{brk}*force*: false{brk}{brk}:white_check_mark: Checked by the safety linter." + brk * 30 + "."
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h, "restart_service", {"name": name, "force": True}, then=None)
        [args] = [b["text"]["text"] for b in request["blocks"] if b.get("block_id", "").endswith("|args")]
        lines = args.split("\n")
        assert len(lines) == 2 and lines[0].startswith("*name*: api \u21b5 ") and lines[1] == "*force*: true", args
