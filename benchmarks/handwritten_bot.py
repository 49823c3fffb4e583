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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

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


def build(*, tuned: bool, env: Mapping[str, str] = os.environ) -> AsyncApp:
    """The app, its Redis and openai clients from the product's environment variables in ``env``
    (``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``, ``SLACK_API_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``,
    ``OPENAI_MODEL``, ``REDIS_URL``, ``REDIS_PREFIX``). Raises ``KeyError`` without the token or signing secret."""
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

    async def handle(
        client: AsyncWebClient, messages: list[dict[str, Any]], message: dict[str, Any], channel: str, thread_ts: str
    ) -> None:
        """After a turn: a tool call saves the run and posts the question; text is posted and the thread saved."""
        if not message.get("tool_calls"):
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=message["content"] or "(no reply)")
            key = f"{prefix}thread:{channel}:{thread_ts}"
            await redis.set(key, json.dumps(messages), ex=THREAD_TTL_SECONDS)
            return
        call = message["tool_calls"][0]
        args = json.loads(call["function"]["arguments"] or "{}")
        run_id = uuid.uuid4().hex
        run = {"messages": messages, "channel": channel, "thread_ts": thread_ts, "tool_call_id": call["id"]}
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
        await client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=question,
            blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": question}},
                {"type": "actions", "block_id": f"ask:{run_id}", "elements": buttons},
            ],
        )

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        channel = event["channel"]
        thread_ts = event.get("thread_ts") or event["ts"]
        saved = await redis.get(f"{prefix}thread:{channel}:{thread_ts}")
        messages = json.loads(saved) if saved else [{"role": "system", "content": SYSTEM}]
        messages.append({"role": "user", "content": MENTION.sub("", event.get("text", "")).strip()})
        await handle(client, messages, await turn(messages), channel, thread_ts)

    @app.action(re.compile(r"^ask_option_\d+$"))
    async def on_option(ack: Any, body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        run_id = str(action.get("block_id", "")).removeprefix("ask:")
        saved = await redis.getdel(f"{prefix}run:{run_id}")
        if saved is None:  # answered already (another click won), or expired
            return
        run = json.loads(saved)
        messages = run["messages"]
        answer = str(action.get("value", ""))
        messages.append(
            {"role": "tool", "tool_call_id": run["tool_call_id"], "content": json.dumps({"answer": answer})}
        )
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
        await handle(client, messages, message, run["channel"], run["thread_ts"])

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", action="store_true", help="uvloop and the openai client's aiohttp transport")
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING").upper())
    app = build(tuned=args.tuned)
    if args.tuned:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_app(app))
    else:
        asyncio.run(serve_app(app))


if __name__ == "__main__":
    main()
