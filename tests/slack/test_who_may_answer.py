"""Who may answer a question or decide an approval, decided in one place (bot.slack.questions.permissions) for every
surface: a click (in the thread, on an escalated copy, in a DM), App Home, the answer and decline modals, a typed
reply and a follow-up mention in the thread, an outside agent's (MCP) request. Escalation widens who is reminded,
never who may decide: an escalated approval stays its approvers'; an escalated question is its escalation targets'
too only with ASK_ESCALATE_ANSWERS=true. And one person can't make the bot DM an escalation target without limit:
their waiting questions are bounded, and escalations to one target falling due together are one message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.asking import APPROVAL_TOOL
from bot.agent.state import utcnow
from bot.fakeslack.home_tab import click_home, home_view
from bot.fakeslack.state import TEAM_ID
from bot.mcp_server.asker import Asker, outcome_of
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS
from bot.slack.questions.notices import NOT_OPEN
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    CAROL,
    FREE,
    GENERAL,
    RANDOM,
    SINGLE,
    action_payload,
    ask,
    blocks_text,
    button,
    current,
    has_controls,
    open_homes,
    resumed_requests,
    text_is,
)

AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    approval_agent.GATE.clear()
    yield
    approval_agent.GATE.clear()


async def escalate(h: Any, *, after: float = 1801) -> None:
    """Carry out what is due ``after`` seconds from now (the escalations), then the escalation messages they queued
    (due ``COALESCE_SECONDS`` later), and every Home refresh."""
    assert h.bot.scheduler is not None
    for extra in (0.0, COALESCE_SECONDS + 1):
        await h.settle()
        await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=after + extra))
        await h.settle()


async def requested(h: Any, *, then: str = "Restarted api.") -> tuple[str, dict[str, Any]]:
    """Alice asks for a restart; returns (thread_ts, the approval request)."""
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, "restart api")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def asked(h: Any, args: dict[str, Any] = SINGLE, *, then: str = "Thanks.") -> tuple[str, dict[str, Any]]:
    """Alice's run asks ``args``; returns (thread_ts, the question)."""
    h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="q1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, "summarize")
    q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], q


def escalated_in(h: Any, channel: str) -> list[dict[str, Any]]:
    return [m for m in h.ws.messages(channel) if "Escalated from" in blocks_text(m)]


# --- an escalated approval is decided by its approvers only -----------------------------------------------------


async def test_an_approval_escalated_to_a_channel_is_decided_by_its_approvers_only(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {**AGENT, "approvers": CAROL, "ask_escalate_after": "30m", "ask_escalate_to": RANDOM}
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        await h.ws.click(copy, "Approve", user=BOB)  # a member of the escalation channel, not an approver
        await h.settle()
        assert approval_agent.RESTARTS == []  # the tool did not run
        refused = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only the configured approvers" in refused["text"]
        assert f"Waiting for <@{CAROL}> to approve or decline" in blocks_text(copy)  # not "you may decide too"
        await h.ws.click(copy, "Decline", user=BOB)
        await h.ws.wait_for_view(user=BOB, predicate=lambda v: "configured approvers" in json.dumps(v["blocks"]))
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))
        await h.ws.click(copy, "Approve", user=CAROL)  # an approver may decide on the escalated copy
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Restarted api."))
        assert approval_agent.RESTARTS == ["api"]


async def test_an_approval_escalated_to_a_person_is_not_theirs_to_decide_by_dm_or_app_home(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {**AGENT, "approvers": CAROL, "ask_escalate_after": "30m", "ask_escalate_to": BOB}
    async with harness(fake_redis, settings=settings) as h:
        await open_homes(h, BOB, CAROL)
        _thread, request = await requested(h)
        await escalate(h)
        [dm] = escalated_in(h, "D_BOB")
        await h.ws.click(dm, "Approve", user=BOB)
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "configured approvers" in m["text"])
        bob = home_view(h.ws, BOB)
        assert bob is None or "restart_service" not in blocks_text(bob)  # not put in the inbox of who can't decide
        await click_home(h.ws, BOB, "Approve", view_of=CAROL)  # a forged Home click on the approver's copy
        await h.ws.wait_for_message(channel="D_BOB", predicate=lambda m: "configured approvers" in m["text"])
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))


async def test_with_escalated_answers_on_an_approval_is_still_its_approvers_only(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {
        **AGENT,
        "approvers": CAROL,
        "ask_escalate_after": "30m",
        "ask_escalate_to": RANDOM,
        "ask_escalate_answers": True,
    }
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        await h.ws.click(copy, "Approve", user=BOB)
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "configured approvers" in m["text"])
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))


async def test_an_outside_agents_approval_request_escalated_to_a_channel_is_decided_by_its_approvers_only(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The MCP server's request_approval, asked through the same Asker it uses: the escalated copy's Approve
    clicked by a non-approver is refused, and the asking agent is not told it was approved."""
    settings = {"approvers": CAROL, "ask_escalate_after": "30m", "ask_escalate_to": RANDOM}
    async with harness(fake_redis, settings=settings) as h:
        assert h.bot.threads is not None
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        request = await asker.ask({"action": "Drop the cache"}, channel=GENERAL, user=ALICE, tool_id=APPROVAL_TOOL)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        await h.ws.click(copy, "Approve", user=BOB)
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "configured approvers" in m["text"])
        await h.settle()
        state = await h.bot.agent.get_run(request.run_id)
        assert state.status == "suspended"
        await h.ws.click(copy, "Approve", user=CAROL)
        outcome = await asyncio.wait_for(asker.wait(request), 10)
        assert outcome == {"status": "approved", "approved_by": CAROL}
        assert outcome_of(await h.bot.agent.get_run(request.run_id))["approved_by"] == CAROL


# --- an escalated question: reminded by default, answerable with ASK_ESCALATE_ANSWERS=true ------------------------


async def test_by_default_an_escalated_question_only_reminds_its_targets(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": RANDOM}
    async with harness(fake_redis, settings=settings) as h:
        thread, q = await asked(h)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        forged = {**copy, "blocks": q["blocks"]}  # the question's buttons clicked on the escalated message
        await h.ws.click(forged, "web", user=BOB, as_seen=True)
        refused = await h.ws.wait_for_ephemeral(user=BOB)
        assert f"Only <@{ALICE}> can answer" in refused["text"]
        assert not has_controls(copy) and f"Waiting for <@{ALICE}>" in blocks_text(copy)  # a reminder
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "web")
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "wasn't taken as an answer" in m["text"])
        await h.settle()
        assert has_controls(await current(h, q))


async def test_a_channel_wide_question_escalated_elsewhere_is_not_answered_from_there(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """ASK_ANSWERERS=channel means anyone in the run's channel, not anyone who sees an escalated copy."""
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": RANDOM}
    async with harness(fake_redis, answerers="channel", settings=settings) as h:
        _thread, q = await asked(h)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        await h.ws.click({**copy, "blocks": q["blocks"]}, "web", user=BOB, as_seen=True)
        refused = await h.ws.wait_for_ephemeral(user=BOB)
        assert f"Only people in <#{GENERAL}> can answer" in refused["text"]
        await h.settle()
        assert has_controls(await current(h, q))


async def test_with_escalated_answers_a_target_answers_by_thread_reply_modal_and_app_home_as_by_click(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The same person, the same rule on every surface: the escalation target Bob may click, so he may also reply
    in the thread, answer in the modal, and on App Home (three questions, each escalated on its own)."""
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB, "ask_escalate_answers": True}
    async with harness(fake_redis, settings=settings) as h:
        await open_homes(h, BOB)
        thread, q = await asked(h, then="Bob said web.")
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "api")  # not escalated yet: refused
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "wasn't taken as an answer" in m["text"])
        await escalate(h)
        [dm] = escalated_in(h, "D_BOB")
        assert has_controls(dm)
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "web")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Bob said web."))
        assert f"<@{BOB}> answered: *web*" in blocks_text(await current(h, q))

        thread, q = await asked(h, FREE, then="Noted.")  # the modal
        await escalate(h, after=1801 + 3 * COALESCE_SECONDS)
        dm = escalated_in(h, "D_BOB")[-1]
        await h.ws.click(dm, "Answer", user=BOB)
        form = await h.ws.wait_for_view(user=BOB, predicate=lambda v: v.get("callback_id") == "ask_answer_modal")
        ack = await h.ws.submit_view(form, {"Answer": "ship it"}, user=BOB)
        assert ack.status == 200 and not ack.body
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Noted."))
        assert f"<@{BOB}> answered" in blocks_text(await current(h, q))

        thread, q = await asked(h, then="Answered from Home.")  # App Home
        await escalate(h, after=1801 + 6 * COALESCE_SECONDS)
        bob = home_view(h.ws, BOB)
        assert bob is not None and "Which repo?" in blocks_text(bob)
        await click_home(h.ws, BOB, "api")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Answered from Home."))
        assert f"<@{BOB}> answered: *api*" in blocks_text(await current(h, q))


async def test_with_escalated_answers_a_target_answers_by_mention_in_the_thread(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB, "ask_escalate_answers": True}
    async with harness(fake_redis, settings=settings) as h:
        thread, q = await asked(h, then="Bob said api.")
        await escalate(h)
        await h.ws.mention(BOB, GENERAL, "api", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Bob said api."))
        assert f"<@{BOB}> answered: *api*" in blocks_text(await current(h, q))


async def test_without_escalated_answers_the_modal_and_app_home_refuse_the_target(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB}
    async with harness(fake_redis, settings=settings) as h:
        await open_homes(h, BOB, ALICE)
        _thread, q = await asked(h, FREE)
        await escalate(h)
        bob = home_view(h.ws, BOB)
        assert bob is None or "What is the goal?" not in blocks_text(bob)  # reminded, not given it to answer
        alice = home_view(h.ws, ALICE)
        assert alice is not None and "What is the goal?" in blocks_text(alice)
        await click_home(h.ws, BOB, "Answer", view_of=ALICE)  # forged: the requester's Home, clicked by Bob
        await h.ws.wait_for_view(user=BOB, predicate=lambda v: f"Only <@{ALICE}>" in json.dumps(v["blocks"]))
        await h.settle()
        assert has_controls(await current(h, q))


# --- one person can't make the bot DM a target without limit ----------------------------------------------------


async def test_fifteen_mentions_make_a_bounded_number_of_questions_and_one_escalation_dm(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB, "max_waiting_per_person": 5}
    async with harness(fake_redis, settings=settings) as h:
        h.model.script(*(Reply(tool_calls=[tool_call("ask_user", SINGLE, id=f"q{i}")]) for i in range(15)))
        threads = []
        for i in range(15):
            d = await h.ws.mention(ALICE, GENERAL, f"question {i}")
            threads.append(d.message["ts"])
            await h.settle()
        asked_in = [t for t in threads if any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=t))]
        assert len(asked_in) == 5 and asked_in == threads[:5]
        refusals = [m for m in h.ws.ephemerals(user=ALICE) if "already waiting for an answer" in m["text"]]
        assert len(refusals) == 10  # each told plainly, nothing started
        assert len(h.model.requests) == 5
        await escalate(h)
        dms = [m for m in h.ws.messages("D_BOB")]
        assert len(dms) == 1  # one message listing them, not one DM per question
        assert blocks_text(dms[0]).count("Which repo?") == 5
        await escalate(h, after=3600)
        assert len(h.ws.messages("D_BOB")) == 1  # once
        first = next(m for m in h.ws.messages(GENERAL, thread_ts=threads[0]) if has_controls(m))
        h.model.reset()  # the ten replies scripted for the refused requests were never asked for
        h.model.script(Reply(text="Fine."), Reply(tool_calls=[tool_call("ask_user", FREE, id="q15")]))
        await h.ws.click(first, "api", user=ALICE)  # one answered: room for one more
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=threads[0], predicate=text_is("Fine."))
        d = await h.ws.mention(ALICE, GENERAL, "one more")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await escalate(h, after=1801 + 3 * COALESCE_SECONDS)  # falls due on its own: a message of its own
        later = h.ws.messages("D_BOB")
        assert len(later) == 2 and "What is the goal?" in blocks_text(later[1]) and "Which repo?" not in str(later[1])


async def test_reminders_falling_due_together_are_one_message_per_person_reminded(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Five approval requests of Alice's remind at the same time: the named approver Carol (and Alice) each get
    one DM listing them, not five mentions each; a reminder falling due on its own stays in its thread."""
    settings = {**AGENT, "approvers": CAROL, "ask_remind_after": "1h", "ask_remind_max": 1}
    async with harness(fake_redis, ttl=86400, settings=settings) as h:
        h.model.script(
            *(Reply(tool_calls=[tool_call("restart_service", {"name": f"s{i}"}, id=f"r{i}")]) for i in range(5))
        )
        threads = []
        for i in range(5):
            d = await h.ws.mention(ALICE, GENERAL, f"restart s{i}")
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
            threads.append(d.message["ts"])
        await escalate(h, after=3601)
        bells = [m for t in threads for m in h.ws.messages(GENERAL, thread_ts=t) if m["text"].startswith(":bell:")]
        assert bells == []  # no mention per request
        for dm in ("D_CAROL", "D_ALICE"):
            [listed] = [m for m in h.ws.messages(dm) if m["text"].startswith(":bell:")]
            assert blocks_text(listed).count("restart_service") == 5 and "Open the thread" in blocks_text(listed)
        await escalate(h, after=3 * 3601)
        assert len([m for m in h.ws.messages("D_CAROL") if m["text"].startswith(":bell:")]) == 1  # ASK_REMIND_MAX


@pytest.mark.parametrize("user", [ALICE, CAROL])
async def test_an_answer_click_crafted_for_an_approval_neither_decides_nor_answers_it(
    fake_redis: aioredis.Redis, harness: Any, user: str
) -> None:
    """The kind is the stored run's, not the surface's: an option click naming an approval's reference gets the
    approvers' rule (Alice, the requester, is refused) and, from an approver, is not taken as an answer either."""
    async with harness(fake_redis, settings={**AGENT, "approvers": CAROL}) as h:
        _thread, request = await requested(h)
        approve = button(request, 0)
        forged = {**approve, "action_id": "ask_option_0"}  # the Approve button's reference, on the answer path
        await h.ws.sender.send_interaction(action_payload(h, request, forged, user=user))
        told = await h.ws.wait_for_ephemeral(user=user)
        assert told["text"] == (
            "Only the configured approvers can approve or decline this." if user == ALICE else NOT_OPEN
        )
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))


async def test_approvers_channel_means_the_runs_channel_not_an_escalation_channel(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """APPROVERS=channel: anyone in the run's channel decides; a member of the escalation channel does not."""
    settings = {**AGENT, "approvers": "channel", "ask_escalate_after": "30m", "ask_escalate_to": RANDOM}
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        await escalate(h)
        [copy] = escalated_in(h, RANDOM)
        await h.ws.click(copy, "Approve", user=CAROL)
        await h.settle()
        assert approval_agent.RESTARTS == []
        refused = await h.ws.wait_for_ephemeral(user=CAROL)
        assert refused["text"] == f"Only people in <#{GENERAL}> can approve or decline this."
        assert f"Anyone in <#{GENERAL}> can approve or decline" in blocks_text(copy)
        await h.ws.click(request, "Approve", user=BOB)  # anyone in the run's own channel
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Restarted api."))
        assert approval_agent.RESTARTS == ["api"]


async def test_fifteen_mentions_at_once_stay_within_the_bounds_and_make_one_escalation_dm(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The reported input: 15 mentions in a burst. Working runs are bounded per person (MAX_RUNS_PER_PERSON), waiting
    questions by MAX_WAITING_PER_PERSON (a burst can pass it by the runs working at the check), and whatever waits
    reaches the escalation target as one DM."""
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB, "max_waiting_per_person": 5}
    async with harness(fake_redis, settings=settings) as h:
        h.model.script(*(Reply(tool_calls=[tool_call("ask_user", SINGLE, id=f"q{i}")]) for i in range(15)))
        await asyncio.gather(*(h.ws.mention(ALICE, GENERAL, f"question {i}") for i in range(15)))
        await h.settle()
        questions = [m for m in h.ws.messages(GENERAL) if has_controls(m)]
        assert 1 <= len(questions) <= 5 + h.settings.max_runs_per_person - 1
        await escalate(h)
        assert len(h.ws.messages("D_BOB")) == 1


async def test_channel_policy_lets_anyone_answer_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, answerers="channel") as h:
        thread, q = await ask(h, then="Thanks.")
        await asyncio.gather(
            h.ws.click(q, "web", user=BOB, as_seen=True), h.ws.click(q, "api", user=ALICE, as_seen=True)
        )
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks.")
        await h.settle()
        assert resumed_requests(h.model) == 1
        winner = json.loads(
            next(m for m in reversed(h.model.requests[-1]["messages"]) if m["role"] == "tool")["content"]
        )
        loser = ALICE if winner["answered_by"] == BOB else BOB
        note = await h.ws.wait_for_ephemeral(user=loser)
        assert note["text"].startswith(f"<@{winner['answered_by']}> had already answered *")


async def test_a_question_for_anyone_in_the_channel_offers_no_cancel_nobody_could_use(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """An outside agent's question for anyone in the channel has no requester: its Cancel told whoever clicked it
    "Only <@> can withdraw this question." (a break-it pass). It shows none (a forged click is told nobody here can);
    a question with a requester keeps its Cancel."""
    async with harness(fake_redis) as h:
        assert h.bot.threads is not None
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        anyone = await asker.ask(SINGLE, channel=GENERAL, user=None, metadata={"mcp_tool": "ask_user"})
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=anyone.thread_ts, predicate=has_controls)
        labels = [e["text"]["text"] for b in q["blocks"] if b["type"] == "actions" for e in b["elements"]]
        assert labels == ["api", "web"], labels
        forged = {**button(q, 0), "action_id": "ask_cancel"}
        await h.ws.sender.send_interaction(action_payload(h, q, forged, user=BOB))
        told = await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "withdraw" in m["text"])
        assert told["text"] == "Nobody can withdraw this question here: the agent that asked it can.", told["text"]
        assert (await h.bot.agent.get_run(anyone.run_id)).status == "suspended"
        alices = await asker.ask(SINGLE, channel=GENERAL, user=ALICE, metadata={"mcp_tool": "ask_user"})
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=alices.thread_ts, predicate=has_controls)
        assert "Cancel" in [e["text"]["text"] for b in q["blocks"] if b["type"] == "actions" for e in b["elements"]]


async def test_every_line_of_an_outside_agents_context_is_quoted_as_its_words(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Only the context's first line was quoted: the lines after it read as the bot's own words in the channel
    (":white_check_mark: *askbot*: security review passed", a break-it pass)."""
    async with harness(fake_redis) as h:
        assert h.bot.threads is not None
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        context = "repo api\n\n:white_check_mark: *askbot*: security review passed."
        asked = await asker.ask(SINGLE, channel=GENERAL, user=ALICE, context=context, metadata={"mcp_tool": "ask_user"})
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == asked.thread_ts)
        head, *lines = root["text"].split("\n")
        assert head.endswith(f"asks <@{ALICE}>:") and lines == [
            ">repo api",
            ">",
            ">:white_check_mark: *askbot*: security review passed.",
        ], root["text"]


async def test_two_questions_racing_under_one_request_key_leave_the_winner_counted(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """Two calls of one caller with the same request_key and different questions at once: one asks, the other is
    refused (the key names another question); the refused one gave back the winner's place in the caller's waiting
    count, so the caller could pass its max_waiting by one per such race (a break-it pass)."""
    from bot.mcp_server.callers import Caller
    from bot.store import Keys

    caller = Caller(name="build-42", channels=(GENERAL,), people=(ALICE,), max_waiting=5)
    async with harness(fake_redis) as h:
        assert h.bot.threads is not None
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        first = {"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}]}
        second = {"question": "Roll back?", "options": [{"label": "yes"}, {"label": "no"}]}
        results = await asyncio.gather(
            *(
                asker.ask(q, channel=GENERAL, user=ALICE, caller=caller, request_key="k1", metadata={"mcp_tool": "x"})
                for q in (first, second)
            ),
            return_exceptions=True,
        )
        [asked] = [r for r in results if not isinstance(r, BaseException)]
        [refusal] = [r for r in results if isinstance(r, BaseException)]
        assert "request_key names another question" in str(refusal), refusal
        waiting = await fake_redis.zrange(Keys(prefix).mcp_waiting("build-42"), 0, -1)
        assert [w.decode() for w in waiting] == [asked.run_id]
