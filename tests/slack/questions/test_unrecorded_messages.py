"""A question whose message could not be recorded (a store blip just after the post) still closes on the message
people act on: answered, withdrawn, decided (approvals) or found expired by a late click; and a click whose
``container`` names a message outside the run's thread never makes the bot rewrite that message. Found by break
tests of the round-trip change (db13520); the blip is simulated at the batch that records a shown question."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from bot.errors import StoreUnavailable
from bot.slack.questions import records as question_records
from bot.slack.questions.answer_modal import AnswerModal
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    SINGLE,
    action_payload,
    ask,
    blocks_text,
    button,
    current,
    has_controls,
    is_answer_form,
    past_deadline,
    text_is,
    thread_run_id,
)
from tests.mcp_server.test_mcp_questions import ask as mcp_ask
from tests.mcp_server.test_mcp_questions import mcp_settings, ran


def blip_recording_once(monkeypatch: pytest.MonkeyPatch, nth: int = 1) -> list[str]:
    """The ``nth`` batch that records a shown question fails (its post worked), and so does every later one: its
    records are retried until Redis answers (``QuestionRecords``), so a message never recorded is one whose
    process died before that (here: its retries fail too). Returns what failed, once it did."""
    seen: list[str] = []
    failed: list[str] = []

    class Blip(question_records.Batch):
        async def run(self, what: str) -> None:
            if what.startswith("recording"):
                seen.append(what)
                if len(seen) >= nth:
                    failed.append(what)
                    raise StoreUnavailable("Redis error while recording a question: ConnectionError")
            await super().run(what)

    monkeypatch.setattr(question_records, "Batch", Blip)
    return failed


async def elsewhere(h: Any, client: aioredis.Redis) -> None:
    """The process that posted the question died with its records unwritten: what follows goes to another one."""
    h.route_to(await h.start_process(client))


async def test_a_question_whose_message_could_not_be_recorded_still_shows_its_answered_state(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README (Answering): "The question message switches at once to its answered state (who answered what, no
    controls)". If Redis blips just when the bot records where it posted the question (the post itself worked), the
    question is still shown and answerable; once answered by its button, the message switches to its answered
    state. It kept its buttons forever (nothing recorded which message to update), inviting more clicks."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        assert failed
        await elsewhere(h, fake_redis)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        after = await current(h, q)
        assert not has_controls(after), blocks_text(after)


@pytest.fixture
def fresh_service() -> Any:
    approval_agent.RESTARTS.clear()
    approval_agent.GATE.clear()
    yield
    approval_agent.GATE.clear()


async def test_an_approval_request_whose_message_could_not_be_recorded_shows_its_decision(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, fresh_service: None
) -> None:
    """Approved by its button, the request's message says who approved and how the call went, without controls;
    it kept Approve / Decline (the decision closed only recorded messages)."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis, settings={"agent": "bot.testing.approval_agent:build"}) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Done."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert failed
        await elsewhere(h, fake_redis)
        await h.ws.click(q, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        after = await current(h, q)
        assert approval_agent.RESTARTS == ["api"]
        assert not has_controls(after), blocks_text(after)
        assert "Approved by" in blocks_text(after) and "ran in" in blocks_text(after)


async def test_a_late_click_on_an_unrecorded_question_closes_the_message_clicked_as_expired(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its deadline a click is told "expired" and the question closes as expired; the clicked message kept
    its buttons (each further click said "expired" again)."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        assert failed
        await elsewhere(h, fake_redis)
        await past_deadline(h, thread)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_ephemeral(user=ALICE)
        await h.settle()
        after = await current(h, q)
        assert not has_controls(after), blocks_text(after)


@pytest.mark.parametrize("thread", ["dropped", "the first run's"])
async def test_a_forged_click_on_an_unrecorded_question_rewrites_no_message_of_another_run(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, thread: str
) -> None:
    """With a leaked signing secret, a click carrying the first question's button but naming Alice's other question
    (another thread, another run) as its container, its thread_ts dropped or set to the first run's thread: nothing
    may be written to a message the run does not own. The answer is the first question's (its button says so); the
    other run's message was rewritten with that outcome, its buttons gone while its run still waits (the payload's
    own thread_ts placed it; now Slack's copy of the message must show the question)."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis) as h:
        t1, first = await ask(h, then="First done.")
        assert failed
        await elsewhere(h, fake_redis)
        h.model.reset()
        t2, other = await ask(h, then="Other done.", call_id="c2")
        h.model.script(Reply(text="First done."))
        payload = action_payload(h, other, button(first, 1), user=ALICE)
        for part in (payload["message"], payload["container"]):
            if thread == "dropped":
                part.pop("thread_ts", None)
            else:
                part["thread_ts"] = t1
        await h.ws.sender.send_interaction(payload)
        await h.settle()
        pending = (await h.bot.agent.get_run(await thread_run_id(h, t2))).pending
        assert pending is not None and pending.tool_call_id == "c2"  # the other run still waits...
        assert has_controls(await current(h, other))  # ...so its message keeps its buttons
        assert [c for c in h.ws.calls("chat.update") if c.params.get("ts") == other["ts"]] == []


async def test_a_forged_click_naming_an_earlier_question_of_the_same_thread_leaves_that_message(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same run, same thread: the first question was answered ("api"), the run then asked a second one. A click
    with the second question's button whose container names the FIRST question's message: that message is the
    first question's record (answered "api") and must keep saying so. The second question's message was not
    recorded (a blip), so nothing tells the click's container from a real one."""
    failed = blip_recording_once(monkeypatch, nth=2)
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]),
            Reply(tool_calls=[tool_call("ask_user", {**SINGLE, "question": "And which region?"}, id="c2")]),
            Reply(text="All done."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q1, button(q1, 0)["text"]["text"], user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        await h.settle()
        assert failed
        await elsewhere(h, fake_redis)
        before = await current(h, q1)
        assert not has_controls(before)
        payload = action_payload(h, q1, button(q2, 1), user=ALICE)  # container: q1; button: q2's
        await h.ws.sender.send_interaction(payload)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("All done."))
        await h.settle()
        after = await current(h, q1)
        assert [c for c in h.ws.calls("chat.update") if c.params.get("ts") == q1["ts"]][1:] == [], "q1 rewritten"
        assert blocks_text(after) == blocks_text(before)


async def test_a_forged_approve_naming_the_bots_earlier_reply_in_the_thread_leaves_that_reply(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, fresh_service: None
) -> None:
    """Approvals too: the bot replied "Hello." in the thread, then (continued there) asked to run a tool; the
    request's message was not recorded (a blip). An Approve click whose container names the bot's "Hello." reply
    (same channel, same thread: ``message_in`` takes it): the reply must stay "Hello."; it becomes the approval's
    outcome ("Approved by ... ran in")."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis, settings={"agent": "bot.testing.approval_agent:build"}) as h:
        h.model.script(Reply(text="Hello."))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        thread = d.message["ts"]
        hello = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Hello."))
        await h.settle()
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Done."))
        await h.ws.mention(ALICE, GENERAL, "restart api", thread_ts=thread)
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert failed
        await elsewhere(h, fake_redis)
        approve = next(
            e for b in q["blocks"] if b["type"] == "actions" for e in b["elements"] if e["text"]["text"] == "Approve"
        )
        await h.ws.sender.send_interaction(action_payload(h, hello, approve, user=ALICE))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        after = await current(h, hello)
        assert approval_agent.RESTARTS == ["api"]
        assert [c for c in h.ws.calls("chat.update") if c.params.get("ts") == hello["ts"]] == [], blocks_text(after)
        assert after["text"] == "Hello."


THREAD_REPLY_GAP = pytest.mark.xfail(
    strict=True,
    reason="known gap: an answer typed as a thread reply names no message (it comes from the thread), so a question "
    "message that was never recorded keeps its buttons",
)


@pytest.mark.parametrize("how", ["answer form", pytest.param("thread reply", marks=THREAD_REPLY_GAP)])
async def test_a_free_text_question_whose_message_could_not_be_recorded_shows_its_answered_state(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Answered through its Answer form, the question's message closes too: the form carries, signed, the message
    it was opened from (the submission comes from the modal, which names no message)."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Goal noted.")
        assert failed
        await elsewhere(h, fake_redis)
        if how == "answer form":
            await h.ws.click(q, "Answer", user=ALICE)
            view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
            await h.ws.submit_view(view, {"answer_input": {"answer_text": "Ship v2"}}, user=ALICE)
        else:
            await h.ws.reply_in_thread(ALICE, GENERAL, thread, "Ship v2")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Goal noted."))
        after = await current(h, q)
        assert not has_controls(after), blocks_text(after)


def test_the_forms_signed_metadata_carries_its_message_and_forms_opened_before_still_verify() -> None:
    """The message a form was opened from is signed with the rest (a submission can't name another message to
    close); a form opened before it was carried (no ``m``) still verifies, as it was signed."""
    forms = AnswerModal(cast(Any, None), key=b"k" * 32)
    meta = forms.metadata(run_id="run_1", call="c1", user="U1", view_id="V1", message_ts="100.2")
    assert meta["m"] == "100.2" and forms.opened_by_us(meta, user="U1", view_id="V1")
    assert not forms.opened_by_us({**meta, "m": "100.3"}, user="U1", view_id="V1")
    assert not forms.opened_by_us({k: v for k, v in meta.items() if k != "m"}, user="U1", view_id="V1")
    old = {"r": "run_1", "c": "c1", "u": "U1", "v": "V1", "a": ""}
    digest = hmac.new(b"k" * 32, "|".join(old.values()).encode(), hashlib.sha256).hexdigest()[:32]
    old_meta = {**old, "s": digest}  # signed as before the message was carried
    assert forms.metadata(run_id="run_1", call="c1", user="U1", view_id="V1") == old_meta
    assert forms.opened_by_us(old_meta, user="U1", view_id="V1")


@pytest.mark.parametrize("error", ["internal_error", "service_unavailable"])
async def test_a_transient_failure_reading_back_the_clicked_message_is_retried(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    """The question's message was not recorded (a blip); Alice answers with its button. Slack answers the first
    conversations.replies read-back with a transient error (HTTP 200 ``internal_error`` or ``service_unavailable``,
    as chat.postMessage's are retried for). The message kept its live buttons: the read-back was not retried, and
    its refusal was taken as 'this message does not show the question'."""
    failed = blip_recording_once(monkeypatch)
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        assert failed
        await elsewhere(h, fake_redis)
        h.ws.fake.fail_next("conversations.replies", error)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        after = await current(h, q)
        assert [c.error for c in h.ws.calls("conversations.replies")][:1] == [error]
        assert not has_controls(after), blocks_text(after)


@pytest.mark.xfail(
    strict=True,
    reason="known gap (placement.misplaced): a call with a recorded message of an earlier asking refuses a click on "
    "an unrecorded message of its current asking as coming from elsewhere",
)
async def test_an_mcp_servers_second_question_whose_message_could_not_be_recorded_takes_a_real_click(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """An MCP server's tool asks twice in one call (tests/agent/mcp/servers/asking.py ``two_questions``); the second
    question's message could not be recorded (a blip), the first's was. Alice clicks Yes on the second question's
    own message (a real click, its own container). It must be taken as for any unrecorded question (see
    test_unrecorded_messages.py), and the message close. The click is refused as coming from elsewhere: the call
    has a recorded message (the FIRST asking's), so an unrecorded one is taken for a stranger."""
    failed = blip_recording_once(monkeypatch, nth=2)
    async with harness(fake_redis, settings=mcp_settings(tmp_path)) as h:
        thread, q1 = await mcp_ask(h, "two_questions", {}, then="Both done.")
        await h.ws.click(q1, "Decline", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and "Second" in m["text"]
        )
        await h.settle()
        assert failed
        await h.ws.click(q2, "Yes", user=ALICE)
        await h.settle()
        told = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert told == [], told
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both done."), timeout=5)
        assert ran(tmp_path)[-1] == 'two_questions: first: decline | second: accept {"second":true}'
        assert not has_controls(await current(h, q2))
