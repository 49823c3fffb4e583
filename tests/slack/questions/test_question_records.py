"""What a question shown or closed writes (its message, deadline, reminders, inbox entries, Home refreshes), and in
how many Redis round trips: 2 when shown, 3 when closed (they were 4 and 5, one per store object)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import utcnow
from bot.slack.context import SlackContext
from bot.slack.home import HOME, Home
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.questions.follow_up_plan import DEADLINE, ESCALATE, REMIND, FollowUpPlan, FollowUpSettings
from bot.slack.questions.records import QuestionRecords
from bot.slack.transport.web_api import SlackWeb
from bot.store import Keys
from bot.store.conversations import ConversationIndex, MessageRef, asked_id
from bot.store.inbox import Inbox
from bot.store.schedule import DueItem, Schedule
from bot.testing.tcp_proxy import TcpProxy

CTX = SlackContext(team_id="T1", channel_id="C1", thread_ts="100.1", requester="U_ALICE")
SETTINGS = FollowUpSettings(remind_after=600, remind_max=2, escalate_after=1800, escalate_to="C_OPS")


def records_on(client: aioredis.Redis, prefix: str) -> tuple[QuestionRecords, ConversationIndex, Inbox, Schedule]:
    keys = Keys(prefix)
    index, inbox, schedule = (
        ConversationIndex(client, keys=keys),
        Inbox(client, keys=keys),
        Schedule(client, prefix=prefix),
    )
    web = SlackWeb(AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:1/"))  # never called here
    home = Home(
        agent=cast(Any, None),  # only publishing reads runs; recording does not
        web=web,
        index=index,
        inbox=inbox,
        schedule=schedule,
        approvers=ApproverPolicy("requester", client=web.client),
        answerers="requester",
    )
    return QuestionRecords(index=index, plan=FollowUpPlan(schedule, SETTINGS), home=home), index, inbox, schedule


async def test_a_question_shown_then_closed_leaves_the_right_records(fake_redis: aioredis.Redis) -> None:
    records, index, inbox, schedule = records_on(fake_redis, "qr:")
    asked = utcnow()
    await records.shown(CTX, "run-1", "c1", ts="100.2", approval=False, asked=asked, expires_at=asked + timedelta(1))
    assert await index.messages("run-1", "c1") == [MessageRef("C1", "100.2", asked_id(asked))]
    box = await inbox.snapshot("T1", "U_ALICE")
    assert [(r, c) for r, c, _ in box.waiting] == [("run-1", "c1")] and box.total == 1
    for item in (DueItem(DEADLINE, "run-1", "c1"), DueItem(REMIND, "run-1", "c1", 1), DueItem(ESCALATE, "run-1", "c1")):
        assert await schedule.due_at(item) is not None, item
    home_due = await schedule.due_at(DueItem(HOME, "T1", "U_ALICE"))
    assert home_due is not None and home_due - utcnow().timestamp() < 5  # the debounced refresh, not the deadline

    refs = await records.closed("run-1", "c1", summary="Pick one: answered", asked=asked)
    assert refs == [MessageRef("C1", "100.2", asked_id(asked))]
    box = await inbox.snapshot("T1", "U_ALICE")
    assert box.waiting == [] and box.total == 0 and [r["summary"] for r in box.recent] == ["Pick one: answered"]
    assert await schedule.due_at(DueItem(REMIND, "run-1", "c1", 1)) is None
    assert await schedule.due_at(DueItem(ESCALATE, "run-1", "c1")) is None
    assert await schedule.due_at(DueItem(DEADLINE, "run-1", "c1")) is not None  # kept: see FollowUpPlan.planned
    assert await schedule.due_at(DueItem(HOME, "T1", "U_ALICE")) is not None


async def test_a_question_closed_while_the_store_is_down_raises_nothing_and_returns_what_it_knows() -> None:
    """Nothing can be read; the message the question was posted as (its record still owed) is still returned, to
    close; a question never recorded here gives None."""
    client = aioredis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    records, *_ = records_on(client, "qr:")
    await records.shown(CTX, "run-1", "c1", ts="100.2", approval=False, asked=None, expires_at=None)
    assert await records.closed("run-1", "c1", summary="answered", asked=None) == [MessageRef("C1", "100.2", "")]
    assert not records.owed  # closed: nothing of it is written later
    assert await records.closed("run-2", "c1", summary="answered", asked=None) is None
    await records.aclose()
    await client.aclose()


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server counts the round trips
async def test_a_question_shown_costs_one_round_trip_and_closed_two(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], prefix: str
) -> None:
    client, proxy = proxied_redis
    records, *_ = records_on(client, prefix)
    await records.shown(CTX, "run-0", "c0", ts="9.9", approval=False, asked=None, expires_at=None)  # scripts loaded
    asked = utcnow()
    before = proxy.round_trips
    await records.shown(CTX, "run-1", "c1", ts="100.2", approval=False, asked=asked, expires_at=asked)
    assert proxy.round_trips - before == 1  # its message, inbox entries and schedule change in one batch
    before = proxy.round_trips
    assert await records.closed("run-1", "c1", summary="answered", asked=asked)
    assert proxy.round_trips - before == 2  # where it is shown; the inbox entries closed and the schedule change
