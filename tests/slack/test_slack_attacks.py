"""Attacks on the Slack frontend: odd payloads, tampering, escaping, model misbehaviour, Slack and Redis failures.

Each test asserts what a user would expect. Known bugs are ``xfail(strict=True)`` with the reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.agent.state import RunState, utcnow
from bot.errors import StoreUnavailable
from bot.playground.sender import block_actions_payload, sign, view_submission_payload
from bot.playground.state import dm_channel_id
from bot.slack.blocks import ACT_SELECT, ACT_SUBMIT
from bot.slack.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.slack.refs import QuestionRef
from bot.store import Keys
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.tcp_proxy import TcpProxy

ALICE, BOB = "U_ALICE", "U_BOB"
GENERAL = "C_GENERAL"
SINGLE = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
MULTI = {
    "question": "What next?",
    "selection_mode": "multi_select",
    "options": [{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Refactor"}],
}
FREE = {"question": "What is the goal?"}


def is_answer_form(view: dict[str, Any]) -> bool:
    """The answer modal's form (it opens as a loading modal first)."""
    return view.get("callback_id") == "ask_answer_modal"


# --- helpers -------------------------------------------------------------------------------------


def has_controls(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message.get("blocks", []))


def resumed_requests(model: FakeOpenAI) -> int:
    return sum(1 for r in model.requests if r["messages"][-1]["role"] == "tool")


def tool_results(model: FakeOpenAI) -> list[dict[str, Any]]:
    """Every tool message of the last model request, parsed when JSON."""
    out = []
    for m in model.requests[-1]["messages"]:
        if m["role"] == "tool":
            try:
                out.append(json.loads(m["content"]))
            except ValueError:
                out.append({"raw": m["content"]})
    return out


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log records that carry an exception (what Bolt logs when a listener raises)."""
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]


def mrkdwn_texts(node: Any) -> list[str]:
    """Every mrkdwn text object's text in ``node`` (blocks), where Slack parses <!channel>, links and mentions."""
    if isinstance(node, list):
        return [t for item in node for t in mrkdwn_texts(item)]
    if not isinstance(node, dict):
        return []
    own = [str(node["text"])] if node.get("type") == "mrkdwn" and "text" in node else []
    return own + [t for v in node.values() if isinstance(v, (dict, list)) for t in mrkdwn_texts(v)]


async def ask(
    h: Any, args: dict[str, Any] = SINGLE, *, user: str = ALICE, then: str | Reply = "Done.", call_id: str = "c1"
) -> tuple[str, dict[str, Any]]:
    """Mention the bot, have the model ask ``args``, and return (thread_ts, the question message)."""
    h.model.script(
        Reply(tool_calls=[tool_call("ask_user", args, id=call_id)]),
        then if isinstance(then, Reply) else Reply(text=then),
    )
    d = await h.ws.mention(user, GENERAL, "go")
    q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], q


def button(q: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The ``index``-th button of a question message, as a block_actions ``action``."""
    found = [(b, e) for b in q["blocks"] if b["type"] == "actions" for e in b["elements"] if e["type"] == "button"]
    block, element = found[index]
    return {
        "type": "button",
        "action_id": element["action_id"],
        "block_id": block["block_id"],
        "text": element["text"],
        "value": element.get("value", ""),
        "action_ts": f"{time.time():.6f}",
    }


def action_payload(
    h: Any,
    q: dict[str, Any],
    action: dict[str, Any],
    *,
    user: str = ALICE,
    state_values: dict[str, Any] | None = None,
    is_ephemeral: bool = False,
) -> dict[str, Any]:
    message = {k: v for k, v in q.items() if k != "channel"}
    return block_actions_payload(
        directory=h.ws.state.directory,
        user=user,
        channel=q["channel"],
        message=message,
        is_ephemeral=is_ephemeral,
        actions=[action],
        state_values=state_values or {},
        trigger_id=h.ws.state.mint_trigger(user),
        response_url="http://127.0.0.1:9/response",
    )


async def still_open(h: Any, q: dict[str, Any]) -> bool:
    await h.settle()
    current = next(m for m in h.ws.messages(q["channel"], thread_ts=q["thread_ts"]) if m["ts"] == q["ts"])
    return has_controls(current)


async def post_raw(url: str, body: str, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, data=body.encode(), headers=headers) as resp:
        return resp.status


# --- signatures ----------------------------------------------------------------------------------


async def test_bad_signature_stale_timestamp_and_missing_headers_are_401_and_start_nothing(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str]
) -> None:
    _token, secret = slack_secrets
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="must not run"))
        msg = h.ws.add_user_message(ALICE, GENERAL, "<@U_BOT> hi")
        envelope = {
            "type": "event_callback",
            "team_id": "T_PLAYGROUND",
            "api_app_id": "A_PLAYGROUND",
            "event_id": "EvFORGED01",
            "event_time": int(time.time()),
            "event": {"type": "app_mention", "user": ALICE, "text": msg["text"], "ts": msg["ts"], "channel": GENERAL},
        }
        body = json.dumps(envelope)
        now = str(int(time.time()))
        url = h.processes[0].url
        base = {"Content-Type": "application/json"}
        wrong = {**base, "X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign("not-the-secret", now, body)}
        old = str(int(time.time()) - 600)
        stale = {**base, "X-Slack-Request-Timestamp": old, "X-Slack-Signature": sign(secret, old, body)}
        tampered = {**base, "X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign(secret, now, body + " ")}
        statuses = [await post_raw(url, body, hd) for hd in (wrong, stale, tampered, base)]
        assert statuses == [401, 401, 401, 401]
        await h.settle()
        assert h.model.requests == []
        assert h.ws.calls("chat.postMessage") == [] and h.ws.calls("reactions.add") == []


# --- malformed and tampered interaction payloads ------------------------------------------------


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
        assert notes[-1] == "Select at least one option, then Submit."
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
        assert sum("Your answer was recorded." in t for t in told) == 2, told  # her own: not "answered by her"


# --- escaping ------------------------------------------------------------------------------------


async def test_special_characters_in_question_and_labels_are_escaped_and_full_labels_reach_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    label = "<!channel> & <@U_BOB> 🚀 ünïcödé"
    args = {"question": "Ping <!here> & <https://evil|click> 🤖?", "options": [{"label": label}, {"label": "ok"}]}
    async with harness(fake_redis) as h:
        thread, q = await ask(h, args, then="Fine.")
        shown = json.dumps(mrkdwn_texts(q["blocks"]), ensure_ascii=False)  # plain_text never pings
        assert "<!here>" not in shown and "<!channel>" not in shown and "<https://evil" not in shown
        assert "&lt;!here&gt; &amp; &lt;https://evil|click&gt; 🤖?" in shown
        await h.ws.click(q, label, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Fine.")
        assert tool_results(h.model)[-1]["answer"] == label
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        closed_text = json.dumps(mrkdwn_texts(closed["blocks"]), ensure_ascii=False)
        assert "<!channel>" not in closed_text and "&lt;!channel&gt;" in closed_text


async def test_typed_answer_with_channel_ping_and_markup_is_escaped(fake_redis: aioredis.Redis, harness: Any) -> None:
    typed = "<!channel> <@U_BOB> *bold* & <https://evil.example|safe link> 🎉"
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Thanks.")
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.submit_view(view, {MODAL_INPUT_BLOCK: {ACT_TEXT: typed}}, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Thanks.")
        assert tool_results(h.model)[-1]["answer"] == typed
        await h.settle()
        for call in h.ws.calls("chat.postMessage") + h.ws.calls("chat.update"):
            sent = json.dumps(call.params, ensure_ascii=False)
            assert "<!channel>" not in sent and "<https://evil" not in sent, sent


async def test_question_text_fallback_does_not_ping_channel(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, {"question": "Did you mean <!channel>?", "options": [{"label": "yes"}]}, then="k")
        await h.ws.click(q, "yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "k")
        await h.settle()
        texts = [str(c.params.get("text")) for c in h.ws.calls("chat.postMessage") + h.ws.calls("chat.update")]
        assert not [t for t in texts if "<!channel>" in t], texts


async def test_modal_shows_the_question_escaped_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, {"question": "Is a < b & c?"})
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        section = next(b for b in view["blocks"] if b["type"] == "section")
        assert section["text"]["text"] == "Is a &lt; b &amp; c?"


async def test_thread_reply_with_slack_entities_is_unescaped_for_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Noted.")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "a &lt; b &amp;&amp; c")  # what Slack sends for a < b && c
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Noted.")
        closed = next(m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["ts"] == q["ts"])
        assert "&amp;lt;" not in json.dumps(closed["blocks"])
        assert tool_results(h.model)[-1]["answer"] == "a < b && c"


async def test_huge_typed_answer_in_thread_reaches_model_whole(fake_redis: aioredis.Redis, harness: Any) -> None:
    typed = ("x" * 99 + " ") * 100  # 10,000 characters
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Read it all.")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, typed)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Read it all.")
        assert tool_results(h.model)[-1]["answer"] == typed.strip()
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error] == []
        assert not await still_open(h, q)


# --- the model misbehaving -----------------------------------------------------------------------


async def test_bad_tool_arguments_go_back_to_the_model(fake_redis: aioredis.Redis, harness: Any) -> None:
    bad = [
        tool_call("ask_user", "[1, 2, 3]", id="b1"),
        tool_call("ask_user", '"just a string"', id="b2"),
        tool_call("ask_user", "{not json", id="b3"),
        tool_call("ask_user", {"question": "Pick", "options": [{"label": ""}, {"label": "  "}]}, id="b4"),
        tool_call("ask_user", {"question": "Many", "options": [{"label": f"o{i}"} for i in range(1000)]}, id="b5"),
        tool_call("ask_user", {"question": "   "}, id="b6"),
        tool_call("ask_user", {"question": "x", "selection_mode": "multi_select"}, id="b7"),
        tool_call("ask_user", {"question": 42, "options": "a,b"}, id="b8"),
    ]
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=bad), Reply(text="I will behave."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "I will behave."
        )
        results = tool_results(h.model)
        assert len(results) == len(bad) and all("error" in r for r in results), results
        assert not any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]))


async def test_huge_question_is_shortened_on_screen_but_whole_for_the_model(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    question = "Why? " * 40_000  # 200k characters
    async with harness(fake_redis) as h:
        thread, q = await ask(h, {"question": question.strip()}, then="ok")
        assert "question shortened" in json.dumps(q["blocks"])
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "because")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "ok")
        await h.settle()
        assert [c.error for c in h.ws.calls() if c.error] == []


async def test_100_long_options_with_a_long_question_fit_in_one_message(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    args = {
        "question": "Choose carefully. " * 200,
        "options": [{"label": f"{i:03d} " + "long label " * 10, "description": "d" * 100} for i in range(100)],
    }
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", args, id="c1")]))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], timeout=5)
        await h.settle()
        assert [c.error for c in h.ws.calls("chat.postMessage") if c.error] == []
        assert any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]))


async def test_ask_user_and_another_tool_in_one_turn(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(
                tool_calls=[
                    tool_call("lookup", {"q": "x"}, id="t0"),
                    tool_call("ask_user", SINGLE, id="t1"),
                    tool_call("ask_user", FREE, id="t2"),
                    tool_call("nope", "{}", id="t3"),
                ]
            ),
            Reply(text="All done."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q1, "api", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        assert "What is the goal?" in json.dumps(q2["blocks"])
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "ship it")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "All done.")
        assert len(h.model.requests) == 2
        results = tool_results(h.model)
        assert "error" in results[0] and results[1]["answer"] == "api" and results[2]["answer"] == "ship it"
        assert "error" in results[3]


async def test_empty_model_stream_finishes_with_a_visible_reply(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(chunks=[]))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        reply = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"])
        assert reply["text"] == "(no reply)"


async def test_double_click_does_not_answer_the_next_question_when_call_ids_repeat(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    second = {"question": "Delete production?", "options": [{"label": "no"}, {"label": "yes"}]}
    async with harness(fake_redis) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", SINGLE, id="call_0")]),
            Reply(tool_calls=[tool_call("ask_user", second, id="call_0")]),
            Reply(text="Deleted production."),
        )
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        q1 = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(q1, "web", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and m["ts"] != q1["ts"]
        )
        await h.ws.click(q1, "web", user=ALICE, as_seen=True)  # the second half of a double click, delivered late
        await h.settle()
        assert resumed_requests(h.model) == 1, "the second question was answered by a click on the first"
        assert h.ws.ephemerals(user=ALICE)[-1]["text"] == "Your answer was recorded."


# --- conversation flow ---------------------------------------------------------------------------


async def test_blank_mention_while_question_open_is_not_an_answer(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE)
        await h.ws.mention(ALICE, GENERAL, "<@U_BOT>", thread_ts=thread)
        await h.settle()
        assert resumed_requests(h.model) == 0, tool_results(h.model)
        assert await still_open(h, q)


async def test_thread_reply_and_mention_while_running(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="Slow.", delay=1.0))
        d = await h.ws.mention(ALICE, GENERAL, "think")
        thread = d.message["ts"]
        await h.ws.wait_for_call("reactions.add")
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "hurry up")  # not a question: ignored
        await h.ws.mention(ALICE, GENERAL, "are you there?", thread_ts=thread)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "still working" in note["text"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Slow.")
        await h.settle()
        assert len(h.model.requests) == 1


async def test_follow_up_mention_on_open_multi_select_names_options_or_gets_a_hint(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, MULTI, call_id="m1", then="Planned.")
        await h.ws.mention(ALICE, GENERAL, "whatever you think", thread_ts=thread)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "Tick the options" in note["text"]
        assert await still_open(h, q) and resumed_requests(h.model) == 0
        await h.ws.mention(ALICE, GENERAL, "add tests, 3", thread_ts=thread)  # a name and a number
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Planned.")
        assert tool_results(h.model)[-1]["answers"] == ["Add tests", "Refactor"]


async def test_question_in_a_dm_is_answered_by_click(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="DM done."))
        d = await h.ws.dm(ALICE, "help")
        channel = dm_channel_id(ALICE)
        q = await h.ws.wait_for_message(channel=channel, predicate=has_controls)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=channel, predicate=lambda m: m["text"] == "DM done.")
        assert q["thread_ts"] == d.message["ts"]
        assert tool_results(h.model)[-1]["answer"] == "api"


async def test_retried_old_event_after_completion_starts_nothing(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, subscriptions=("app_mention",)) as h:
        h.model.script(Reply(text="Only once."))
        d = await h.ws.mention(ALICE, GENERAL, "hi")
        await h.ws.wait_for_message(channel=GENERAL, predicate=lambda m: m["text"] == "Only once.")
        await h.settle()
        assert d.ack is not None
        for n in (1, 2, 3):
            assert (await h.ws.retry(d.ack, n)).status == 200
        await h.settle()
        assert len(h.model.requests) == 1


# --- Retry ---------------------------------------------------------------------------------------


async def test_retry_twice_by_other_user_and_after_completion(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(status=500), Reply(text="Recovered.", delay=0.3))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        failure = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(failure, "Retry", user=BOB)
        refusal = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE>" in refusal["text"]
        await asyncio.gather(
            h.ws.click(failure, "Retry", user=ALICE, as_seen=True),
            h.ws.click(failure, "Retry", user=ALICE, as_seen=True),
        )
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Recovered.")
        await h.settle()
        await h.ws.click(failure, "Retry", user=ALICE, as_seen=True)  # after completion
        await h.settle()
        assert len(h.model.requests) == 2
        replies = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if m["text"] == "Recovered."]
        assert len(replies) == 1
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert len(notes) == 2, notes


# --- Slack API failures --------------------------------------------------------------------------


async def test_chat_update_failing_after_click_still_resumes_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        h.ws.fake.fail_next("chat.update", "internal_error")
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Went on.")
        await h.ws.click(q, "web", user=ALICE)  # the buttons are still shown
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert note["text"] == "Your answer was recorded."
        await h.settle()
        assert resumed_requests(h.model) == 1


async def test_question_post_failing_falls_back_to_text_answerable_by_reply(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "internal_error")
        h.model.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Typed ok."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        plain = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread)
        assert "Which repo?" in plain["text"] and "api" in plain["text"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "web")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Typed ok.")
        assert tool_results(h.model)[-1] == {"answer": "web", "answer_type": "option", "answered_by": ALICE}


async def test_multi_select_question_stays_answerable_when_blocks_are_refused(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "invalid_blocks")
        h.model.script(Reply(tool_calls=[tool_call("ask_user", MULTI, id="m1")]), Reply(text="Planned."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        plain = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread)
        assert not has_controls(plain)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "Add tests, Refactor")
        await h.settle()
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Planned.")


async def test_rate_limited_question_post_is_retried_with_its_buttons(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "ratelimited", status=429)
        _thread, q = await ask(h)
        assert has_controls(q)
        statuses = [c.status for c in h.ws.calls("chat.postMessage")]
        assert statuses == [429, 200]


async def test_views_open_failure_tells_the_user_and_question_stays_open(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        h.ws.fake.fail_next("views.open", "expired_trigger_id")
        await h.ws.click(q, "Answer", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "click Answer again" in note["text"]
        assert await still_open(h, q)


# --- Redis: outages, crashes, expiry -------------------------------------------------------------


async def test_redis_blip_on_final_save_does_not_brick_the_thread(
    fake_redis: aioredis.Redis, harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed final save is retried: the reply arrives, the run is saved, the thread goes on."""
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Delivered anyway.")
        store = h.bot.agent.store
        real_save = store.save
        failed: list[str] = []

        async def flaky_save(state: RunState, **kwargs: Any) -> RunState:
            if state.status == "completed" and not failed:
                failed.append(state.run_id)
                raise StoreUnavailable("Redis error while saving a run: ConnectionError")
            saved: RunState = await real_save(state, **kwargs)
            return saved

        monkeypatch.setattr(store, "save", flaky_save)
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Delivered anyway."
        )
        await h.settle()
        assert failed and (await h.bot.agent.get_run(failed[0])).status == "completed"
        h.model.script(Reply(text="Back on track."))
        await h.ws.mention(ALICE, GENERAL, "hello again?", thread_ts=thread)
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert not [n for n in notes if "still working" in n], notes
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track.", timeout=3
        )


async def test_run_orphaned_by_a_crash_does_not_block_the_thread(
    fake_redis: aioredis.Redis, harness: Any, prefix: str
) -> None:
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="First."))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "First.")
        await h.settle()
        run_key = next(iter([k async for k in fake_redis.scan_iter(match=f"{prefix}run:*")]))
        raw = await fake_redis.hget(run_key, "state")
        assert raw is not None
        state = RunState.from_json(raw)
        # what a process killed mid-run leaves behind: status running, last saved an hour ago
        orphan = state.model_copy(update={"status": "running", "updated_at": utcnow() - timedelta(hours=1)})
        await fake_redis.hset(run_key, mapping={"rev": str(orphan.revision), "state": orphan.to_json()})
        assert run_key.decode() == Keys(prefix).run(state.run_id)
        h.model.script(Reply(text="Second."))
        await h.ws.mention(ALICE, GENERAL, "still there?", thread_ts=thread)
        await h.settle()
        notes = [e["text"] for e in h.ws.ephemerals(user=ALICE)]
        assert not [n for n in notes if "still working" in n], notes


@pytest.mark.real_redis
async def test_short_ttl_on_real_redis_expires_question(real_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(real_redis, ttl=1) as h:
        thread, q = await ask(h)
        await asyncio.sleep(1.3)
        await h.ws.click(q, "api", user=ALICE)
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "web")  # thread record expired too: ignored
        await h.settle()
        assert resumed_requests(h.model) == 0
        assert not await still_open(h, q)


@pytest.mark.real_redis
async def test_model_slower_than_ttl_still_delivers_its_reply(real_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(real_redis, ttl=1) as h:
        h.model.script(Reply(text="Slow but sure.", delay=1.5))
        d = await h.ws.mention(ALICE, GENERAL, "think long")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] == "Slow but sure.", timeout=5
        )


# --- logs ----------------------------------------------------------------------------------------


async def test_no_secret_in_logs_even_at_debug_and_on_failures(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, slack_secrets: tuple[str, str]
) -> None:
    token, secret = slack_secrets
    caplog.set_level(logging.DEBUG)
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "invalid_auth")
        h.ws.fake.fail_next("views.open", "invalid_trigger_id")
        h.model.script(Reply(status=401))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.settle()
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        await h.settle()
        assert d.ack is not None
    text = "\n".join(r.getMessage() + (str(r.exc_info) if r.exc_info else "") for r in caplog.records)
    assert token not in text and secret not in text and "sk-test" not in text


@pytest.mark.real_redis
async def test_real_redis_outage_during_final_save_leaves_thread_usable(
    real_redis: aioredis.Redis, harness: Any
) -> None:
    """Redis goes away while the model thinks: the reply still reaches the thread, the run is saved in the
    background once Redis is back, and the thread goes on."""
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = aioredis.from_url(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=2, socket_connect_timeout=1)
        try:
            async with harness(client) as h:
                thread, q = await ask(h, then=Reply(text="Reply during the outage.", delay=1.0))
                await h.ws.click(q, "api", user=ALICE)
                await asyncio.sleep(0.5)  # the answer is claimed; the model is thinking
                proxy.cut()
                await h.ws.wait_for_message(
                    channel=GENERAL,
                    thread_ts=thread,
                    predicate=lambda m: m["text"] == "Reply during the outage.",
                    timeout=15,
                )
                proxy.restore()
                run_id = next(iter(QuestionRef.from_block_id(b["block_id"])[0].run_id for b in q["blocks"]))
                for _ in range(150):  # the background save: every 2, 4, 8 s while Redis is away
                    if (await h.bot.agent.get_run(run_id)).status == "completed":
                        break
                    await asyncio.sleep(0.1)
                assert (await h.bot.agent.get_run(run_id)).status == "completed"
                h.model.script(Reply(text="Back on track."))
                await h.ws.mention(ALICE, GENERAL, "hello again?", thread_ts=thread)
                await h.ws.wait_for_message(
                    channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track.", timeout=5
                )
        finally:
            await client.aclose()


async def test_user_not_allowed_is_refused_before_typing_and_a_forged_submission_too(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Someone the policy does not allow never gets an input to type into: the modal says who may answer. A
    submission they forge anyway (the form's callback and metadata) is refused under the input."""
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.close_view(form, user=ALICE)
        await h.ws.click(q, "Answer", user=BOB)
        view = await h.ws.wait_for_view(user=BOB, predicate=lambda v: "Only <@U_ALICE>" in json.dumps(v["blocks"]))
        assert not any(b["type"] == "input" for b in view["blocks"])
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "my answer"}}}
        payload = view_submission_payload(
            directory=h.ws.state.directory,
            user=BOB,
            view=form,
            state_values=values,
            trigger_id=h.ws.state.mint_trigger(BOB),
        )
        ack = await h.ws.sender.send_interaction(payload)
        assert ack.json == {
            "response_action": "errors",
            "errors": {MODAL_INPUT_BLOCK: "Only <@U_ALICE> can answer this question."},
        }
        await h.settle()
        assert await still_open(h, q) and resumed_requests(h.model) == 0


async def test_very_long_model_reply_reaches_the_thread_whole(fake_redis: aioredis.Redis, harness: Any) -> None:
    reply = "word " * 9000 + "THE-END"
    async with harness(fake_redis) as h:
        h.model.script(Reply(text=reply))
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] != "")
        await h.settle()
        posted = "".join(m["text"] for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]) if m.get("bot_id"))
        assert "THE-END" in posted


async def test_transient_slack_error_on_final_reply_is_not_silently_lost(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="The important reply.")
        h.ws.fake.fail_next("chat.postMessage", "service_unavailable", status=503)
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert "The important reply." in texts or any("try" in t.lower() for t in texts), texts
