"""The App Home tab as an inbox, through the fake Slack (which validates Home views as Slack does): what waits for
the person who opens it, answered right there through the same exactly-once path, refreshed when it changes."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack.elements import iter_elements
from bot.fakeslack.home_tab import choose_home, click_home, home_view, open_home, tick_home
from bot.fakeslack.state import TEAM_ID
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS
from bot.store import Keys
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    CAROL,
    GENERAL,
    MULTI,
    SINGLE,
    ask,
    blocks_text,
    current,
    has_controls,
    open_homes,
    text_is,
    tool_results,
)
from bot.testing.tcp_proxy import TcpProxy

OOM = b"OOM command not allowed when used memory > 'maxmemory'."
AGENT = {"agent": "bot.testing.approval_agent:build"}


async def refresh(h: Any, after: float = 5) -> None:
    """Carry out the debounced Home refreshes (and whatever else is scheduled) due ``after`` seconds from now."""
    assert h.bot.scheduler is not None
    await h.settle()  # the work that asked or closed a question, which schedules the refresh
    await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=after))
    await h.settle()


async def asked(h: Any, user: str = ALICE, *, then: str | Reply = "ok") -> tuple[str, dict[str, Any]]:
    reply = then if isinstance(then, Reply) else Reply(text=then)
    h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]), reply)
    d = await h.ws.mention(user, GENERAL, "summarize")
    return d.message["ts"], await h.ws.wait_for_message(
        channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls
    )


async def test_home_lists_what_waits_and_answering_there_answers_the_thread(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        await open_home(h.ws, ALICE)
        await h.settle()
        empty = home_view(h.ws, ALICE)
        assert empty is not None and "Nothing is waiting for you." in blocks_text(empty)
        thread, q = await asked(h, then="Thanks for answering from Home.")
        await refresh(h)
        view = home_view(h.ws, ALICE)
        assert view is not None
        shown = blocks_text(view)
        assert "Which repo?" in shown and f"<#{GENERAL}>" in shown and "Open the thread" in shown
        await click_home(h.ws, ALICE, "web")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks for answering from Home."
        )
        await h.settle()
        assert not has_controls(await current(h, q)) and "answered: *web*" in blocks_text(await current(h, q))
        await refresh(h)
        after = home_view(h.ws, ALICE)
        assert after is not None
        assert "Nothing is waiting for you." in blocks_text(after) and "Recently closed" in blocks_text(after)
        assert home_view(h.ws, BOB) is None  # not Bob's question


async def test_an_answer_from_home_leaves_waiting_for_you_at_once_before_the_run_goes_on(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Found by a new user's trial: after a click on Home the question stayed under "Waiting for you", its buttons
    live, until the scheduled refresh (2 to 3 s): the clicker's Home is published again as soon as the answer is
    taken, before the run's next model turn (no scheduler tick here)."""
    async with harness(fake_redis) as h:
        await open_home(h.ws, ALICE)
        await h.settle()
        thread, _q = await asked(h, then=Reply(text="Thanks.", chunk_delay=1.0))  # a slow turn after the answer
        await refresh(h)
        assert "Which repo?" in blocks_text(home_view(h.ws, ALICE) or {})
        await click_home(h.ws, ALICE, "web")
        published = await h.ws.fake.wait_until(
            lambda: (v := home_view(h.ws, ALICE)) is not None and "Nothing is waiting for you." in blocks_text(v) and v,
            timeout=5,
            what="Alice's Home with nothing waiting",
        )
        assert "Recently closed" in blocks_text(published)
        assert not [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["text"] == "Thanks."]  # still writing
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks.")


async def test_a_home_nobody_opened_costs_no_calls_and_is_published_fresh_when_opened(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Issue 26: a refresh is published only to a Home opened within WATCHED seconds; one nobody looks at shows
    nothing, so questions that come and go cost it no ``views.publish`` and no ``chat.getPermalink`` of its links.
    Opening the tab publishes what waits now, and from then on changes reach it."""
    async with harness(fake_redis) as h:
        _thread, q = await asked(h)
        await refresh(h)
        assert home_view(h.ws, ALICE) is None
        assert not h.ws.calls("views.publish") and not h.ws.calls("chat.getPermalink")
        await open_home(h.ws, ALICE)
        await h.settle()
        view = home_view(h.ws, ALICE)
        assert view is not None and "Which repo?" in blocks_text(view)
        await h.ws.click(q, "web", user=ALICE)
        await h.settle()
        await refresh(h)
        after = home_view(h.ws, ALICE)
        assert after is not None and "Nothing is waiting for you." in blocks_text(after)
        assert home_view(h.ws, BOB) is None


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_home_shown_is_kept_fresh_even_when_marking_it_watched_failed(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], harness: Any
) -> None:
    """Opening the Home marks it watched in the same round trip that reads what it shows: when Redis refuses that
    mark, nothing is published (the Home stays as it was, Slack's next ``app_home_opened`` publishes it), never a
    Home shown that later changes skip for :data:`bot.slack.home.WATCHED` seconds (it was: published, unmarked,
    stale for 8 hours)."""
    client, proxy = proxied_redis
    async with harness(client) as h:
        proxy.refuse_next(containing=b"home_watched", error=b"OOM command not allowed when used memory > 'maxmemory'.")
        await open_home(h.ws, ALICE)
        await h.settle()
        await asked(h)
        await refresh(h)
        shown = home_view(h.ws, ALICE)
        assert shown is None or "Which repo?" in blocks_text(shown)  # nothing shown, or what waits now
        await open_home(h.ws, ALICE)  # the next opening publishes it, watched from then on
        await h.settle()
        view = home_view(h.ws, ALICE)
        assert view is not None and "Which repo?" in blocks_text(view)


async def test_an_approval_waits_in_the_named_approvers_home_and_they_decide_there(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approvers": BOB}) as h:
        await open_homes(h, ALICE, BOB)
        h.model.script(
            Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Restarted.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await refresh(h)
        for person in (ALICE, BOB):
            view = home_view(h.ws, person)
            assert view is not None and "restart_service" in blocks_text(view)
        # the requester may not approve: her Home shows what waits and on whom, with no control she can't use
        alice = json.dumps(home_view(h.ws, ALICE))
        assert '"Details"' in alice and '"Approve"' not in alice and '"Decline"' not in alice
        assert "<@U_BOB>" in alice
        bob_controls = json.dumps(home_view(h.ws, BOB))
        assert '"Approve"' in bob_controls and '"Decline"' in bob_controls
        await click_home(h.ws, BOB, "Approve")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Restarted."
        )
        await refresh(h)
        bob = home_view(h.ws, BOB)
        assert bob is not None and "Nothing is waiting for you." in blocks_text(bob)


async def test_a_crowded_inbox_stays_within_slacks_100_blocks_and_says_how_many_more_wait(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    settings = {"max_runs_per_person": 50, "max_waiting_per_person": 50}  # 25 questions of one person's waiting
    async with harness(fake_redis, settings=settings) as h:
        await open_homes(h, ALICE)
        for i in range(25):
            h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id=f"q{i}")]))
            d = await h.ws.mention(ALICE, GENERAL, f"question {i}")
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await refresh(h)
        view = home_view(h.ws, ALICE)
        assert view is not None and len(view["blocks"]) <= 100
        assert "more waiting" in blocks_text(view)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_close_whose_reply_was_lost_lists_the_question_once_under_recently_closed(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], harness: Any
) -> None:
    """Closing a question's inbox entries pushes its "recently closed" line; when that batch's reply is lost,
    redis-py sends the whole batch again: the line was pushed twice and Alice's Home listed the question twice."""
    client, proxy = proxied_redis
    async with harness(client) as h:
        thread, q = await ask(h, then="Carried on.")
        await h.settle()
        proxy.lose_next_reply(containing=b"LPUSH")  # the inbox close: applied, its reply lost
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))
        await h.settle()
        assert proxy.replies_lost == 1
        await open_home(h.ws, ALICE)
        await h.settle()
        view = home_view(h.ws, ALICE)
        assert view is not None
        shown = blocks_text(view)
        assert "Recently closed" in shown and shown.count("answered: *web*") == 1, shown


async def test_a_late_click_on_a_stale_home_says_what_was_recorded_and_that_this_click_was_not(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Alice answered "web" in the thread; her Home still showed the question (its refresh not due yet) and a click
    on "api" there was told "Your answer was recorded." though it was ignored. Told now: what was recorded, by whom,
    and that this click was not; the same option again: that it was."""
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        thread, q = await asked(h, then="Going with web.")
        await refresh(h)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Going with web."))
        await h.settle()
        await click_home(h.ws, ALICE, "api")  # the stale Home: its refresh is not due
        note = await h.ws.wait_for_message(channel="D_ALICE", predicate=lambda m: "recorded" in m["text"])
        assert note["text"] == "You had already answered *web*; your choice *api* was not recorded."
        await click_home(h.ws, ALICE, "web")
        same = await h.ws.wait_for_message(channel="D_ALICE", predicate=lambda m: m["text"].startswith("Your "))
        assert same["text"] == "Your answer *web* was recorded."


async def test_a_late_click_by_someone_else_names_who_answered_what(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, answerers="channel") as h:
        thread, q = await asked(h, then="Going with web.")
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Going with web."))
        await h.settle()
        await h.ws.click(q, "api", user=BOB, as_seen=True)
        note = await h.ws.wait_for_ephemeral(user=BOB)
        assert note["text"] == "<@U_ALICE> had already answered *web*; your choice *api* was not recorded."


@pytest.mark.parametrize("name", ["api", "broken"])
async def test_an_approved_call_that_ran_is_listed_as_ran_not_running(
    fake_redis: aioredis.Redis, harness: Any, name: str
) -> None:
    """Approving closes the request as "Approved by … · running…"; once the call ends its messages say how it went,
    but the "Recently closed" line was written once and never again: "running…" for ever after it ran."""
    async with harness(fake_redis, settings={**AGENT, "approvers": BOB}) as h:
        await open_homes(h, BOB, ALICE)
        h.model.script(
            Reply(tool_calls=[tool_call("restart_service", {"name": name}, id="r1")]), Reply(text="Finished.")
        )
        d = await h.ws.mention(ALICE, GENERAL, f"restart {name}")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await refresh(h)
        await click_home(h.ws, BOB, "Approve")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Finished."))
        await refresh(h)
        for person in (ALICE, BOB):
            view = home_view(h.ws, person)
            assert view is not None
            heads = [i for i, b in enumerate(view["blocks"]) if b["type"] == "header"]
            assert view["blocks"][heads[-1]]["text"]["text"] == "Recently closed"
            closed = view["blocks"][heads[-1] + 1]["elements"][0]["text"]
            assert "running" not in closed and closed.count("Run `restart_service`") == 1, closed
            assert ("ran in" if name == "api" else "failed: tool restart_service failed") in closed, closed


@pytest.mark.parametrize("args", [SINGLE, {"question": "What is the goal?"}], ids=["single", "free-form"])
async def test_a_question_on_home_points_to_its_thread_not_to_this_one(
    fake_redis: aioredis.Redis, harness: Any, args: dict[str, Any]
) -> None:
    """Home has no thread: its copy of a question said "or reply in this thread" (a new user's report). It points to
    the question's own thread there; the message in the thread still says "this thread"."""
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        _thread, q = await ask(h, args)
        await refresh(h)
        view = home_view(h.ws, ALICE)
        assert view is not None
        shown = blocks_text(view)
        assert "in this thread" not in shown and "or reply in its thread" in shown, shown
        assert "or reply in this thread" in blocks_text(q)


async def test_a_question_asked_in_a_dm_is_listed_as_in_a_dm_not_as_a_channel(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]), Reply(text="ok"))
        d = await h.ws.dm(ALICE, "summarize")
        await h.ws.wait_for_message(channel=d.message["channel"], predicate=has_controls)
        await refresh(h)
        view = home_view(h.ws, ALICE)
        assert view is not None
        shown = blocks_text(view)
        assert "In a DM with the app" in shown and "<#D" not in shown  # a DM has no channel name to show


async def test_answering_in_a_home_whose_watch_lapsed_does_not_leave_the_answered_question_on_it(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    """A click in the Home means its person is looking at it, as a Revoke there does (which renews the mark): a
    Home kept open past :data:`bot.slack.home.WATCHED` and answered from must not keep showing the answered
    question with its buttons (Slack sends no ``app_home_opened`` while the tab stays open)."""
    async with harness(fake_redis) as h:
        await open_home(h.ws, ALICE)
        await h.settle()
        thread, _q = await asked(h, then="Thanks for answering from Home.")
        await refresh(h)
        shown = home_view(h.ws, ALICE)
        assert shown is not None and "Which repo?" in blocks_text(shown)
        await fake_redis.delete(Keys(prefix).home_watched(TEAM_ID, ALICE))  # the working day's mark lapsed
        await click_home(h.ws, ALICE, "web")  # the tab stayed open: they answer there
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks for answering from Home."
        )
        await refresh(h)
        after = home_view(h.ws, ALICE)
        assert after is not None
        shown_after = blocks_text(after)
        assert "Nothing is waiting for you." in shown_after, "the answered question still shows, with its buttons"
        assert "answered: *web*" in shown_after  # under Recently closed


async def answered_in_channel(h: Any, thread: str, q: dict[str, Any]) -> None:
    """Alice answers ``q`` in the channel (not in her Home) and the run replies "Carried on."."""
    await h.ws.click(q, "web", user=ALICE)
    await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))


def assert_home_empty(h: Any, why: str) -> None:
    """Alice's Home shows nothing waiting (``why``: what it means when it does)."""
    assert "Nothing is waiting for you." in blocks_text(home_view(h.ws, ALICE) or {}), why


# 1. Cancel clicked in the Home does not renew the watched mark (only vet() renews it; Cancel goes through find())
async def test_withdrawing_in_a_home_whose_watch_lapsed_takes_the_question_off_it(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        _thread, q = await asked(h)
        await refresh(h)
        assert "Which repo?" in blocks_text(home_view(h.ws, ALICE) or {})
        await fake_redis.delete(Keys(prefix).home_watched(TEAM_ID, ALICE))  # the working day's mark lapsed
        await click_home(h.ws, ALICE, "Cancel")  # the tab stayed open: she withdraws it there
        await h.settle()
        assert "Withdrawn by" in blocks_text(await current(h, q))
        await refresh(h)
        shown = blocks_text(home_view(h.ws, ALICE) or {})
        assert "Nothing is waiting for you." in shown, "the withdrawn question still shows, with its buttons"


# 2. a refused write of the close batch (read fine, write refused): not owed, no refresh ever scheduled
@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_close_whose_inbox_write_was_refused_still_leaves_the_open_home(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], harness: Any
) -> None:
    client, proxy = proxied_redis
    async with harness(client) as h:
        await open_homes(h, ALICE)
        thread, q = await asked(h, then="Carried on.")
        await refresh(h)
        assert "Which repo?" in blocks_text(home_view(h.ws, ALICE) or {})
        proxy.refuse_next(containing=b"LPUSH", error=OOM)  # the inbox close + its Home refresh: refused once
        await answered_in_channel(h, thread, q)
        await asyncio.sleep(1.0)  # Redis answers again: the owed close is retried within 50 ms
        for after in (5, 120, 600):
            await refresh(h, after)
        assert_home_empty(h, "the answered question still shows, with live buttons")


# 3. a quorum approval (not yet complete) redraws the thread's card only: no Home refresh
def _policy(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n  - name: restarts need two\n    tool: restart_service\n"
        f'    approvers: [{BOB}, {CAROL}]\n    required: 2\n  - name: default\n    tool: "*"\n'
    )
    return {"agent": "bot.testing.approval_agent:build", "approval_policy": str(path)}


async def test_a_quorum_approval_given_in_the_home_shows_there(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    approval_agent.RESTARTS.clear()
    async with harness(fake_redis, settings=_policy(tmp_path)) as h:
        await open_homes(h, BOB, CAROL)
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="ok"))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await refresh(h)
        assert "0 of 2 approvals so far" in blocks_text(home_view(h.ws, BOB) or {})
        await click_home(h.ws, BOB, "Approve")
        await h.settle()
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(await current(h, request))  # the thread: redrawn
        await refresh(h)
        for person in (BOB, CAROL):
            shown = blocks_text(home_view(h.ws, person) or {})
            assert f"1 of 2: approved by <@{BOB}>" in shown, f"{person}'s Home still says 0 of 2"
        # only who approved may take it back (before: offered to Carol too, refused when clicked)
        assert "Take back my approval" in json.dumps(home_view(h.ws, BOB))
        carol = json.dumps(home_view(h.ws, CAROL))
        assert "Take back my approval" not in carol and '"Approve"' in carol


# 4. an escalation whose inbox write failed is never listed in the target's Home (logged, not retried)
@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_an_escalation_whose_inbox_write_was_refused_still_reaches_the_targets_home(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], harness: Any
) -> None:
    client, proxy = proxied_redis
    settings = {"ask_escalate_after": "30m", "ask_escalate_to": BOB, "ask_escalate_answers": True}
    async with harness(client, settings=settings) as h:
        await open_homes(h, BOB)
        await asked(h)
        await h.settle()
        proxy.refuse_next(containing=b"inbox_of", error=OOM)  # the escalation's Home entry: refused once
        assert h.bot.scheduler is not None
        for extra in (0.0, COALESCE_SECONDS + 1, COALESCE_SECONDS + 70, COALESCE_SECONDS + 200):
            await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=1801 + extra))
            await h.settle()
        assert any("Escalated from" in blocks_text(m) for m in h.ws.messages("D_BOB"))  # escalated all right
        await open_home(h.ws, BOB)  # even opened again
        await h.settle()
        assert "Which repo?" in blocks_text(home_view(h.ws, BOB) or {}), "escalated to Bob, never in his Home"


# 5. a refresh whose views.publish Slack answers with a transient error (HTTP 200 service_unavailable: not seen by
#    slack_sdk's retry handlers; SlackWeb.post retries these; publish_home did not) was done, never tried again
async def test_a_refresh_slack_failed_to_publish_is_tried_again(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        thread, q = await asked(h, then="Carried on.")
        await refresh(h)
        assert "Which repo?" in blocks_text(home_view(h.ws, ALICE) or {})
        await answered_in_channel(h, thread, q)
        h.ws.fake.fail_next("views.publish", "service_unavailable")
        for after in (5, 120, 600):
            await refresh(h, after)
        assert_home_empty(h, "the answered question still shows, with live buttons")


# 6. two renders of one Home in flight at once (a change during a slow refresh re-arms the item, LT, and it is
#    claimed again while the first still runs): the older render is published last and nothing follows it
async def test_a_slow_refresh_overtaken_by_a_newer_one_does_not_leave_the_older_view(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        thread, q = await asked(h, then="Carried on.")
        await h.settle()
        assert h.bot.scheduler is not None
        h.ws.fake.set_delay("chat.getPermalink", 3.0)  # Slack slow (rate limited: Retry-After) on the thread link
        first = asyncio.create_task(h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=5)))
        await asyncio.sleep(0.5)  # the first refresh read the inbox (the question) and waits on its link
        await h.ws.click(q, "web", user=ALICE)  # answered in the channel meanwhile
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))
        await h.settle()
        await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=10))  # the refresh that change asked for
        await first
        h.ws.fake.set_delay("chat.getPermalink", 0)
        for after in (120, 600):
            await refresh(h, after)
        assert_home_empty(h, "the answered question still shows, with live buttons")


# 7. a click on a stale Home item (the question closed already) is told so, yet the Home is left as it is
async def test_a_click_on_a_closed_question_in_the_home_takes_it_off_the_home(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        await open_homes(h, ALICE)
        thread, q = await asked(h, then="Carried on.")
        await refresh(h)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Carried on."))
        h.ws.fake.refuse("views.publish", "service_unavailable")  # any way the Home went stale: Slack down a while
        await refresh(h)
        h.ws.fake.allow("views.publish")
        await click_home(h.ws, ALICE, "api")  # the stale Home's button
        await h.ws.wait_for_message(channel="D_ALICE", predicate=lambda m: "was not recorded" in m["text"])
        await refresh(h)  # before the failed refresh's own retry (after its lease, a minute)
        shown = blocks_text(home_view(h.ws, ALICE) or {})
        assert "Nothing is waiting for you." in shown, "told it was answered; the Home still offers its buttons"


async def asked_on_home(h: Any, question: dict[str, Any], *, then: str) -> str:
    """Alice opens her Home, then asks; the model asks ``question`` (then replies ``then``) and her Home lists it.
    Returns the thread's ts."""
    await open_home(h.ws, ALICE)
    await h.settle()
    h.model.script(Reply(tool_calls=[tool_call("ask_user", question, id="q1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, "ask me")
    await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    await refresh(h)
    return str(d.message["ts"])


async def test_a_multi_select_question_is_answered_from_home_with_what_was_ticked_there(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Ticked on Home, then Submit: the ticks come in the view's state (``view.state.values``), where the bot did not
    look, so a Submit on Home always said "Select at least one option" (a new user's trial, in the playground)."""
    async with harness(fake_redis) as h:
        thread = await asked_on_home(h, MULTI, then="Picked from Home.")
        view = home_view(h.ws, ALICE) or {}
        [(block, boxes)] = [(b, e) for b, e in iter_elements(view.get("blocks", [])) if e.get("type") == "checkboxes"]
        picked = [o for o in boxes["options"] if o["text"]["text"] in ("Add tests", "Refactor")]
        ticks = {block["block_id"]: {boxes["action_id"]: {"type": "checkboxes", "selected_options": picked}}}
        await click_home(h.ws, ALICE, "Submit", values=ticks)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Picked from Home."))
        [result] = tool_results(h.model)
        assert result == {"answers": ["Add tests", "Refactor"], "answer_type": "options", "answered_by": ALICE}


def sent_payload(ack: Any) -> dict[str, Any]:
    """The interaction payload an ``Ack`` answered (form-encoded ``payload=<json>``)."""
    [payload] = parse_qs(ack.request_body)["payload"]
    return dict(json.loads(payload))


async def test_ticks_on_home_are_kept_and_sent_with_submit(fake_redis: aioredis.Redis, harness: Any) -> None:
    """Ticked on Home box by box, as a person does (each tick a ``block_actions`` from the view, with the view's
    state so far), the Home published afresh, then Submit with no ``values=``: the fake Slack keeps the Home view's
    state per person (across a publish that keeps the elements' ids) and sends it, so the multi-select question is
    answered with what is ticked (the playground's Home could not tick)."""
    async with harness(fake_redis) as h:
        thread = await asked_on_home(h, MULTI, then="Ticked on Home.")
        for label in ("Add tests", "Update docs", "Refactor", "Update docs"):  # the last one unticked again
            ack = await tick_home(h.ws, ALICE, label)
            assert ack.ok
        tick = sent_payload(ack)
        [action] = tick["actions"]
        assert tick["container"]["type"] == "view" and action["type"] == "checkboxes"
        assert [o["text"]["text"] for o in action["selected_options"]] == ["Add tests", "Refactor"]
        state = tick["view"]["state"]["values"][action["block_id"]][action["action_id"]]
        assert state == {"type": "checkboxes", "selected_options": action["selected_options"]}
        published = len(h.ws.calls("views.publish"))
        await open_homes(h, ALICE)  # published afresh: the question keeps its ids, so its ticks stay
        assert len(h.ws.calls("views.publish")) > published
        await click_home(h.ws, ALICE, "Submit")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Ticked on Home."))
        [result] = tool_results(h.model)
        assert result == {"answers": ["Add tests", "Refactor"], "answer_type": "options", "answered_by": ALICE}


async def test_a_choice_in_a_menu_on_home_answers_the_question(fake_redis: aioredis.Redis, harness: Any) -> None:
    """A single-select question with more options than buttons shows a menu (static_select), on Home too: choosing
    there sends its ``block_actions`` with the ``selected_option``, which answers the question."""
    cities = {"question": "Which city?", "options": [{"label": f"City {i}"} for i in range(30)]}
    async with harness(fake_redis) as h:
        thread = await asked_on_home(h, cities, then="Chosen on Home.")
        kinds = [e.get("type") for _b, e in iter_elements((home_view(h.ws, ALICE) or {}).get("blocks", []))]
        assert "static_select" in kinds, kinds
        ack = await choose_home(h.ws, ALICE, "City 17")
        chosen = sent_payload(ack)
        [action] = chosen["actions"]
        assert action["type"] == "static_select" and action["selected_option"]["text"]["text"] == "City 17"
        assert chosen["view"]["state"]["values"][action["block_id"]][action["action_id"]] == {
            "type": "static_select",
            "selected_option": action["selected_option"],
        }
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Chosen on Home."))
        [result] = tool_results(h.model)
        assert result["answer"] == "City 17" and result["answered_by"] == ALICE
