"""Forged requests, signed with the real signing secret (a leaked secret, a compromised proxy): nothing is written
to a message the run does not own, nothing is echoed from the payload, a click or modal that is not the bot's own
for that person and question is refused, and odd ids and indexes are refused with a message."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.fakeslack.sender import view_submission_payload
from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    FREE,
    GENERAL,
    RANDOM,
    action_payload,
    ask,
    blocks_text,
    button,
    current,
    has_controls,
    is_answer_form,
    resumed_requests,
)

EVIL_BLOCKS = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "<!channel> log in at <https://evil.example|slack.com>"}}
]


async def test_a_click_on_a_run_that_does_not_exist_writes_nothing_to_the_message_it_points_at(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        _thread, victim = await ask(h, user=BOB)
        action = {**button(victim, 0), "value": "run_doesnotexist0000000000|c1|0"}
        payload = action_payload(h, victim, action, user=ALICE)
        payload["message"]["blocks"] = EVIL_BLOCKS  # what the forger wants the bot to echo
        await h.ws.sender.send_interaction(payload)
        await h.settle()
        assert h.ws.calls("chat.update") == []
        after = await current(h, victim)
        assert has_controls(after) and "evil" not in blocks_text(after)
        assert "expired" in h.ws.ephemerals(user=ALICE)[-1]["text"]


async def test_a_click_whose_container_is_another_of_her_questions_is_refused_and_overwrites_nothing(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        _t1, first = await ask(h, then="First done.")
        h.model.reset()
        _t2, other = await ask(h, then="Other done.", call_id="c2")
        action = button(first, 1)  # the first question's own button...
        payload = action_payload(h, other, action, user=ALICE)  # ...sent from the other question's message
        payload["message"].pop("thread_ts", None)
        payload["container"].pop("thread_ts", None)
        await h.ws.sender.send_interaction(payload)
        await h.settle()
        assert "doesn't belong" in h.ws.ephemerals(user=ALICE)[-1]["text"]
        assert has_controls(await current(h, first)) and has_controls(await current(h, other))
        assert resumed_requests(h.model) == 0 and h.ws.calls("chat.update") == []


@pytest.mark.parametrize("forged_user", ["> <!channel> <https://evil|login", "U_ALICE>", "", "u_alice", "U ALICE"])
async def test_a_user_id_not_shaped_like_slacks_is_refused_before_use(
    fake_redis: aioredis.Redis, harness: Any, forged_user: str
) -> None:
    async with harness(fake_redis, answerers="channel") as h:
        _thread, q = await ask(h)
        payload = action_payload(h, q, button(q, 0), user=ALICE)
        payload["user"]["id"] = forged_user
        ack = await h.ws.sender.send_interaction(payload)
        assert ack.status == 200
        await h.settle()
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0
        assert not [c for c in h.ws.calls("chat.update")]
        assert "evil" not in json.dumps([c.params for c in h.ws.calls()])


@pytest.mark.parametrize("index", ["-1", "1e3", "\u0661", "0x1", " 1", "1 ", "+1", "\u0663\u0660"])
async def test_malformed_option_indexes_are_refused_with_a_message(
    fake_redis: aioredis.Redis, harness: Any, index: str
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        good = button(q, 0)
        run, call, _ = good["value"].split("|")
        await h.ws.sender.send_interaction(action_payload(h, q, {**good, "value": f"{run}|{call}|{index}"}))
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "doesn't belong" in note["text"] or "not part of this question" in note["text"]
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


async def test_a_modal_submission_the_bot_never_opened_is_refused_in_channel_mode(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Channel mode lets anyone in the run's channel answer, but only through a modal the bot opened for that
    person and that question: forged metadata, another person's form, or a form of another question are refused."""
    async with harness(fake_redis, answerers="channel") as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        meta = json.loads(form["private_metadata"])
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "forged"}}}

        async def submit(view: dict[str, Any], user: str) -> Any:
            payload = view_submission_payload(
                directory=h.ws.state.directory,
                user=user,
                view=view,
                state_values=values,
                trigger_id=h.ws.state.mint_trigger(user),
            )
            return await h.ws.sender.send_interaction(payload)

        bare = {"r": meta["r"], "c": meta["c"]}  # what a forger can read off the question's buttons
        forgeries = [
            ({**form, "private_metadata": json.dumps(bare)}, ALICE),
            ({**form, "id": "V_OTHER"}, ALICE),  # the token is for the view the bot opened
            (copy.deepcopy(form), BOB),  # Alice's form submitted as Bob
        ]
        for view, user in forgeries:
            ack = await submit(view, user)
            assert isinstance(ack.json, dict) and ack.json.get("response_action") == "errors", ack.body
        await h.settle()
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0
        ok = await submit(form, ALICE)
        assert ok.status == 200 and not ok.body
        await h.ws.wait_for_message(channel=GENERAL, predicate=lambda m: m["ts"] == q["ts"] and not has_controls(m))


async def test_answer_from_another_channel_is_refused(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        posted = h.ws.add_user_message(ALICE, RANDOM, "copied")
        h.ws.state.message(RANDOM, posted["ts"])["blocks"] = q["blocks"]  # the same buttons, elsewhere
        copy = h.ws.messages(RANDOM)[-1]
        await h.ws.click(copy, "web", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "doesn't belong" in note["text"]
        await h.settle()
        assert resumed_requests(h.model) == 0
