"""A request's walk through the bot's modules, from a trace: which modules a mention and a click enter, in order.

Run: ``.venv/bin/python -m benchmarks.request_walk [--show]``

The bot runs in this process (``build_bot`` + ``start_http``, as the tests' harness does) against the fake Slack,
the loopback model (a mention -> an ``ask_user`` single_select question; a click -> a short reply) and an
in-process Redis (fakeredis). After a warm-up mention and click, one mention and one click on its question are
traced with ``sys.setprofile``, following the request's data: a call of a function of ``bot/`` (not the fake
Slack, ``bot/fakeslack``, the playground, ``bot/playground``, nor the test servers, ``bot/testing``) is on the walk when
one of its arguments is the request's body (Bolt copies it for a lazy listener: recognised by its ``event_id`` /
``trigger_id``) or a value a call on the walk returned (and what that value holds, one level down). A coroutine resumed
after an ``await`` is not a new call.

From the walk's call tree, visited depth first (a call enters its callee's module; after it, execution is back in
the caller's module when the caller calls on), the module sequence with repeats folded; printed per request:

- ``modules``: distinct modules entered;
- ``steps``: moves from one module to another;
- ``returns``: moves into a module already left earlier on the walk;
- ``climbs``: calls into a module above the caller's, i.e. one that imports the caller's module, directly or not
  (the import graph is read from ``bot/`` with ``ast``, function-level imports included): a lower layer calling
  back up through an object it was handed.

``--show`` prints the module sequence and every climb.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dis
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOT = ROOT / "bot"
LEFT_OUT = ("bot.fakeslack", "bot.playground", "bot.testing")
RETURNS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}


def module_of(path: str) -> str | None:
    """``bot.slack.app`` for ``.../bot/slack/app.py``; None outside ``bot/`` or in a left-out package."""
    try:
        rel = Path(path).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] != "bot" or rel.suffix != ".py":
        return None
    name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    return None if name.startswith(LEFT_OUT) else name


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``bot`` modules it imports (anywhere in it, function-level imports included)."""
    graph: dict[str, set[str]] = {}
    known = {m for p in BOT.rglob("*.py") if (m := module_of(str(p))) is not None}
    for path in BOT.rglob("*.py"):
        name = module_of(str(path))
        if name is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in known else base)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def reaches(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> every module it imports directly or through others."""
    closure: dict[str, set[str]] = {}

    def visit(name: str, seen: set[str]) -> set[str]:
        if name in closure:
            return closure[name]
        out: set[str] = set()
        for target in graph.get(name, ()):
            if target not in seen:
                out |= {target} | visit(target, seen | {target})
        closure[name] = out
        return out

    for name in graph:
        visit(name, {name})
    return closure


def inner(value: Any) -> list[Any]:
    """The values ``value`` holds one level down (at most 50): a mapping's values, a sequence's items, an object's
    attributes (dataclasses, pydantic models, plain objects)."""
    if isinstance(value, str | bytes):
        return []
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple | set | frozenset):
        items = value
    elif hasattr(value, "__dict__") and not isinstance(value, type | types.ModuleType | types.FunctionType):
        items = vars(value).values()
    elif hasattr(value, "__slots__"):
        items = [getattr(value, n, None) for n in value.__slots__]
    else:
        return []
    return list(items)[:50]


@dataclass
class Call:
    module: str
    function: str
    children: list[Call] = field(default_factory=list)


class Walk:
    """A ``sys.setprofile`` hook that builds the call tree of the calls on a request's data path."""

    def __init__(self, is_request: Callable[[Any], bool]) -> None:
        self.is_request = is_request
        self.roots: list[Call] = []
        self.carried: dict[int, Any] = {}  # id -> value: values calls on the walk returned (kept alive here)
        self.frames: dict[int, tuple[types.FrameType, Call]] = {}  # frames of calls on the walk, while they run
        self.started: set[int] = set()  # coroutine frames seen already: a later 'call' is a resume

    def carries(self, value: Any, depth: int = 2) -> bool:
        """Whether ``value`` is the request's data: the body, a value carried, or an object holding one (one level
        down: a context built from the body's ids)."""
        if value is None or isinstance(value, bool | int | float):
            return False
        entry = self.carried.get(id(value))
        if entry is not None and entry is value:
            return True
        if isinstance(value, dict) and self.is_request(value):
            return True
        if depth <= 1 or isinstance(value, str | bytes):
            return False
        return any(self.carries(item, depth - 1) for item in inner(value))

    def carry(self, value: Any, depth: int = 2) -> None:
        """Carry ``value`` and what it holds (``depth`` levels) as the request's data from now on. Strings count by
        identity (one parsed from the request is a new object; short ones may be shared and are passed over)."""
        if value is None or isinstance(value, bool | int | float) or depth == 0:
            return
        if isinstance(value, str | bytes) and len(value) < 3:
            return
        self.carried[id(value)] = value
        for item in inner(value):
            self.carry(item, depth - 1)

    def parent(self, frame: types.FrameType | None) -> Call | None:
        while frame is not None:
            entry = self.frames.get(id(frame))
            if entry is not None and entry[0] is frame:
                return entry[1]
            frame = frame.f_back
        return None

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_flags & (0x80 | 0x200 | 0x20):  # a coroutine, async generator or generator
                if id(frame) in self.started:
                    return  # resumed after an await / yield: not a new call
                self.started.add(id(frame))
            module = module_of(code.co_filename)
            if module is None:
                return
            count = code.co_argcount + code.co_kwonlyargcount
            names = code.co_varnames[:count]
            if not any(self.carries(frame.f_locals.get(n)) for n in names if n not in ("self", "cls")) and not (
                "self" in names and self.carries(frame.f_locals.get("self"))
            ):
                return
            for n in names:
                if n not in ("self", "cls"):
                    self.carry(frame.f_locals.get(n), 1)
            call = Call(module, code.co_qualname)
            parent = self.parent(frame.f_back)
            (parent.children if parent is not None else self.roots).append(call)
            self.frames[id(frame)] = (frame, call)
        elif event == "return":
            entry = self.frames.get(id(frame))
            if entry is None or entry[0] is not frame:
                return
            code = frame.f_code.co_code
            if frame.f_lasti >= 0 and code[frame.f_lasti] not in RETURNS:
                return  # a coroutine suspending at an await, not returning
            del self.frames[id(frame)]
            self.started.discard(id(frame))
            self.carry(arg)


@dataclass
class Figures:
    sequence: list[str]
    modules: int
    steps: int
    returns: int
    climbs: list[tuple[str, str, str]]


def figures(roots: list[Call], above: dict[str, set[str]]) -> Figures:
    """The walk's module sequence (depth first, repeats folded) and its counts; see the module docstring."""
    sequence: list[str] = []
    climbs: list[tuple[str, str, str]] = []

    def enter(module: str) -> None:
        if not sequence or sequence[-1] != module:
            sequence.append(module)

    def visit(call: Call, caller: str | None) -> None:
        if caller is not None and call.module != caller and caller in above.get(call.module, set()):
            climbs.append((caller, call.module, call.function))
        enter(call.module)
        for child in call.children:
            enter(call.module)
            visit(child, call.module)

    for root in roots:
        visit(root, None)
    returns = sum(1 for i, m in enumerate(sequence) if m in sequence[:i])
    return Figures(sequence, len(set(sequence)), len(sequence) - 1, returns, climbs)


async def walk_requests(show: bool) -> None:
    import fakeredis

    from bot.agent import OpenAIChatModel
    from bot.config import Settings
    from bot.fakeslack.workspace import Workspace
    from bot.slack.app import build_bot, start_http
    from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

    token, secret = "xoxb-walk-0123456789", "walk-signing-secret"
    question = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}
    above = reaches(import_graph())
    async with FakeOpenAI() as model_server, Workspace("http://127.0.0.1:9/unset", secret, bot_token=token) as ws:
        settings = Settings(slack_bot_token=token, slack_signing_secret=secret, slack_api_url=ws.api_url)
        model = OpenAIChatModel(model="walk", base_url=model_server.base_url, api_key="sk-walk", max_retries=0)
        bot = build_bot(settings, model=model, redis_client=fakeredis.FakeAsyncRedis())
        runner, port = await start_http(bot, host="127.0.0.1", port=0)
        ws.sender.bot_url = f"http://127.0.0.1:{port}/slack/events"
        try:

            async def mention() -> tuple[str, dict[str, Any]]:
                model_server.script(Reply(tool_calls=[tool_call("ask_user", question)]), Reply(text="Done."))
                sent = await ws.mention("U_ALICE", "C_GENERAL", "summarize the repo")
                thread = sent.message["ts"]
                asked = await ws.wait_for_message(
                    channel="C_GENERAL", thread_ts=thread, predicate=lambda m: "Which repo?" in str(m.get("blocks"))
                )
                await bot.drain()
                return thread, asked

            async def click(asked: dict[str, Any], thread: str) -> None:
                await ws.click(asked, "api", user="U_ALICE")
                await ws.wait_for_message(
                    channel="C_GENERAL", thread_ts=thread, predicate=lambda m: m["text"] == "Done."
                )
                await bot.drain()

            thread, asked = await mention()  # warm-up: auth.test, connections, scripts
            await click(asked, thread)
            for title in ("mention", "click"):
                marker: dict[str, str] = {}
                walk = Walk(lambda body, marker=marker: _is_marked(body, marker))
                sys.setprofile(walk)
                try:
                    if title == "mention":
                        thread, asked = await mention()
                    else:
                        await click(asked, thread)
                finally:
                    sys.setprofile(None)
                report(title, figures(walk.roots, above), show=show)
        finally:
            await bot.drain()
            await runner.cleanup()
            await bot.aclose()


def _is_marked(body: dict[str, Any], marker: dict[str, str]) -> bool:
    """The request's body: the first ``event_id`` / ``trigger_id`` seen on the walk's window is the request's."""
    for key in ("event_id", "trigger_id"):
        value = body.get(key)
        if isinstance(value, str):
            return marker.setdefault(key, value) == value
    return False


def report(title: str, f: Figures, *, show: bool) -> None:
    print(f"{title}: {f.modules} modules, {f.steps} steps, {f.returns} returns, {len(f.climbs)} climbs")
    if show:
        print("  " + " -> ".join(m.removeprefix("bot.") for m in f.sequence))
        for caller, callee, function in f.climbs:
            print(f"  climb: {caller} -> {callee} ({function})")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print the module sequence and every climb")
    args = parser.parse_args()
    asyncio.run(walk_requests(args.show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
