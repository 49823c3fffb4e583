"""Replies stream into the thread as the model writes them (chat.startStream / appendStream / stopStream through
slack_sdk's helper, against the fake Slack), with tool calls as tasks and the thread's status while the run works;
where Slack refuses streaming, the reply is posted and updated instead, and the person always sees it whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.fakeslack.state import BOT_USER_ID, TEAM_ID
from bot.slack.replies.streaming import FIRST_SEND_AFTER
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, SINGLE, has_controls

WORDS = " ".join(f"word{i}" for i in range(60))
FAST = {"stream_interval": 0.2}


def bot_replies(h: Any, thread: str) -> list[dict[str, Any]]:
    return [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m.get("user") == BOT_USER_ID]


def methods(h: Any, *names: str) -> list[str]:
    return [c.method for c in h.ws.calls() if c.method in names]


async def shown_while_written(h: Any, reply: Reply, *, request: str, whole: str) -> str:
    """A mention of ``request``, the model writing ``reply``: part of ``whole`` shows in a streaming message before
    the model finished, then the message ends as ``whole``; the thread's ts (settled)."""
    h.model.script(reply)
    d = await h.ws.mention(ALICE, GENERAL, request)
    thread = str(d.message["ts"])
    partial = await h.ws.wait_for_message(
        channel=GENERAL, thread_ts=thread, predicate=lambda m: bool(m.get("streaming") and m["text"])
    )
    assert 0 < len(partial["text"]) < len(whole)  # visible before the model finished
    await h.ws.wait_for_message(
        channel=GENERAL, thread_ts=thread, predicate=lambda m: not m.get("streaming") and m["text"] == whole
    )
    await h.settle()
    return thread


async def test_a_reply_shows_while_the_model_writes_it_and_ends_whole(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        reply = Reply(text=WORDS, chunk_delay=0.02)  # about 1.2 s of writing
        thread = await shown_while_written(h, reply, request="write a lot", whole=WORDS)
        assert methods(h, "chat.startStream", "chat.stopStream").count("chat.startStream") == 1
        assert len(h.ws.calls("chat.stopStream")) == 1
        assert 1 <= len(h.ws.calls("chat.appendStream")) <= 10  # bounded by the interval, not one call per word
        assert h.ws.calls("chat.postMessage") == []  # no second copy of the reply
        assert len(bot_replies(h, thread)) == 1
        start = h.ws.calls("chat.startStream")[0].params
        assert (start["recipient_user_id"], start["recipient_team_id"]) == (ALICE, TEAM_ID)


async def test_where_slack_refuses_streaming_the_reply_is_posted_then_updated(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.ws.fake.refuse("chat.startStream", "unknown_method")  # an older workspace, every time
        h.model.script(Reply(text=WORDS, chunk_delay=0.02), Reply(text="Second reply."))
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == WORDS)
        await h.settle()
        assert len(h.ws.calls("chat.postMessage")) == 1 and h.ws.calls("chat.update")  # grew in place
        assert len(bot_replies(h, thread)) == 1
        blocks = bot_replies(h, thread)[0]["blocks"]
        assert [b["type"] for b in blocks] == ["markdown"] and blocks[0]["text"] == WORDS
        # The refusal is remembered: the next reply in the channel is posted without trying to stream.
        d2 = await h.ws.mention(ALICE, GENERAL, "again")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d2.message["ts"], predicate=lambda m: "Second" in m["text"]
        )
        assert len(h.ws.calls("chat.startStream")) == 1


async def test_a_stream_that_breaks_midway_is_finished_in_the_same_message(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text=WORDS, chunk_delay=0.02))
        h.ws.fake.fail_next("chat.appendStream", "message_not_in_streaming_state")  # Slack ended the stream
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        thread = d.message["ts"]
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["blocks"][-1].get("text") == WORDS
        )
        await h.settle()
        replies = bot_replies(h, thread)
        assert len(replies) == 1 and replies[0]["ts"] == h.ws.calls("chat.startStream")[0].response["ts"]
        assert h.ws.calls("chat.postMessage") == []


async def test_a_reply_written_within_the_first_send_wait_is_posted_whole(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Issue 26: a short reply whose pieces come within :data:`FIRST_SEND_AFTER` of its first one shows the same
    with one ``chat.postMessage`` as with ``chat.startStream`` + ``chat.stopStream``; a slower one still streams."""
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(
            Reply(text="Quick and short, all of it.", chunk_delay=FIRST_SEND_AFTER / 20),
            Reply(text="Slow and streamed, piece by piece.", chunk_delay=FIRST_SEND_AFTER),
        )
        d = await h.ws.mention(ALICE, GENERAL, "quick")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Quick and short, all of it."
        )
        await h.settle()
        assert methods(h, "chat.startStream", "chat.appendStream", "chat.stopStream") == []
        assert len(bot_replies(h, d.message["ts"])) == 1
        d2 = await h.ws.mention(ALICE, GENERAL, "slow")
        slow = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d2.message["ts"], predicate=lambda m: m.get("user") == BOT_USER_ID
        )
        assert slow["streaming"]  # shown while written
        await h.settle()
        assert methods(h, "chat.startStream", "chat.stopStream") == ["chat.startStream", "chat.stopStream"]
        assert bot_replies(h, d2.message["ts"])[0]["text"] == "Slow and streamed, piece by piece."


async def test_a_question_ends_the_stream_first_and_the_answer_streams_anew(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(
            # written slower than the first send waits, so it streams
            Reply(text="Let me ask you first.", tool_calls=[tool_call("ask_user", SINGLE, id="c1")], chunk_delay=0.15),
            Reply(text="Going with api."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "deploy")
        thread = d.message["ts"]
        question = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        assert methods(h, "chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage")[-2:] == [
            "chat.stopStream",
            "chat.postMessage",
        ]
        first = bot_replies(h, thread)[0]
        assert first["text"] == "Let me ask you first." and not first["streaming"]
        assert not first.get("tasks")  # asking is not shown as a tool run
        await h.ws.click(question, "api", user=ALICE)
        final = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Going with api."
        )
        await h.settle()
        # a new message below the question: streamed anew (a second chat.startStream), or posted whole when all of
        # its text was there before the stream's first send (bot/slack/replies/streaming.py): either, by timing
        streamed_anew = len(h.ws.calls("chat.startStream")) == 2
        posted_whole = methods(h, "chat.startStream", "chat.postMessage")[-1] == "chat.postMessage"
        assert streamed_anew != posted_whole and final["ts"] != first["ts"] and not final.get("streaming")
        assert float(final["ts"]) > float(question["ts"])


async def test_tool_calls_show_as_tasks_and_the_status_says_what_runs(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings={**FAST, "agent": "bot.testing.approval_agent:build"}) as h:
        h.model.script(
            Reply(text="Checking.", tool_calls=[tool_call("lookup_ticket", {"ticket_id": "T-1"}, id="t1")]),
            Reply(text="It is open."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "ticket T-1?")
        thread = d.message["ts"]
        final = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: not m.get("streaming") and "open" in m["text"]
        )
        await h.settle()
        assert final["text"] == "Checking.\n\nIt is open."  # each model turn its own paragraph
        assert final["tasks"]["t1"] == {"title": "lookup_ticket", "status": "complete"}
        sent = [
            chunk
            for call in h.ws.calls()
            if call.method.startswith("chat.") and call.method.endswith("Stream")
            for chunk in call.params.get("chunks") or []
            if chunk["type"] == "task_update"
        ]
        assert [c["status"] for c in sent] == ["in_progress", "complete"]
        statuses = [c.params["status"] for c in h.ws.calls("assistant.threads.setStatus")]
        assert statuses[0] == "is thinking..." and "is running lookup_ticket..." in statuses


async def test_an_approval_shows_its_task_waiting_then_done(fake_redis: aioredis.Redis, harness: Any) -> None:
    approval_agent.RESTARTS.clear()
    async with harness(fake_redis, settings={**FAST, "agent": "bot.testing.approval_agent:build"}) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]),
            Reply(text="Restarted."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        waiting = bot_replies(h, thread)[0]
        assert waiting["tasks"]["r1"]["status"] == "pending" and not waiting["streaming"]
        # what happened, so the hollow mark left in this message reads as history once it ran (in the next one);
        # before: "waits for approval", stale in every thread after the decision (a new user's trial)
        assert waiting["tasks"]["r1"]["details"] == "approval asked"
        assert "restart_service - approval asked" in str(waiting["blocks"]) and "waits" not in str(waiting["blocks"])
        await h.ws.click(request, "Approve", user=ALICE)
        done = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: not m.get("streaming") and m["text"] == "Restarted."
        )
        assert done["tasks"]["r1"] == {"title": "restart_service", "status": "complete"}
        assert approval_agent.RESTARTS == ["api"]


async def test_a_declined_calls_task_shows_it_did_not_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    # before: the same filled mark as a call that ran (the frameworks' agents: tests/frameworks)
    await declined_task_shows_not_run(fake_redis, harness, "bot.testing.approval_agent:build")


async def declined_task_shows_not_run(fake_redis: aioredis.Redis, harness: Any, agent: str) -> None:
    """``agent``'s call declined in Slack: its task in the reply shows it did not run (Slack's error status)."""
    approval_agent.RESTARTS.clear()
    async with harness(fake_redis, settings={**FAST, "agent": agent}) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Not restarted.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(request, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "not now"}}, user=ALICE)
        done = await h.ws.wait_for_message(
            channel=GENERAL,
            thread_ts=thread,
            predicate=lambda m: not m.get("streaming") and m["text"] == "Not restarted.",
        )
        assert done["tasks"]["r1"] == {"title": "restart_service", "status": "error"}
        assert approval_agent.RESTARTS == []


async def test_posted_and_updated_an_approval_says_what_its_task_waits_for(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Streaming off: the tool's line above the reply says its approval was asked, as a streamed task's details do."""
    approval_agent.RESTARTS.clear()
    settings = {**FAST, "reply_streaming": False, "agent": "bot.testing.approval_agent:build"}
    async with harness(fake_redis, settings=settings) as h:
        restart = tool_call("restart_service", {"name": "api"}, id="r1")
        h.model.script(Reply(text="Restarting it.", tool_calls=[restart]))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.settle()
        (reply,) = [m for m in bot_replies(h, thread) if "Restarting it." in str(m.get("blocks"))]
        assert ":double_vertical_bar: `restart_service` approval asked" in str(reply["blocks"])


async def test_where_slack_refuses_the_status_the_reaction_shows_instead(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.ws.fake.fail_next("assistant.threads.setStatus", "missing_scope")
        h.model.script(Reply(text="Done.", delay=0.3))
        d = await h.ws.mention(ALICE, GENERAL, "slow one")
        added = await h.ws.wait_for_call("reactions.add")
        assert added.params["timestamp"] == d.message["ts"]
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Done."
        )
        removed = await h.ws.wait_for_call("reactions.remove")
        assert removed.params["timestamp"] == d.message["ts"]
        await h.settle()
        assert len(h.ws.calls("assistant.threads.setStatus")) == 1  # refused once: not asked again


async def test_the_status_shows_while_the_model_works_and_clears_at_the_end(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")], delay=0.3))
        d = await h.ws.mention(ALICE, GENERAL, "ask me")
        status = await h.ws.wait_for_call("assistant.threads.setStatus")
        assert status.params == {"channel_id": GENERAL, "thread_ts": d.message["ts"], "status": "is thinking..."}
        assert h.ws.calls("reactions.add") == []  # the status is the working sign where Slack allows it
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await h.settle()
        assert h.ws.state.status_of(GENERAL, d.message["ts"]) == ""  # the question waits: its post cleared it
        # Slack clears the status when the app posts in the thread: no call to clear it as well
        assert [c.params["status"] for c in h.ws.calls("assistant.threads.setStatus")] == ["is thinking..."]


async def test_a_question_slack_refused_to_post_still_clears_the_status(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.ws.fake.fail_next("chat.postMessage", "channel_not_found")
        h.ws.fake.fail_next("chat.postMessage", "channel_not_found")  # the plain-text retry too
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")], delay=0.1))
        d = await h.ws.mention(ALICE, GENERAL, "ask me")
        await h.ws.wait_for_call("assistant.threads.setStatus")
        await h.settle()
        assert h.ws.state.status_of(GENERAL, d.message["ts"]) == ""
        assert h.ws.calls("assistant.threads.setStatus")[-1].params["status"] == ""


LONG = " ".join(f"w{i:05d}" for i in range(2600))  # 18,199 characters: two streamed messages


def shown_text(h: Any, thread: str) -> str:
    return "".join(m["text"] for m in bot_replies(h, thread)).replace("\n", "").replace(" ", "")


async def test_a_long_reply_goes_on_in_a_new_message_with_nothing_lost_or_repeated(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text=LONG))  # all at once: one piece far past a message's 12,000 characters
        d = await h.ws.mention(ALICE, GENERAL, "write a book")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: "w02599" in m["text"]
        )
        await h.settle()
        replies = bot_replies(h, d.message["ts"])
        assert len(replies) >= 2 and all(len(m["text"]) <= 12_000 and not m["streaming"] for m in replies)
        assert shown_text(h, d.message["ts"]) == LONG.replace(" ", "")
        assert not [c for c in h.ws.calls() if c.error]  # no msg_too_long, nothing refused


async def test_a_stream_breaking_in_its_second_message_repeats_nothing(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text=LONG, chunk_delay=0.0008))  # a few seconds: many pieces, two messages
        d = await h.ws.mention(ALICE, GENERAL, "write a book")
        # Limits of 60 s, not speed checks: the reply takes a few seconds alone, longer on a loaded machine.
        await h.ws.wait_for_call("chat.stopStream", timeout=60)  # the first message is full; the second one streams
        h.ws.fake.fail_next("chat.appendStream", "message_not_in_streaming_state")  # and breaks
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: "w02599" in m["text"], timeout=60
        )
        await h.settle()
        assert h.ws.calls("chat.update")  # finished by updating the broken message
        assert shown_text(h, d.message["ts"]) == LONG.replace(" ", "")  # its start not shown twice


async def test_a_stop_refused_by_a_passing_error_is_tried_again(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text=WORDS, chunk_delay=0.01))
        h.ws.fake.fail_next("chat.stopStream", "internal_error")
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        await h.ws.wait_for_message(
            channel=GENERAL,
            thread_ts=d.message["ts"],
            predicate=lambda m: not m.get("streaming") and m["text"] == WORDS,
        )
        await h.settle()
        assert [bool(c.error) for c in h.ws.calls("chat.stopStream")] == [True, False]
        assert len(bot_replies(h, d.message["ts"])) == 1


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_person_the_reply_may_not_ping_is_named_not_shown_by_id(
    fake_redis: aioredis.Redis, harness: Any, streaming: bool
) -> None:
    """A model knows people by id (an answer's ``answered_by``): with mentions off, its ``<@U_ALICE>`` showed as
    "@U_ALICE" ("as @U_ALICE chose"). Written as the name now (users.info), a mention cut between two deltas too;
    an id Slack doesn't know stays as it is."""
    pieces = [{"content": "Going with web, as <@U_AL"}, {"content": "ICE> chose (not <@U_NOBODY>)."}]
    async with harness(fake_redis, settings={**FAST, "reply_streaming": streaming}) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="q1")]),
            Reply(chunks=pieces, chunk_delay=FIRST_SEND_AFTER * 2),  # streamed: the first piece goes out alone
        )
        d = await h.ws.mention(ALICE, GENERAL, "which repo?")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        done = await h.ws.wait_for_message(
            channel=GENERAL,
            thread_ts=d.message["ts"],
            predicate=lambda m: not m.get("streaming") and "chose" in m["text"],
        )
        markdown = [b["text"] for b in done.get("blocks") or [] if b["type"] == "markdown"]
        shown = markdown[0] if markdown and not streaming else done["text"]  # posted: the text is its notification
        assert "as @\u2060alice chose" in shown and "U_ALICE" not in shown, shown
        assert "not @\u2060U_NOBODY" in shown and "<@" not in shown
        assert not h.ws.calls("chat.postEphemeral")  # nobody was pinged or told anything


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_long_reply_below_a_tools_line_is_posted_whole_within_slacks_limit(
    fake_redis: aioredis.Redis, harness: Any, streaming: bool
) -> None:
    """A tool's line above the reply and 12,000 characters of text below it: each message stays within Slack's
    ~12,000 characters a message's blocks carry, and nothing is lost. Before, posted (streaming off, a stream Slack
    refused or one broken), the first message was refused (msg_blocks_too_long) and the reply never appeared.
    Found by a break-it review."""
    text = " ".join(f"w{i:05d}" for i in range(1900))  # 13,299 characters, past one message with the tool's line
    settings = {**FAST, "reply_streaming": streaming, "agent": "bot.testing.approval_agent:build"}
    async with harness(fake_redis, settings=settings) as h:
        h.model.script(Reply(tool_calls=[tool_call("lookup_ticket", {"ticket_id": "T-1"}, id="t1")]), Reply(text=text))
        d = await h.ws.mention(ALICE, GENERAL, "ticket T-1?")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: "w01899" in str(m.get("blocks"))
        )
        await h.settle()
        assert not [(c.method, c.error) for c in h.ws.calls() if c.error]  # nothing refused
        shown = "".join(str(m.get("blocks")) for m in bot_replies(h, d.message["ts"]))
        assert all(f"w{i:05d}" in shown for i in range(0, 1900, 7)) and "lookup_ticket" in shown


@pytest.mark.parametrize("words", [1694, 1695, 1696])
async def test_a_posted_reply_whose_tool_line_grows_shorter_is_shown_once(words: int) -> None:
    """Post mode, straight on the fake Slack over HTTP: about 11,850 characters (around where the text needs a
    second message beside a tool's line) posted while the tool's line says it runs, then the line grows shorter as
    the tool ends. Every part of the text shows once: no message left behind showing the tail a second time. Found
    by a break-it review of the room kept for the line."""
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.fakeslack import Workspace
    from bot.slack.context import SlackContext
    from bot.slack.replies.streaming import ReplyStream
    from bot.slack.replies.unsupported import FeatureRefusals
    from bot.slack.transport.web_api import SlackWeb

    text = " ".join(f"w{i:05d}" for i in range(words))
    async with Workspace(bot_token="xoxb-test") as ws:
        web = SlackWeb(AsyncWebClient(token="xoxb-test", base_url=ws.api_url))
        thread = await web.post(GENERAL, thread_ts=None, text="ticket T-1?")
        assert thread is not None
        ctx = SlackContext(team_id="T_PLAYGROUND", channel_id=GENERAL, thread_ts=thread, requester=ALICE)
        reply = ReplyStream(web, ctx, refusals=FeatureRefusals(), streaming=False, interval=0.05)
        reply.task("t1", tool_name="lookup_ticket", status="in_progress")
        reply.text(text)
        await asyncio.sleep(0.6)  # posted while the tool runs
        reply.task("t1", tool_name="lookup_ticket", status="complete")
        await reply.close()
        shown = " ".join(m["text"] for m in ws.messages(GENERAL, thread_ts=thread) if m["ts"] != thread)
        assert shown.count(f"w{words - 1:05d}") == 1 and shown.count("w00000") == 1


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_reply_slack_refused_past_the_clients_retries_is_posted_again_later(
    fake_redis: aioredis.Redis, harness: Any, streaming: bool
) -> None:
    """Slack refuses every post (and stream) while the run's reply is written, past the client's own retries: the
    run completes, and its reply is posted again, whole, under a line saying why, once Slack takes it (the
    scheduler's item 30 s later, then a lease later). Before: the run completed and its reply was lost, nothing
    said. Found by a break-it review."""
    from datetime import timedelta

    from bot.agent.state import utcnow

    async with harness(fake_redis, settings={**FAST, "reply_streaming": streaming}) as h:
        h.model.script(Reply(text="Deployed **web**."))
        for method in ("chat.postMessage", "chat.startStream", "chat.appendStream", "chat.update"):
            h.ws.fake.refuse(method, "service_unavailable")
        d = await h.ws.mention(ALICE, GENERAL, "deploy web")
        await h.settle()
        assert not bot_replies(h, d.message["ts"])
        assert h.bot.scheduler is not None
        await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=31))  # still refused: tried again later
        await h.settle()
        for method in ("chat.postMessage", "chat.startStream", "chat.appendStream", "chat.update"):
            h.ws.fake.allow(method)
        await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=31 + 61))
        await h.settle()
        (again,) = bot_replies(h, d.message["ts"])
        assert "Deployed *web*" in str(again["blocks"]) or "Deployed **web**" in str(again["blocks"])
        assert "Posted again" in str(again["blocks"])
        await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=31 + 61 + 121))  # once
        await h.settle()
        assert len(bot_replies(h, d.message["ts"])) == 1


async def test_a_long_reply_reposted_in_part_posts_each_of_its_messages_once(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """A reply of two messages, refused whole; its repost's first message taken, its second refused (past the
    client's retries): the next try goes on from the second, so each message of it shows once (before: every try
    started again from the first, under another "Posted again"). Found by a break-it review."""
    from datetime import timedelta

    from bot.agent.state import utcnow

    async with harness(fake_redis, settings={**FAST, "reply_streaming": False}) as h:
        h.model.script(Reply(text=LONG))
        h.ws.fake.refuse("chat.postMessage", "service_unavailable")
        d = await h.ws.mention(ALICE, GENERAL, "write a book")
        await h.settle()
        assert not bot_replies(h, d.message["ts"])
        h.ws.fake.allow("chat.postMessage")
        h.ws.fake.fail_next("chat.postMessage", "internal_error", after=1)  # the repost's second message: refused
        h.ws.fake.fail_next("chat.postMessage", "internal_error")  # ... and on the client's two retries
        h.ws.fake.fail_next("chat.postMessage", "internal_error")
        assert h.bot.scheduler is not None
        for k in range(3):
            await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=31 + 61 * k))
            await h.settle()
        replies = bot_replies(h, d.message["ts"])
        assert len([m for m in replies if "Posted again" in str(m["blocks"])]) == 1
        assert shown_text(h, d.message["ts"]) == LONG.replace(" ", "")


JAPANESE = "これは日本語の長い返答です。モデルは空白を使わずに文章を書きます。" * 20  # ~700 characters, no spaces


async def test_a_reply_written_without_spaces_streams_while_the_model_writes_it(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Japanese (no spaces, no newlines) shows piece by piece, and ends exactly as written. Before: nothing showed
    until the model finished, then all of it at once, with no chat.appendStream (found by a break-it review)."""
    async with harness(fake_redis, settings=FAST) as h:
        pieces = [JAPANESE[i : i + 10] for i in range(0, len(JAPANESE), 10)]
        reply = Reply(chunks=[{"content": p} for p in pieces], chunk_delay=0.03)  # about 2 s of writing
        thread = await shown_while_written(h, reply, request="日本語で説明して", whole=JAPANESE)
        assert len(h.ws.calls("chat.appendStream")) >= 2
        assert [m["text"] for m in bot_replies(h, thread)] == [JAPANESE]  # nothing lost or doubled


async def test_a_long_run_without_spaces_shares_its_message_with_the_text_before_it(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """A 30,000-character blob with no spaces streams in pieces, its lead-in in the same message as its start.
    Before: the blob came as one piece at the end, and the lead-in, sent before, was left a message of its own."""
    blob = "A" * 30_000
    async with harness(fake_redis, settings=FAST) as h:
        parts = [{"content": "Here it is: "}] + [{"content": blob[i : i + 1000]} for i in range(0, 30_000, 1000)]
        h.model.script(Reply(chunks=parts, chunk_delay=0.02))
        d = await h.ws.mention(ALICE, GENERAL, "blob")
        thread = d.message["ts"]
        await h.ws.wait_for_message(
            channel=GENERAL,
            thread_ts=thread,
            predicate=lambda m: not m.get("streaming") and m["text"].endswith("A") and m["ts"] != thread,
        )
        await h.settle()
        replies = bot_replies(h, thread)
        assert replies[0]["text"].startswith("Here it is: A")
        assert "".join(m["text"] for m in replies) == "Here it is: " + blob
        assert all(len(m["text"]) <= 12_000 and not m["streaming"] for m in replies)
        assert not [c for c in h.ws.calls() if c.error]


def stopped_with_nothing(call: Any) -> bool:
    """Whether a chat.stopStream call added nothing to its message (no text, no chunks, no blocks)."""
    chunks = call.params.get("chunks")
    chunks = json.loads(chunks) if isinstance(chunks, str) else chunks
    return not chunks and not call.params.get("markdown_text") and not call.params.get("blocks")


def assert_one_whole_reply_stopped(h: Any, thread: str) -> None:
    """The reply is one message, its whole text, not streaming: stopped with nothing more (after the refusal),
    then updated with the whole text; nothing posted twice."""
    (reply,) = bot_replies(h, thread)
    assert not reply.get("streaming"), "left streaming until Slack's own timeout"
    assert [b["text"] for b in reply["blocks"] if b["type"] == "markdown"] == [WORDS]
    assert h.ws.calls("chat.postMessage") == []
    calls = [c for c in h.ws.calls() if c.method in ("chat.stopStream", "chat.update")]
    stops = [i for i, c in enumerate(calls) if c.method == "chat.stopStream" and not c.error]
    assert len(stops) == 1 and stopped_with_nothing(calls[stops[0]])
    assert calls[-1].method == "chat.update" and stops[0] < len(calls) - 1  # stopped, then updated


async def streaming_now(h: Any) -> str:
    """A mention whose reply (:data:`WORDS`, about 2 s of writing) is streaming now; its thread's ts."""
    h.model.script(Reply(text=WORDS, chunk_delay=0.03))
    d = await h.ws.mention(ALICE, GENERAL, "write a lot")
    thread = str(d.message["ts"])
    await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: bool(m.get("streaming")))
    return thread


@pytest.mark.parametrize("error", ["ratelimited", "internal_error", "invalid_arguments", "msg_too_long"])
async def test_a_stream_an_append_broke_midway_is_stopped_and_finished_in_place(
    fake_redis: aioredis.Redis, harness: Any, error: str
) -> None:
    """Slack refuses a chat.appendStream midway: the message is stopped (chat.stopStream with nothing more) and
    its whole text shown with chat.update. Before: updated but never stopped, so Slack showed it streaming until
    its own timeout (found by a break-it review)."""
    async with harness(fake_redis, settings=FAST) as h:
        thread = await streaming_now(h)
        h.ws.fake.fail_next("chat.appendStream", error)
        await h.settle()
        assert [c.error for c in h.ws.calls("chat.appendStream")].count(error) == 1
        assert_one_whole_reply_stopped(h, thread)


async def test_a_stream_whose_first_append_is_refused_is_stopped_and_finished_in_place(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text=WORDS, chunk_delay=0.03))
        h.ws.fake.fail_next("chat.appendStream", "invalid_arguments")  # the first append after chat.startStream
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        await h.settle()
        assert h.ws.calls("chat.appendStream")[0].error == "invalid_arguments"
        assert_one_whole_reply_stopped(h, d.message["ts"])


async def test_a_stream_slacks_servers_failed_midway_is_stopped_and_finished_in_place(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """HTTP 500s past the client's two retries on a chat.appendStream midway, as a network failure would."""
    async with harness(fake_redis, settings=FAST) as h:
        thread = await streaming_now(h)
        for _ in range(3):
            h.ws.fake.fail_next("chat.appendStream", "internal_error", status=500)
        await h.settle()
        assert [c.status for c in h.ws.calls("chat.appendStream")].count(500) == 3
        assert_one_whole_reply_stopped(h, thread)


@pytest.mark.parametrize(("error", "times"), [("invalid_blocks", 1), ("msg_too_long", 1), ("internal_error", 2)])
async def test_a_stream_whose_stop_is_refused_is_stopped_with_nothing_and_finished_in_place(
    fake_redis: aioredis.Redis, harness: Any, error: str, times: int
) -> None:
    """Slack refuses the chat.stopStream carrying the message's last text (a passing error: on its retry too):
    the message is stopped with nothing more, then shows its whole text with chat.update. Before: left streaming
    until Slack's own timeout (found by a break-it review)."""
    async with harness(fake_redis, settings=FAST) as h:
        for _ in range(times):
            h.ws.fake.fail_next("chat.stopStream", error)
        h.model.script(Reply(text=WORDS, chunk_delay=0.03))
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        await h.settle()
        assert [c.error for c in h.ws.calls("chat.stopStream")] == [error] * times + [None]
        assert_one_whole_reply_stopped(h, d.message["ts"])


async def test_a_stream_slack_ended_itself_is_not_stopped_again(fake_redis: aioredis.Redis, harness: Any) -> None:
    """Slack answers message_not_in_streaming_state (a person pressed Stop, or its timeout): the message is
    finished with chat.update only; chat.stopStream would be refused the same way."""
    async with harness(fake_redis, settings=FAST) as h:
        thread = await streaming_now(h)
        h.ws.fake.fail_next("chat.appendStream", "message_not_in_streaming_state")
        await h.settle()
        assert h.ws.calls("chat.stopStream") == []
        (reply,) = bot_replies(h, thread)
        assert [b["text"] for b in reply["blocks"] if b["type"] == "markdown"] == [WORDS]


async def test_a_stop_after_a_fallback_refused_for_now_is_tried_again_and_the_text_shown_again(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The stop after an append broke is refused with a passing error (and on its retry): it is tried again at the
    next send, and the message updated again after it (a stop may show the streamed text again)."""
    async with harness(fake_redis, settings=FAST) as h:
        thread = await streaming_now(h)
        h.ws.fake.fail_next("chat.appendStream", "invalid_arguments")
        h.ws.fake.fail_next("chat.stopStream", "internal_error")
        h.ws.fake.fail_next("chat.stopStream", "internal_error")
        await h.settle()
        assert [c.error for c in h.ws.calls("chat.stopStream")] == ["internal_error", "internal_error", None]
        assert_one_whole_reply_stopped(h, thread)
