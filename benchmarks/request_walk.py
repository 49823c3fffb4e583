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

``--paths`` reads the walk a second way: the request's *path*, the chain of calls that leads from the bot's first
frame (its HTTP handler) to each of the request's effects, across the tasks it starts (a task's chain is the chain
that created it, then its own frames). The effects: for a mention, the ``chat.postMessage`` of its question; for a
click, the run's resume (``Agent.resume_stream``) and the ``chat.update`` that closes the question's message. The
chains are merged into one tree (a shared start is walked once) and counted as above. Where the first reading
counts every module the request's data touches (its helpers: keys, batches, text rules, logs), this one counts the
modules the request passes *through* to get its work done, which is what the issue 21 targets speak of.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dis
import functools
import gc
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOT = ROOT / "bot"
LEFT_OUT = ("bot.fakeslack", "bot.playground", "bot.testing")
QUESTION = "Which repo?"  # what the traced mention asks, and how its effects are recognised
RETURNS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}


@functools.cache  # asked for every frame the profiler sees: resolve each file once
def module_of(path: str, *, left_out: tuple[str, ...] = LEFT_OUT) -> str | None:
    """``bot.slack.app`` for ``.../bot/slack/app.py``; None outside ``bot/`` or in a ``left_out`` package."""
    try:
        rel = Path(path).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] != "bot" or rel.suffix != ".py":
        return None
    name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    return None if left_out and name.startswith(left_out) else name


@functools.cache
def parse(path: Path) -> ast.Module:
    """``ast.parse`` of ``path``, once per process, with the garbage collector held off meanwhile: Python 3.11's AST
    constructor checks its own recursion count, and in a test worker, after other tests, it raised ``SystemError: AST
    constructor recursion depth mismatch`` (CPython gh-106905; a finalizer run by a collection in the middle is the
    likely cause)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        if enabled:
            gc.enable()


def import_graph(*, left_out: tuple[str, ...] = LEFT_OUT) -> dict[str, set[str]]:
    """Module -> the ``bot`` modules it imports (anywhere in it, function-level and type-checking imports included),
    for every module of ``bot/`` but the ``left_out`` packages (``()``: all of them)."""
    graph: dict[str, set[str]] = {}
    known = {m for p in BOT.rglob("*.py") if (m := module_of(str(p), left_out=left_out)) is not None}
    for path in BOT.rglob("*.py"):
        name = module_of(str(path), left_out=left_out)
        if name is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(parse(path)):
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


def bot_frames(frame: types.FrameType | None) -> list[types.FrameType]:
    """The frames of ``bot/`` code on the stack that ends at ``frame``, outermost first."""
    out: list[types.FrameType] = []
    while frame is not None:
        if module_of(frame.f_code.co_filename) is not None:
            out.append(frame)
        frame = frame.f_back
    return out[::-1]


class Paths:
    """A ``sys.setprofile`` hook and an event-loop task factory that record, at each of a request's effects, the
    chain of ``bot/`` frames that led there: the chain that created the current task (recorded at its creation,
    recursively), then the current stack."""

    def __init__(self, effect: Callable[[types.FrameType], str | None]) -> None:
        self.effect = effect  # a call's frame -> the effect's name, or None
        self.origins: dict[int, tuple[asyncio.Task[Any], list[types.FrameType]]] = {}
        self.chains: list[tuple[str, list[types.FrameType]]] = []
        self.seen: dict[int, types.FrameType] = {}  # the effects' frames (kept alive here)

    def origin(self) -> list[types.FrameType]:
        task = asyncio.current_task()
        entry = self.origins.get(id(task)) if task is not None else None
        return list(entry[1]) if entry is not None and entry[0] is task else []

    def task_factory(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        chain = self.origin() + bot_frames(sys._getframe(1))
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        self.origins[id(task)] = (task, chain)
        return task

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = self.effect(frame)
        seen = self.seen.get(id(frame))
        if name is not None and seen is not frame:  # a coroutine's later 'call' events are its resumes
            self.seen[id(frame)] = frame
            self.chains.append((name, self.origin() + bot_frames(frame)))

    def tree(self) -> list[Call]:
        """The chains merged into one call tree: frames shared by two chains are one node."""
        roots: list[Call] = []
        nodes: dict[int, tuple[types.FrameType, Call]] = {}
        for _, chain in self.chains:
            siblings = roots
            for frame in chain:
                entry = nodes.get(id(frame))
                if entry is None or entry[0] is not frame:
                    module = module_of(frame.f_code.co_filename)
                    assert module is not None
                    call = Call(module, frame.f_code.co_qualname)
                    siblings.append(call)
                    nodes[id(frame)] = entry = (frame, call)
                siblings = entry[1].children
        return roots


def effect_of(frame: types.FrameType, wanted: dict[str, Callable[[dict[str, Any]], bool]]) -> str | None:
    """The effect a call is: a Web API call (slack_sdk's ``api_call``) whose method and arguments ``wanted``
    accepts, or the run's resume (``Agent.resume_stream``) when ``wanted`` names it."""
    code = frame.f_code
    if code.co_name == "api_call" and "slack_sdk" in code.co_filename:
        method = frame.f_locals.get("api_method")
        accept = wanted.get(method) if isinstance(method, str) else None
        args = {k: frame.f_locals.get(k) for k in ("json", "params", "data")}
        return method if accept is not None and accept(args) else None
    if code.co_qualname == "Agent.resume_stream" and "resume" in wanted and module_of(code.co_filename):
        return "resume"
    return None


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


async def walk_requests(show: bool, *, paths: bool = False) -> dict[str, Figures]:
    """Trace one mention and one click (see the module docstring), print each one's figures and return them by
    request (``mention``, ``click``). Raises ``SystemExit`` when ``paths`` and an effect was not seen."""
    import fakeredis

    from bot.agent import OpenAIChatModel
    from bot.config import Settings
    from bot.fakeslack.workspace import Workspace
    from bot.slack.app import build_bot, start_http
    from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

    token, secret = "xoxb-walk-0123456789", "walk-signing-secret"
    question = {"question": QUESTION, "options": [{"label": "api"}, {"label": "web"}]}
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
                    channel="C_GENERAL", thread_ts=thread, predicate=lambda m: QUESTION in str(m.get("blocks"))
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
            walked: dict[str, Figures] = {}
            for title in ("mention", "click"):
                marker: dict[str, str] = {}
                hook: Walk | Paths
                if paths:
                    hook = Paths(lambda frame, title=title: effect_of(frame, EFFECTS[title]))
                    asyncio.get_running_loop().set_task_factory(hook.task_factory)
                else:
                    hook = Walk(lambda body, marker=marker: _is_marked(body, marker))
                sys.setprofile(hook)
                try:
                    if title == "mention":
                        thread, asked = await mention()
                    else:
                        await click(asked, thread)
                finally:
                    sys.setprofile(None)
                    asyncio.get_running_loop().set_task_factory(None)
                if isinstance(hook, Paths):
                    missed = sorted(set(EFFECTS[title]) - {name for name, _ in hook.chains})
                    if missed:  # a walk to nothing is no figure: say what was not seen
                        raise SystemExit(f"request_walk: the {title}'s {', '.join(missed)} was not seen")
                    effects = ", ".join(name for name, _ in hook.chains)
                    if show:
                        for name, chain in hook.chains:
                            print(
                                f"  {name}: "
                                + " > ".join(f"{module_of(f.f_code.co_filename)}.{f.f_code.co_qualname}" for f in chain)
                            )
                    walked[title] = figures(hook.tree(), above)
                    report(f"{title} (path to: {effects})", walked[title], show=show)
                else:
                    walked[title] = figures(hook.roots, above)
                    report(title, walked[title], show=show)
        finally:
            await bot.drain()
            await runner.cleanup()
            await bot.aclose()
    return walked


EFFECTS: dict[str, dict[str, Callable[[dict[str, Any]], bool]]] = {
    # a mention: the question's post (the thread's reply, status and reactions are not the question)
    "mention": {"chat.postMessage": lambda args: QUESTION in str(args)},
    # a click: the run's resume and the update that closes the question's message
    "click": {"chat.update": lambda args: QUESTION in str(args), "resume": lambda args: True},
}


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
    parser.add_argument(
        "--paths", action="store_true", help="count the path from the HTTP handler to the request's effects instead"
    )
    args = parser.parse_args()
    asyncio.run(walk_requests(args.show, paths=args.paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
