"""The bot in Slack's assistant pane (AsyncAssistant), end to end through the fake Slack: greeting and suggested
prompts when a thread opens, the title from the first request, the channel beside the pane told to the model and
followed as it changes, replies streamed there, and questions answered there exactly as in channels."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.config import DEFAULT_GREETING
from bot.fakeslack.state import BOT_USER_ID, dm_channel_id
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, SINGLE, has_controls

PANE = dm_channel_id(ALICE)
FAST = {"stream_interval": 0.2}


def first_user_content(h: Any, request: int = -1) -> str:
    return str([m for m in h.model.requests[request]["messages"] if m["role"] == "user"][-1]["content"])


async def test_a_new_pane_thread_is_greeted_with_suggested_prompts(fake_redis: aioredis.Redis, harness: Any) -> None:
    prompts = '[{"title": "Deploy", "message": "Deploy the api"}, "Summarise this channel"]'
    async with harness(fake_redis, settings={**FAST, "assistant_prompts": prompts}) as h:
        thread = await h.ws.open_assistant(ALICE, context_channel=GENERAL)
        greeting = await h.ws.wait_for_message(channel=PANE, thread_ts=thread)
        assert greeting["blocks"][0]["text"] == DEFAULT_GREETING
        call = await h.ws.wait_for_call("assistant.threads.setSuggestedPrompts")
        assert call.params["thread_ts"] == thread and not call.error
        assert h.ws.state.suggested_prompts[-1]["prompts"] == [
            {"title": "Deploy", "message": "Deploy the api"},
            {"title": "Summarise this channel", "message": "Summarise this channel"},
        ]
        assert h.model.requests == []  # opening the pane runs no model


async def test_a_pane_threads_title_reads_as_slack_shows_its_request(fake_redis: aioredis.Redis, harness: Any) -> None:
    """Found by a break-it pass: the title showed Slack's markup (``<@U_BOB>``, ``<#C_RANDOM|random>``, a link)."""
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text="ok"))
        thread = await h.ws.open_assistant(ALICE, context_channel=GENERAL)
        await h.ws.wait_for_call("assistant.threads.setSuggestedPrompts")
        await h.ws.dm(
            ALICE, "ask <@U_BOB> about <#C_RANDOM|random> and <https://x.example/a|the doc>", thread_ts=thread
        )
        title = await h.ws.wait_for_call("assistant.threads.setTitle")
        assert title.params["title"] == "ask @bob about #random and the doc"
        await h.settle()


async def test_a_request_in_the_pane_names_the_thread_and_tells_the_model_the_channel(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        # written slower than a reply's first send waits, so it streams
        h.model.script(Reply(text="Here is the summary.", chunk_delay=0.15), Reply(text="And random too."))
        thread = await h.ws.open_assistant(ALICE, context_channel=GENERAL)
        await h.ws.wait_for_call("assistant.threads.setSuggestedPrompts")
        await h.ws.dm(ALICE, "summarise this channel please", thread_ts=thread)
        reply = await h.ws.wait_for_message(
            channel=PANE, thread_ts=thread, predicate=lambda m: m["text"] == "Here is the summary."
        )
        assert reply["thread_ts"] == thread and h.ws.calls("chat.startStream")  # streamed in the pane too
        title = await h.ws.wait_for_call("assistant.threads.setTitle")
        assert title.params["title"] == "summarise this channel please"
        assert f"<#{GENERAL}>" in first_user_content(h) and first_user_content(h).endswith(
            "summarise this channel please"
        )
        await h.settle()
        # The person switches channel beside the pane; the next request knows it, and the title stays.
        await h.ws.change_assistant_context(ALICE, thread, "C_RANDOM")
        await h.ws.dm(ALICE, "and this one?", thread_ts=thread)
        await h.ws.wait_for_message(channel=PANE, thread_ts=thread, predicate=lambda m: m["text"] == "And random too.")
        assert "<#C_RANDOM>" in first_user_content(h)
        assert len(h.ws.calls("assistant.threads.setTitle")) == 1


async def test_a_question_in_the_pane_is_answered_there(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Deploying web."))
        thread = await h.ws.open_assistant(ALICE)
        await h.ws.dm(ALICE, "deploy something", thread_ts=thread)
        question = await h.ws.wait_for_message(channel=PANE, thread_ts=thread, predicate=has_controls)
        await h.ws.click(question, "web", user=ALICE)
        await h.ws.wait_for_message(channel=PANE, thread_ts=thread, predicate=lambda m: m["text"] == "Deploying web.")
        answered = next(m for m in h.ws.messages(PANE, thread_ts=thread) if m["ts"] == question["ts"])
        assert not has_controls(answered)
        assert "<#" not in first_user_content(h, 0)  # no channel beside the pane: nothing said of one
        statuses = [c.params for c in h.ws.calls("assistant.threads.setStatus")]
        assert statuses and all(s["channel_id"] == PANE and s["thread_ts"] == thread for s in statuses)


async def test_a_plain_dm_thread_is_not_taken_for_a_pane_thread(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=FAST) as h:
        h.model.script(Reply(text="Hello."), Reply(text="Again."))
        d = await h.ws.dm(ALICE, "hi")
        await h.ws.wait_for_message(channel=PANE, predicate=lambda m: m["text"] == "Hello.")
        await h.ws.dm(ALICE, "in the thread", thread_ts=d.message["ts"])
        again = await h.ws.wait_for_message(channel=PANE, predicate=lambda m: m["text"] == "Again.")
        assert again["thread_ts"] == d.message["ts"] and again["user"] == BOT_USER_ID
        assert h.ws.calls("assistant.threads.setTitle") == [] and first_user_content(h) == "in the thread"


async def test_the_pane_works_through_a_web_and_worker_split(fake_server: Any, harness: Any) -> None:
    """The ``web`` role saves the pane's context and queues the rest; a ``worker`` greets and runs the agent."""
    import asyncio

    import fakeredis

    async with harness(fakeredis.FakeAsyncRedis(server=fake_server), settings=FAST) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.bot.queue.consume(worker.bot.run_job, stop=stop, block_ms=50))
        try:
            h.model.script(Reply(text="From the worker."))
            thread = await h.ws.open_assistant(ALICE, context_channel=GENERAL)
            await h.ws.wait_for_call("assistant.threads.setSuggestedPrompts")
            await h.ws.dm(ALICE, "hello from the pane", thread_ts=thread)
            await h.ws.wait_for_message(
                channel=PANE, thread_ts=thread, predicate=lambda m: m["text"] == "From the worker."
            )
            assert f"<#{GENERAL}>" in first_user_content(h)  # the context saved by the web process
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
