"""The bot a competent engineer would write by hand for the same job with the same libraries: the yardstick of
``benchmarks.cost`` (issue 26, "Cost against the bot a team would otherwise write").

Run: ``SLACK_BOT_TOKEN=... SLACK_SIGNING_SECRET=... SLACK_API_URL=... OPENAI_API_KEY=... OPENAI_BASE_URL=...
REDIS_URL=... REDIS_PREFIX=... PORT=... python -m benchmarks.handwritten_bot [--tuned]``
(``benchmarks.cost`` starts it this way, beside the product, against the same fakes and load).

The spec, and nothing more: a Bolt ``AsyncApp`` in HTTP mode (served as ``benchmarks.bare_bolt`` serves its app:
aiohttp, ``POST /slack/events`` on ``$PORT``, no access log).

- ``app_mention``: the thread's messages from one Redis key (``{prefix}thread:{channel}:{thread_ts}``, a JSON
  list), the mention appended, one streamed ``chat.completions`` call with one ``ask_user`` tool. A tool call: the
  messages and where to answer saved as JSON under ``{prefix}run:{run_id}`` with a TTL (one ``SET ... EX``), then
  ``chat.postMessage`` of the question with one button per option (``action_id`` ``ask_option_<i>``, the run id in
  the ``block_id``). Plain text: ``chat.postMessage`` of it and the thread saved.
- ``block_actions`` on an option: ``ack()``; the run claimed atomically (``GETDEL``: of two clicks one gets the
  run, the other nothing and stops); the tool result appended; the next streamed turn; ``chat.update`` of the
  question (buttons replaced by the answer), ``chat.postMessage`` of the reply (or the next question: saved and
  posted as above); the thread's messages saved under its key (``SET ... EX``).

No retries of its own, no policy (anyone may answer), no metrics, no limits. Redis round trips: a mention 2 (GET the
thread, SET the run), a click 2 (GETDEL the run, SET the thread). Web API calls: a mention 1, a click 2.

``--tuned``: the same code on uvloop's event loop, the openai client on its aiohttp transport
(``openai.DefaultAioHttpClient``). Without it: ``asyncio``'s loop and the openai client's defaults (httpx).

``--floor`` (implies ``--tuned``): the tuned bot plus the Web API call and the Redis round trips and commands that
``bot serve`` makes beyond it for the same request (:class:`FeatureCalls`, after ``benchmarks.request_trace``), made
as cheaply as they can be made (the call on a kept-alive session, as the product's are) and with none of the
product's logic: what those calls alone cost, so ``benchmarks.cost --floor`` can say how much of ``serve``'s cost
over the tuned bot is the calls and how much the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from openai import AsyncOpenAI
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from benchmarks.bare_bolt import serve_app

log = logging.getLogger(__name__)

SYSTEM = "You are a helpful assistant in Slack. When you need a decision from the user, call ask_user."
RUN_TTL_SECONDS = 24 * 3600
THREAD_TTL_SECONDS = 30 * 24 * 3600
MENTION = re.compile(r"<@[A-Z0-9]+>\s*")
ASK_USER = {
    "type": "function",
    "function": {
        "name": "ask_user",
        "description": "Ask the user a question with a few options and wait for the answer.",
        "parameters": {
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "options": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]},
                },
                "selection_mode": {"type": "string", "enum": ["single_select"]},
            },
            "required": ["question", "options"],
        },
    },
}


# The Lua scripts of --floor: one call each, as the product's scripts are (what they do inside runs in Redis, whose
# CPU the benchmark does not count; their replies are as small as the product's).
FIRST_SIGHT = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 1 end return 0"
RUN_SLOT = (
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1]) redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3]) "
    "redis.call('PEXPIRE', KEYS[1], 120000) return redis.call('ZCARD', KEYS[1])"
)
CLAIM_THREAD = "redis.call('HSET', KEYS[1], 'run_id', ARGV[1]) redis.call('EXPIRE', KEYS[1], ARGV[2]) return 1"
SAVE_RUN = (
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) redis.call('SET', KEYS[2], ARGV[3], 'PX', 30000) return 1"
)
SCHEDULE = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) return 1"


class FeatureCalls:
    """``--floor``: per request, the calls ``bot serve`` makes beyond the tuned bot's, in the product's round trips
    (``benchmarks.request_trace``: a mention 5 round trips and 15 commands sent, a click 6 and about 20; the
    product's scheduler polls, about 0.04 a request, left out). The bot's own reads and writes ride in them (its
    ``GET`` of the thread in the first, its ``GETDEL`` in the click's claim, its ``SET``s in the segment ends), as
    the product's do; the scripts are :data:`FIRST_SIGHT`, :data:`RUN_SLOT`, ... sent as ``EVALSHA`` after one
    ``SCRIPT LOAD`` each. Plus ``assistant.threads.setStatus`` once a request. The keys are under the bot's
    prefix (``floor:...``); nothing is read back for a decision: a floor, not a product."""

    def __init__(self, redis: aioredis.Redis, prefix: str, *, token: str, api_url: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.sha: dict[str, str] = {}
        self.token, self.api_url = token, api_url.rstrip("/") + "/"
        self.web: AsyncWebClient | None = None

    async def status(self, channel: str, thread_ts: str) -> None:
        """``assistant.threads.setStatus``, on a client of its own with one kept-alive ``aiohttp`` session, as the
        product makes its calls (the bot's own client, slack_sdk's default, opens a connection per call: that would
        charge the floor for a connection the product does not open)."""
        if self.web is None:
            self.web = AsyncWebClient(token=self.token, base_url=self.api_url, session=aiohttp.ClientSession())
        await self.web.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status="is thinking...")

    async def _evalsha(self, pipe: Any, script: str, keys: list[str], args: list[Any]) -> None:
        """Queue ``script`` on ``pipe`` as ``EVALSHA`` (loaded once, outside any measured request's pipelines)."""
        if script not in self.sha:
            self.sha[script] = await self.redis.script_load(script)
        pipe.evalsha(self.sha[script], len(keys), *keys, *args)

    def key(self, *parts: str) -> str:
        return self.prefix + "floor:" + ":".join(parts)

    async def mention_start(self, run_id: str, *, event_id: str, team: str, user: str, thread_key: str) -> bytes | None:
        """Round trip 1 (first sight, the thread's record, the inbox's size, a run slot for ``run_id``), with the
        bot's ``GET`` of the thread's messages: returns what that ``GET`` read."""
        pipe = self.redis.pipeline(transaction=False)
        await self._evalsha(pipe, FIRST_SIGHT, [self.key("event", event_id)], [uuid.uuid4().hex[:16], 7200])
        pipe.get(thread_key)
        pipe.zcard(self.key("inbox", team, user))
        await self._slot(pipe, team, user, run_id)
        return (await pipe.execute())[1]  # type: ignore[no-any-return]

    async def _slot(self, pipe: Any, team: str, user: str, run_id: str) -> None:
        """Queue taking the person's run slot for ``run_id`` (given back by :meth:`save` at the segment's end)."""
        now = int(time.time() * 1000)
        await self._evalsha(pipe, RUN_SLOT, [self.key("active", team, user)], [now, now + 120_000, run_id])

    async def claim_thread(self, thread_key: str, run_id: str) -> None:
        """Round trip 2 of a mention: the thread's record names its run."""
        pipe = self.redis.pipeline(transaction=False)
        await self._evalsha(pipe, CLAIM_THREAD, [self.key("thread", thread_key)], [run_id, 604800])
        await pipe.execute()

    async def save(
        self, run_id: str, state: str, *, also: tuple[str, str] | None = None, end: tuple[str, str] | None = None
    ) -> None:
        """A run save with its lease (a segment's start), or at its end with the slot of ``end`` (team, user) given
        back; ``also``: the bot's own ``SET`` (key, JSON) in the same round trip."""
        pipe = self.redis.pipeline(transaction=False)
        run_key = self.key("run", run_id)
        await self._evalsha(pipe, SAVE_RUN, [run_key, run_key + ":lease"], [state, RUN_TTL_SECONDS, "owner"])
        if end is not None:
            pipe.zrem(self.key("active", *end), run_id)
        if also is not None:
            pipe.set(also[0], also[1], ex=THREAD_TTL_SECONDS)
        await pipe.execute()

    async def question_shown(self, run_id: str, *, call: str, team: str, user: str, channel: str, ts: str) -> None:
        """The last round trip of a mention: where the question shows, its inbox entries, its schedule."""
        pipe = self.redis.pipeline(transaction=False)
        msgs, inbox, holders = self.key("msgs", run_id), self.key("inbox", team, user), self.key("of", run_id, call)
        pipe.hset(msgs, json.dumps([call, channel, ts]), int(time.time() * 1000))
        pipe.expire(msgs, 604800)
        pipe.zadd(inbox, {json.dumps([run_id, call]): time.time()})
        pipe.expire(inbox, 604800)
        pipe.sadd(holders, f"{team}|{user}")
        pipe.expire(holders, 604800)
        due = json.dumps(["deadline", run_id, call, 0])
        await self._evalsha(pipe, SCHEDULE, [self.key("due")], [int(time.time() * 1000) + 86_400_000, due])
        await pipe.execute()

    async def click_start(self, *, signature: str, team: str, user: str, run_id: str) -> bytes | None:
        """A click's replay guard (its own round trip, before the ack), then a run slot and the run read with the
        messages recorded for it, the bot's ``GETDEL`` (the claim) among them: returns what that took."""
        pipe = self.redis.pipeline(transaction=False)
        await self._evalsha(pipe, FIRST_SIGHT, [self.key("event", signature)], [uuid.uuid4().hex[:16], 7200])
        await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        await self._slot(pipe, team, user, run_id)
        pipe.hgetall(self.key("msgs", run_id))
        pipe.getdel(f"{self.prefix}run:{run_id}")
        return (await pipe.execute())[2]  # type: ignore[no-any-return]

    async def question_closed(self, run_id: str, *, call: str, team: str, user: str) -> None:
        """A click's two round trips of its question's close: where it shows and who holds it, then its inbox
        entries and schedule."""
        pipe = self.redis.pipeline(transaction=False)
        holders, line = self.key("of", run_id, call), self.key("line", run_id, call)
        pipe.smembers(holders)
        pipe.get(line)
        pipe.hgetall(self.key("msgs", run_id))
        await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        done = self.key("done", team, user)
        entry = json.dumps({"run_id": run_id, "tool_call_id": call, "summary": "Which colour? answered"})
        pipe.zrem(self.key("inbox", team, user), json.dumps([run_id, call]))
        pipe.lrem(done, 0, entry)
        pipe.lpush(done, entry)
        pipe.ltrim(done, 0, 9)
        pipe.expire(done, 604800)
        pipe.delete(holders)
        pipe.delete(line)
        await self._evalsha(pipe, SCHEDULE, [self.key("due")], [int(time.time() * 1000) + 2000, f'["home","{team}"]'])
        await pipe.execute()


def build(*, tuned: bool, floor: bool = False, env: Mapping[str, str] = os.environ) -> AsyncApp:
    """The app, its Redis and openai clients from the product's environment variables in ``env``
    (``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``, ``SLACK_API_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``,
    ``OPENAI_MODEL``, ``REDIS_URL``, ``REDIS_PREFIX``); ``floor``: with :class:`FeatureCalls` (tuned or not, as
    given). Raises ``KeyError`` without the token or signing secret."""
    api_url = env.get("SLACK_API_URL", "https://slack.com/api/")
    app = AsyncApp(
        client=AsyncWebClient(token=env["SLACK_BOT_TOKEN"], base_url=api_url.rstrip("/") + "/"),
        signing_secret=env["SLACK_SIGNING_SECRET"],
    )
    redis = aioredis.from_url(env.get("REDIS_URL", "redis://localhost:6379/0"))
    prefix = env.get("REDIS_PREFIX", "askbot:")
    model = env.get("OPENAI_MODEL", "gpt-4.1-mini")
    api_key, base_url = env.get("OPENAI_API_KEY"), env.get("OPENAI_BASE_URL")
    if tuned:
        from openai import DefaultAioHttpClient

        openai = AsyncOpenAI(api_key=api_key, base_url=base_url, http_client=DefaultAioHttpClient())
    else:
        openai = AsyncOpenAI(api_key=api_key, base_url=base_url)

    async def turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
        """One streamed assistant turn: the assistant message (text and/or tool calls), appended to ``messages``."""
        stream = await openai.chat.completions.create(model=model, messages=messages, tools=[ASK_USER], stream=True)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(
                    part.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if part.id:
                    call["id"] = part.id
                if part.function and part.function.name:
                    call["function"]["name"] += part.function.name
                if part.function and part.function.arguments:
                    call["function"]["arguments"] += part.function.arguments
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        messages.append(message)
        return message

    calls = FeatureCalls(redis, prefix, token=env["SLACK_BOT_TOKEN"], api_url=api_url) if floor else None

    async def handle(
        client: AsyncWebClient,
        messages: list[dict[str, Any]],
        message: dict[str, Any],
        where: tuple[str, str, str, str],
        run_id: str | None = None,
    ) -> None:
        """After a turn: a tool call saves the run and posts the question; text is posted and the thread saved.
        ``where``: (team, user, channel, thread_ts); ``run_id``: the run's (``--floor`` names it before its turn)."""
        team, user, channel, thread_ts = where
        if not message.get("tool_calls"):
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=message["content"] or "(no reply)")
            key = f"{prefix}thread:{channel}:{thread_ts}"
            if calls is not None:
                await calls.save(run_id or "", json.dumps(messages), also=(key, json.dumps(messages)), end=(team, user))
            else:
                await redis.set(key, json.dumps(messages), ex=THREAD_TTL_SECONDS)
            return
        call = message["tool_calls"][0]
        args = json.loads(call["function"]["arguments"] or "{}")
        run_id = run_id or uuid.uuid4().hex
        run = {"messages": messages, "channel": channel, "thread_ts": thread_ts, "tool_call_id": call["id"]}
        if calls is not None:
            await calls.save(
                run_id, json.dumps(messages), also=(f"{prefix}run:{run_id}", json.dumps(run)), end=(team, user)
            )
        else:
            await redis.set(f"{prefix}run:{run_id}", json.dumps(run), ex=RUN_TTL_SECONDS)
        question = str(args.get("question", ""))
        buttons = [
            {
                "type": "button",
                "action_id": f"ask_option_{i}",
                "text": {"type": "plain_text", "text": str(option["label"])[:75]},
                "value": str(option["label"])[:2000],
            }
            for i, option in enumerate(args.get("options", [])[:25])
        ]
        posted = await client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=question,
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": question}},
                {"type": "actions", "block_id": f"ask:{run_id}", "elements": buttons},
            ],
        )
        if calls is not None:
            shown = {"call": call["id"], "team": team, "user": user, "channel": channel, "ts": str(posted.get("ts"))}
            await calls.question_shown(run_id, **shown)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], body: dict[str, Any], client: AsyncWebClient) -> None:
        channel = event["channel"]
        thread_ts = event.get("thread_ts") or event["ts"]
        key = f"{prefix}thread:{channel}:{thread_ts}"
        where = (str(body.get("team_id", "")), str(event.get("user", "")), channel, thread_ts)
        run_id = None
        saved: bytes | str | None
        if calls is not None:
            run_id = uuid.uuid4().hex
            saved = await calls.mention_start(
                run_id, event_id=str(body.get("event_id", "")), team=where[0], user=where[1], thread_key=key
            )
        else:
            saved = await redis.get(key)
        messages = json.loads(saved) if saved else [{"role": "system", "content": SYSTEM}]
        messages.append({"role": "user", "content": MENTION.sub("", event.get("text", "")).strip()})
        if calls is not None and run_id is not None:
            await calls.claim_thread(key, run_id)
            await calls.save(run_id, json.dumps(messages))
            await calls.status(channel, thread_ts)
        await handle(client, messages, await turn(messages), where, run_id)

    @app.action(re.compile(r"^ask_option_\d+$"))
    async def on_option(
        ack: Any, body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient, request: Any
    ) -> None:
        run_id = str(action.get("block_id", "")).removeprefix("ask:")
        team, user = str(body.get("team", {}).get("id", "")), str(body.get("user", {}).get("id", ""))
        saved: bytes | str | None
        if calls is not None:
            signature = str(request.headers.get("x-slack-signature", [""])[0])
            saved = await calls.click_start(signature=signature, team=team, user=user, run_id=run_id)
            await ack()
        else:
            await ack()
            saved = await redis.getdel(f"{prefix}run:{run_id}")
        if saved is None:  # answered already (another click won), or expired
            return
        run = json.loads(saved)
        messages = run["messages"]
        answer = str(action.get("value", ""))
        messages.append(
            {"role": "tool", "tool_call_id": run["tool_call_id"], "content": json.dumps({"answer": answer})}
        )
        if calls is not None:
            await calls.save(run_id, json.dumps(messages))
            await calls.status(run["channel"], run["thread_ts"])
            await calls.question_closed(run_id, call=run["tool_call_id"], team=team, user=user)
        message = await turn(messages)
        question = next(
            (b["text"]["text"] for b in body["message"].get("blocks", []) if b.get("type") == "section"), ""
        )
        await client.chat_update(
            channel=body["channel"]["id"],
            ts=body["message"]["ts"],
            text=f"{question} {answer}",
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": question}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<@{body['user']['id']}>: *{answer}*"}]},
            ],
        )
        await handle(client, messages, message, (team, user, run["channel"], run["thread_ts"]), run_id)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", action="store_true", help="uvloop and the openai client's aiohttp transport")
    parser.add_argument("--floor", action="store_true", help="--tuned, plus the calls `bot serve` makes beyond it")
    args = parser.parse_args()
    args.tuned = args.tuned or args.floor
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING").upper())
    app = build(tuned=args.tuned, floor=args.floor)
    if args.tuned:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_app(app))
    else:
        asyncio.run(serve_app(app))


if __name__ == "__main__":
    main()
