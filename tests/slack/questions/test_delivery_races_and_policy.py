"""Odd deliveries: retries, double clicks, other users, other processes, restarts, expiry, outages, limits."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.render.modals import MODAL_INPUT_BLOCK
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    SINGLE,
    ask,
    has_controls,
    is_answer_form,
    is_choice_block,
    past_deadline,
    resumed_requests,
)
from bot.testing.tcp_proxy import TcpProxy

GENERAL, RANDOM = "C_GENERAL", "C_RANDOM"


async def test_retried_mention_while_thinking_starts_one_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention", "message.im")) as h:
        h.model.script(Reply(text="Only once.", delay=1.0))
        d = await h.ws.mention(ALICE, GENERAL, "think hard")
        first = d.ack
        assert first is not None
        retry = await h.ws.sender.resend(first, retry_num=1)
        assert retry.status == 200 and retry.event_id == first.event_id
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Only once."
        )
        await h.settle()
        assert len(h.model.requests) == 1
        assert [m["text"] for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]) if m.get("bot_id")] == [
            "Only once."
        ]


async def test_mention_also_delivered_as_message_event_starts_one_run(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:  # app_mention + message.channels: Slack sends both
        h.model.script(Reply(text="One reply."))
        d = await h.ws.mention(ALICE, GENERAL, "hello")
        assert len(d.acks) == 2
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "One reply."
        )
        await h.settle()
        assert len(h.model.requests) == 1


async def test_event_seen_only_as_a_retry_is_processed(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention",)) as h:
        h.model.script(Reply(text="Got it."))
        msg = h.ws.add_user_message(ALICE, GENERAL, "<@U_BOT> are you there?")
        event = {
            "type": "app_mention",
            "user": ALICE,
            "text": msg["text"],
            "ts": msg["ts"],
            "channel": GENERAL,
            "event_ts": msg["ts"],
            "team": "T_PLAYGROUND",
        }
        ack = await h.ws.sender.send_event(event, retry_num=2, retry_reason="http_timeout")
        assert ack.status == 200
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=msg["ts"], predicate=lambda m: m["text"] == "Got it.")


async def test_click_ack_is_fast_while_the_model_takes_6s(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then=Reply(text="Slow reply.", delay=6.0))
        ack = await h.ws.click(q, "api", user=ALICE)
        assert ack.status == 200 and ack.duration_ms < 1000, ack.duration_ms
        updated = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: m["ts"] == q["ts"] and not has_controls(m), timeout=2
        )
        assert "answered" in json.dumps(updated["blocks"])  # the question closes before the model answers
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Slow reply.", timeout=10
        )


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_answer_button_opens_modal_while_redis_is_slow(real_redis: aioredis.Redis, harness: Any) -> None:
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = aioredis.from_url(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=10)
        async with harness(client) as h:
            _thread, q = await ask(h, {"question": "Why?"})
            proxy.delay = 3.5
            ack = await h.ws.click(q, "Answer", user=ALICE)
            assert ack.status == 200 and ack.duration_ms < 1000
            loading = await h.ws.wait_for_view(user=ALICE, timeout=2)  # within the trigger's 3 s, Redis or not
            assert "Opening" in json.dumps(loading["blocks"])
            opened = h.ws.calls("views.open")
            assert len(opened) == 1 and not opened[0].error
            proxy.delay = 0
            view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form, timeout=10)
            assert [b["block_id"] for b in view["blocks"]][-1] == MODAL_INPUT_BLOCK
        await client.aclose()


async def test_double_click_and_second_user_resume_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Chosen.")

        async def later(delay: float, label: str, user: str) -> Any:
            await asyncio.sleep(delay)
            return await h.ws.click(q, label, user=user, as_seen=True)

        acks = await asyncio.gather(later(0, "api", ALICE), later(0.15, "web", ALICE), later(0.05, "web", BOB))
        assert all(a.status == 200 for a in acks)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Chosen.")
        await h.settle()
        assert resumed_requests(h.model) == 1
        refusal = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE> can answer" in refusal["text"]
        dup = await h.ws.wait_for_ephemeral(user=ALICE)
        assert dup["text"] in (  # her own double click: not "answered by @her", and the other choice not taken
            "You had already answered *api*; your choice *web* was not recorded.",
            "You had already answered *web*; your choice *api* was not recorded.",
        )


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


async def test_restart_and_second_process(fake_server: Any, harness: Any) -> None:
    import fakeredis

    first = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(first) as h:
        thread, q = await ask(h, then="After restart.")
        old = h.processes.pop(0)
        await old.stop()  # the process that asked is gone
        second = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server))
        h.route_to(second)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "After restart."
        )

        # a question asked by process 2 and answered through process 3
        thread2_q = await ask(h, then="Via another process.")
        third = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server))
        h.route_to(third)
        await h.ws.click(thread2_q[1], "api", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread2_q[0], predicate=lambda m: m["text"] == "Via another process."
        )


async def test_expired_question_click_closes_it_from_stored_state_and_starts_nothing(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.settle()
        run_id = (await past_deadline(h, thread)).run_id
        before = len(h.model.requests)
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        closed = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: m["ts"] == q["ts"] and not has_controls(m)
        )
        assert "expired" in json.dumps(closed["blocks"]) and "Which repo?" in json.dumps(closed["blocks"])
        await h.settle()
        assert len(h.model.requests) == before
        assert (await h.bot.agent.get_run(run_id)).status == "expired"  # kept for the retention window


async def test_click_after_the_record_is_gone_writes_nothing_to_the_message(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        await h.settle()
        keys = [k async for k in fake_redis.scan_iter(match=f"{prefix}run:*")]
        await fake_redis.delete(*keys)  # past the retention window
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        await h.settle()
        assert h.ws.calls("chat.update") == []  # nothing stored to render it from: the message is left alone


async def test_model_failure_posts_retry_that_continues(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(status=500), Reply(text="Recovered.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q, "web", user=ALICE)
        failure = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "model call failed" in m["text"]
        )
        assert "HTTP 500" in failure["text"] and has_controls(failure)
        await h.ws.click(failure, "Retry", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Recovered.")
        last_tool = next(m for m in reversed(h.model.requests[-1]["messages"]) if m["role"] == "tool")
        assert json.loads(last_tool["content"])["answer"] == "web"  # not asked again
        retried = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == failure["ts"])
        assert not has_controls(retried)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_redis_down_during_click_says_try_again(real_redis: aioredis.Redis, harness: Any) -> None:
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = aioredis.from_url(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=2, socket_connect_timeout=1)
        async with harness(client) as h:
            thread, q = await ask(h, then="Back again.")
            proxy.cut()
            ack = await h.ws.click(q, "web", user=ALICE)
            assert ack.status == 200
            note = await h.ws.wait_for_ephemeral(user=ALICE, timeout=8)
            assert "try again" in note["text"]
            still = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
            assert has_controls(still)
            proxy.restore()
            await h.ws.click(q, "web", user=ALICE)
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back again."
            )
        await client.aclose()


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


async def test_limits_hold_and_full_labels_reach_the_model(fake_redis: aioredis.Redis, harness: Any) -> None:
    long_label = "L" * 119 + "!"
    cases = [
        {
            "question": "Pick many",
            "selection_mode": "multi_select",
            "options": [{"label": f"opt {i}"} for i in range(12)],
        },
        {"question": "Pick one", "options": [{"label": f"choice {i}", "description": "d" * 200} for i in range(30)]},
        {"question": "Long label", "options": [{"label": long_label}, {"label": "short"}]},
        {"question": "Q" * 3500 + " & <tags>", "options": [{"label": "yes"}, {"label": "no"}]},
    ]
    async with harness(fake_redis) as h:
        for args in cases:
            h.model.reset()
            thread, q = await ask(h, args, then="ok")
            if args["question"] == "Long label":
                shown = [e["text"]["text"] for b in q["blocks"] if is_choice_block(b) for e in b["elements"]]
                assert all(len(t) <= 75 for t in shown) and shown[0].endswith("…")
                await h.ws.click(q, shown[0], user=ALICE)
                await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "ok")
                last = json.loads(
                    next(m for m in reversed(h.model.requests[-1]["messages"]) if m["role"] == "tool")["content"]
                )
                assert last["answer"] == long_label and last["answer_type"] == "option"
            types = [e["type"] for b in q["blocks"] if is_choice_block(b) for e in b["elements"]]
            if args["question"] == "Pick many":
                assert types == ["multi_static_select", "button"]
            if args["question"] == "Pick one":
                assert types == ["static_select"]
        await h.settle()
        posts = h.ws.calls("chat.postMessage") + h.ws.calls("chat.update")
        assert posts and [c.error for c in posts if c.error] == []


async def test_duplicate_labels_and_too_many_options_go_back_to_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(
                tool_calls=[
                    tool_call("ask_user", {"question": "Dup", "options": [{"label": "a"}, {"label": "a"}]}, id="d1")
                ]
            ),
            Reply(
                tool_calls=[
                    tool_call(
                        "ask_user", {"question": "Many", "options": [{"label": str(i)} for i in range(101)]}, id="d2"
                    )
                ]
            ),
            Reply(text="I'll ask differently."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "I'll ask differently."
        )
        errors = [json.loads(m["content"])["error"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert "unique; repeated: a" in errors[0] and "too many options (101); offer at most 100" in errors[1]


async def test_secrets_never_reach_logs(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, slack_secrets: tuple[str, str]
) -> None:
    token, secret = slack_secrets
    caplog.set_level(logging.DEBUG)
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("assistant.threads.setStatus", "invalid_auth")
        _thread, q = await ask(h)
        await h.ws.click(q, "web", user=ALICE)
        await h.settle()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "assistant.threads.setStatus refused: invalid_auth" in text  # Slack errors are logged with Slack's code
    assert token not in text and secret not in text


async def test_web_and_worker_processes_split_the_work(fake_server: Any, harness: Any) -> None:
    """``web`` processes ack and queue; a ``worker`` process (sharing only Redis) runs the work."""
    import fakeredis

    async with harness(fakeredis.FakeAsyncRedis(server=fake_server)) as h:
        web = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="web")
        worker = await h.start_process(fakeredis.FakeAsyncRedis(server=fake_server), role="worker")
        h.route_to(web)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.bot.work(stop=stop))
        try:
            thread, q = await ask(h, then="Split works.")
            ack = await h.ws.click(q, "api", user=ALICE)
            assert ack.status == 200
            await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Split works."
            )
            await h.ws.click(q, "web", user=BOB, as_seen=True)
            refusal = await h.ws.wait_for_ephemeral(user=BOB)
            assert "Only <@U_ALICE> can answer" in refusal["text"]
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
        assert resumed_requests(h.model) == 1
