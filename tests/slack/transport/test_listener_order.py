"""Bolt tries the app's listeners in order for every request, each try building all of Bolt's listener arguments
from the payload (~30 µs on a 2-core machine): the frequent requests (a mention, a click on a question's option, an
approval) find their listener first, and the assistant middleware looks only at the events it acts on (issue 26,
CPU per request)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.slack.assistant_pane import PaneAssistant
from bot.slack.render.approvals import ACT_APPROVE
from bot.slack.render.blocks import ACT_CANCEL, ACT_OPTION

TEAM, USER, CHANNEL = "T1", "U1", "C1"
MENTION = {
    "type": "event_callback",
    "team_id": TEAM,
    "event": {"type": "app_mention", "user": USER, "channel": CHANNEL, "text": "<@UBOT> hi", "ts": "1.1"},
}
THREAD_REPLY = {
    "type": "event_callback",
    "team_id": TEAM,
    "event": {"type": "message", "user": USER, "channel": CHANNEL, "text": "more", "ts": "1.3", "thread_ts": "1.1"},
}


def click(action_id: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": USER},
        "channel": {"id": CHANNEL},
        "container": {"type": "message", "message_ts": "1.2", "channel_id": CHANNEL},
        "actions": [{"action_id": action_id, "block_id": "b", "type": "button", "value": "v"}],
    }


async def tries(app: Any, body: dict[str, Any]) -> int:
    """How many listeners Bolt tries for ``body`` before (and with) the one that takes it (0: none takes it)."""
    request = AsyncBoltRequest(body=body, mode="socket_mode", context={"bot_user_id": "UBOT"})
    for n, listener in enumerate(app._async_listeners, start=1):
        if await listener.async_matches(req=request, resp=BoltResponse(status=200)):
            return n
    return 0


async def test_the_frequent_requests_find_their_listener_among_the_first(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        app = h.processes[0].bot.app
        assert await tries(app, MENTION) == 1
        assert await tries(app, click(f"{ACT_OPTION}_2")) == 2  # was 8: behind every event listener
        assert await tries(app, THREAD_REPLY) == 3  # was 2: the option click is now ahead of it
        assert await tries(app, click(ACT_APPROVE)) == 4  # was 19
        assert await tries(app, click(ACT_CANCEL)) > 4  # the rest still have theirs, further on
        assert len(app._async_listeners) > 20


async def test_the_assistant_middleware_looks_only_at_assistant_events() -> None:
    """A click, a mention and a channel message go straight on: its listeners are not tried. An assistant thread
    starting, and a person's message in an assistant thread (a DM thread), still reach them."""
    seen: list[str] = []

    class Looked:
        """Stands in for one of the assistant's listeners: says it was tried, takes nothing."""

        async def async_matches(self, *, req: AsyncBoltRequest, resp: BoltResponse) -> bool:
            seen.append(req.body.get("type", ""))
            return False

    assistant = PaneAssistant()
    assistant.thread_started(lambda: None)
    assistant.user_message(lambda: None)
    # Bolt's AsyncAssistant keeps its listeners in these lists and tries each in turn
    assistant._thread_started_listeners = [Looked()]  # type: ignore[list-item]
    assistant._user_message_listeners = [Looked()]  # type: ignore[list-item]
    passed: list[bool] = []

    async def next_() -> BoltResponse:
        passed.append(True)
        return BoltResponse(status=200)

    started = {"type": "event_callback", "event": {"type": "assistant_thread_started", "assistant_thread": {}}}
    in_dm_thread = {
        "type": "event_callback",
        "event": {"type": "message", "channel_type": "im", "user": USER, "text": "hi", "ts": "2.2", "thread_ts": "2.1"},
    }
    for body, looked in (
        (click(f"{ACT_OPTION}_0"), False),
        (MENTION, False),
        (THREAD_REPLY, False),  # a channel thread, not the assistant's
        (started, True),
        (in_dm_thread, True),
    ):
        seen.clear()
        passed.clear()
        request = AsyncBoltRequest(body=body, mode="socket_mode", context={"listener_runner": object()})
        await assistant.async_process(req=request, resp=BoltResponse(status=200), next=next_)
        assert bool(seen) is looked, body
        assert passed == [True], body  # nothing took it: it went on to the app's listeners
