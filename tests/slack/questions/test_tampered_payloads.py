"""Malformed and tampered interaction payloads: never an answer, never a crash, the question stays open."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.fakeslack.sender import view_submission_payload
from bot.slack.render.blocks import ACT_SELECT, ACT_SUBMIT
from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    FREE,
    GENERAL,
    MULTI,
    action_payload,
    ask,
    button,
    current,
    has_controls,
    is_answer_form,
    resumed_requests,
    still_open,
    tool_results,
    tracebacks,
)


async def test_malformed_block_actions_never_answer_and_never_crash(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        good = button(q, 0)
        no_user = action_payload(h, q, good)
        del no_user["user"]
        unknown = action_payload(h, q, {**good, "action_id": "ask_option_zzz"})
        pipe_block = action_payload(
            h,
            q,
            {
                "type": "static_select",
                "action_id": ACT_SELECT,
                "block_id": good["block_id"].replace("|choices", "|x|choices"),
                "selected_option": {"value": "0", "text": {"type": "plain_text", "text": "api"}},
            },
        )
        bad_value = action_payload(h, q, {**good, "value": "garbage"})
        empty_value = action_payload(h, q, {**good, "value": ""})
        for payload in (no_user, unknown, pipe_block, bad_value, empty_value):
            ack = await h.ws.sender.send_interaction(payload)
            assert ack.status in (200, 404), ack.status  # Bolt answers 404 to what no listener takes
        assert await still_open(h, q)
        assert resumed_requests(h.model) == 0
        assert tracebacks(caplog) == []
        # and the question still works afterwards
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, predicate=lambda m: m["text"] == "Done.")


async def test_tampered_option_index_is_refused_and_question_stays_open(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        good = button(q, 0)
        run, call, _index = good["value"].split("|")
        for index in ("2", "99999999999999999999", "-1"):
            await h.ws.sender.send_interaction(action_payload(h, q, {**good, "value": f"{run}|{call}|{index}"}))
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert notes.count("I couldn't take that answer: that option is not part of this question") == 2, notes
        assert await still_open(h, q)
        assert resumed_requests(h.model) == 0
        assert tracebacks(caplog) == []


async def test_unicode_digit_in_button_value_or_checkbox_value_is_refused_cleanly(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        good = button(q, 0)
        run, call, _index = good["value"].split("|")
        await h.ws.sender.send_interaction(action_payload(h, q, {**good, "value": f"{run}|{call}|²"}))
        h.model.reset()
        _thread2, multi = await ask(h, MULTI, call_id="m1")
        picks = next(b["block_id"] for b in multi["blocks"] if b["block_id"].endswith("|picks"))
        state = {picks: {"ask_checks": {"type": "checkboxes", "selected_options": [{"value": "²"}]}}}
        await h.ws.sender.send_interaction(action_payload(h, multi, button(multi, 0), state_values=state))
        await h.settle()
        assert await still_open(h, q) and await still_open(h, multi)
        assert tracebacks(caplog) == []


async def test_button_value_pointing_to_another_users_run_is_refused(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        _t1, q_alice = await ask(h, user=ALICE, then="Alice done.")
        h.model.reset()  # drop Alice's queued final reply
        _t2, q_bob = await ask(h, user=BOB, then="Bob done.", call_id="c2")
        # Alice forges a click on her own message whose value names Bob's question
        forged = {**button(q_alice, 1), "value": button(q_bob, 1)["value"]}
        await h.ws.sender.send_interaction(action_payload(h, q_alice, forged, user=ALICE))
        await h.settle()
        note = h.ws.ephemerals(user=ALICE)[-1]["text"]
        assert "doesn't belong" in note or "Only <@U_BOB>" in note, note
        assert await still_open(h, q_bob) and await still_open(h, q_alice)
        assert resumed_requests(h.model) == 0


async def test_click_from_ephemeral_container_without_message_does_not_crash(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Via ephemeral.")
        payload = action_payload(h, q, button(q, 1), is_ephemeral=True)
        assert "message" not in payload
        ack = await h.ws.sender.send_interaction(payload)
        assert ack.status == 200
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Via ephemeral."
        )
        await h.settle()
        assert tool_results(h.model)[-1]["answer"] == "web"
        assert tracebacks(caplog) == []


async def test_submit_with_values_not_offered_is_refused(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, MULTI, call_id="m1")
        submit = button(q, 0)
        assert submit["action_id"] == ACT_SUBMIT
        picks = next(b["block_id"] for b in q["blocks"] if b["block_id"].endswith("|picks"))
        for values in (["0", "7"], ["x"], ["-1"]):
            state = {picks: {"ask_checks": {"type": "checkboxes", "selected_options": [{"value": v} for v in values]}}}
            await h.ws.sender.send_interaction(action_payload(h, q, submit, state_values=state))
        # a picks block of another question in the state is not read
        ticked = {"ask_checks": {"type": "checkboxes", "selected_options": [{"value": "0"}]}}
        other = {picks.replace("|m1|", "|zz|"): ticked}
        await h.ws.sender.send_interaction(action_payload(h, q, submit, state_values=other))
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert len([n for n in notes if n.startswith("I couldn't take that answer")]) == 3, notes
        assert notes.count("Select at least one option, then Submit.") == 1, notes  # replies may arrive in any order
        assert await still_open(h, q)
        assert resumed_requests(h.model) == 0
        assert tracebacks(caplog) == []


async def test_view_submission_with_garbage_private_metadata_does_nothing(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "hello"}}}
        for meta in ("not json", "[1, 2]", '"str"', "{}", '{"r": 5, "c": null}', '{"r": "run_nope", "c": "c1"}'):
            payload = view_submission_payload(
                directory=h.ws.state.directory,
                user=ALICE,
                view={**view, "private_metadata": meta},
                state_values=values,
                trigger_id=h.ws.state.mint_trigger(ALICE),
            )
            ack = await h.ws.sender.send_interaction(payload)
            assert ack.status == 200
        await h.settle()
        assert await still_open(h, q)
        assert resumed_requests(h.model) == 0
        assert tracebacks(caplog) == []


async def test_modal_submitted_twice_resumes_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Once.")
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)

        def submission(text: str) -> dict[str, Any]:
            return view_submission_payload(
                directory=h.ws.state.directory,
                user=ALICE,
                view=view,
                state_values={MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": text}}},
                trigger_id=h.ws.state.mint_trigger(ALICE),
            )

        acks = await asyncio.gather(*(h.ws.sender.send_interaction(submission(f"goal {i}")) for i in range(3)))
        assert all(a.status == 200 for a in acks)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Once.")
        await h.settle()
        assert resumed_requests(h.model) == 1
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        told += [str(a.json["errors"]) for a in acks if isinstance(a.json, dict) and a.json.get("errors")]
        assert sum("You had already answered *goal" in t for t in told) == 2, told  # her own: not "answered by her"


_ODD_ACTIONS = {
    "actions-not-objects": lambda p, good: p.__setitem__("actions", [1]),
    "actions-empty": lambda p, good: p.__setitem__("actions", []),
    "actions-a-string": lambda p, good: p.__setitem__("actions", "x"),
    "action_id-a-number": lambda p, good: p["actions"][0].__setitem__("action_id", 5),
    "user-a-string": lambda p, good: p.__setitem__("user", "U_ALICE"),
    "selected_option-a-string": lambda p, good: p.__setitem__(
        "actions",
        [{"type": "static_select", "action_id": "ask_select", "block_id": good["block_id"], "selected_option": "0"}],
    ),
}


@pytest.mark.parametrize("mutation", list(_ODD_ACTIONS), ids=list(_ODD_ACTIONS))
async def test_odd_block_actions_get_no_500_and_no_traceback(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, mutation: str
) -> None:
    """README (Security): bodies that parse but are not what Slack sends are refused with 400 and "one short,
    rate-limited log line, never a traceback"; listeners.py: "Every ack function acks whatever happens ... never a
    404/500 to Slack". A signed block_actions whose fields have the wrong type must get a 200/400 and log no
    traceback; it gets an HTTP 500 with Bolt's "Failed to run a middleware function" traceback (or, for a select
    whose selected_option is a string, a "listener on_click failed" traceback and no word to the person)."""
    caplog.set_level(logging.INFO)
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        good = button(q, 0)
        payload = action_payload(h, q, dict(good))
        _ODD_ACTIONS[mutation](payload, good)
        ack = await h.ws.sender.send_interaction(payload)
        await h.settle()
        assert ack.status in (200, 400, 404), ack.status
        assert tracebacks(caplog) == []
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


def _set_state(p: dict[str, Any], state: Any) -> None:
    p["view"]["state"] = state


_ODD_VIEWS = {
    "block-a-string": lambda p: p["view"]["state"]["values"].__setitem__(MODAL_INPUT_BLOCK, "x"),
    "element-a-string": lambda p: p["view"]["state"]["values"][MODAL_INPUT_BLOCK].__setitem__(ACT_TEXT, "x"),
    "values-a-list": lambda p: p["view"]["state"].__setitem__("values", ["x"]),
    "state-a-string": lambda p: _set_state(p, "x"),
    "metadata-a-number": lambda p: p["view"].__setitem__("private_metadata", 5),
    "metadata-an-object": lambda p: p["view"].__setitem__("private_metadata", {"r": 1}),
    "callback_id-a-list": lambda p: p["view"].__setitem__("callback_id", ["x"]),
}


@pytest.mark.parametrize("mutation", list(_ODD_VIEWS), ids=list(_ODD_VIEWS))
async def test_odd_view_submissions_get_no_500_and_no_traceback(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, mutation: str
) -> None:
    """docs/security.md: "Signed bodies whose known fields have the wrong types are refused (400)". A signed
    view_submission of the Answer modal whose state or metadata has the wrong type got an HTTP 500 and a traceback
    ('str' object has no attribute 'get'; the JSON object must be str, not int): now 400, nothing logged but one
    line, the question still open."""
    caplog.set_level(logging.INFO)
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "my answer"}}}
        payload = view_submission_payload(
            directory=h.ws.state.directory,
            user=ALICE,
            view=form,
            state_values=values,
            trigger_id=h.ws.state.mint_trigger(ALICE),
        )
        _ODD_VIEWS[mutation](payload)
        ack = await h.ws.sender.send_interaction(payload)
        await h.settle()
        assert ack.status in (200, 400), ack.status
        assert tracebacks(caplog) == []
        assert await still_open(h, q) and resumed_requests(h.model) == 0
