"""Waiting costs nothing in the process (issue 26, "Waiting costs nothing in the process"): a question left waiting
is Redis's alone; the bot keeps no object per waiting question (no dict entry keyed by its run, no task or timer,
no cached Home or inbox), so its memory does not grow with how many wait. Counted, not timed: every object the
bot's process holds (reached from its app, its HTTP server and the event loop's tasks), after a few questions and
after many more. ``benchmarks.cost --waiting 1000`` measures the same as RSS."""

from __future__ import annotations

import asyncio
import gc
import logging
import types
from collections import Counter
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, has_controls

QUESTION = {"question": "Which colour?", "options": [{"label": "Red"}, {"label": "Green"}]}
MORE = 30  # questions left waiting between the two counts
HARNESS = ("bot.fakeslack", "bot.testing")  # the fake Slack and loopback model share the loop: not the bot's
# shared code and definitions, not state; logging is the process's (a test's capture handler keeps its records)
NOT_FOLLOWED = (
    types.ModuleType,
    type,
    types.CodeType,
    types.FrameType,
    logging.Logger,
    logging.Handler,
    logging.LogRecord,
)


def held(*roots: object) -> Counter[str]:
    """How many objects of each type are reachable from ``roots`` (``gc.get_referents``; a function's closure and
    defaults, not its module's globals; not into modules, classes, code, frames or logging, nor the test's fakes)."""
    seen: set[int] = set()
    counts: Counter[str] = Counter()
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, NOT_FOLLOWED) or type(obj).__module__.startswith(HARNESS):
            continue
        if isinstance(obj, asyncio.TimerHandle) and obj.cancelled():
            continue  # a timeout that is over, left in the loop's heap until its time (5 s): holds nothing
        seen.add(id(obj))
        counts[f"{type(obj).__module__}.{type(obj).__qualname__}"] += 1
        if isinstance(obj, types.FunctionType):
            todo.extend(c.cell_contents for c in obj.__closure__ or () if _filled(c))
            todo.extend(obj.__defaults__ or ())
            continue
        todo.extend(gc.get_referents(obj))
    return counts


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


async def ask(h: Any, n: int, *, start: int) -> None:
    """``n`` mentions, each leaving its question waiting (one at a time, settled)."""
    for i in range(start, start + n):
        h.model.script(Reply(tool_calls=[tool_call("ask_user", QUESTION, id=f"call_{i}")]))
        d = await h.ws.mention(ALICE, GENERAL, f"question {i}")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await h.settle()


def process_objects(h: Any) -> Counter[str]:
    gc.collect()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    return held(h.processes[0], *tasks)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # the store outside the process, as deployed (fakeredis would hold it here)
async def test_questions_left_waiting_leave_nothing_behind_in_the_process(
    real_redis: aioredis.Redis, harness: Any
) -> None:
    """5 questions waiting, then 30 more: no kind of object the bot's process holds grew by one per question
    (a structure keyed by run, a per-question task, timer or cached Home would)."""
    async with harness(real_redis, settings={"max_waiting_per_person": 1000}) as h:
        await ask(h, 5, start=0)  # every path taken once: caches of names, the Home's links, scripts
        before = process_objects(h)
        tasks_before = len(asyncio.all_tasks())
        await ask(h, MORE, start=5)
        after = process_objects(h)
        tasks_after = len(asyncio.all_tasks())
    grown = {kind: (before[kind], n) for kind, n in after.items() if n - before[kind] >= MORE // 2}
    assert grown == {}, grown
    assert tasks_after - tasks_before < MORE // 2, (tasks_before, tasks_after)
