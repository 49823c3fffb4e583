"""Where Bolt's lazy listeners run: in this process, or queued for ``worker`` processes.

Bolt decides what handles a request (listener registration in :mod:`bot.slack.listeners`): each listener has an
ack function (answers Slack within 3 s) and lazy functions (the slow work). Bolt hands the lazy functions to its
lazy-listener runner; this module replaces that runner (as Bolt's AWS Lambda adapter does):

- :class:`InProcessRunner` runs them as tasks of this process (``serve``) and can :meth:`~InProcessRunner.drain`
  them (tests, graceful shutdown);
- :class:`QueueRunner` (the ``web`` role) queues ``{"fn": name, "body": payload, "context": {bot_user_id,
  bot_id}}`` on the Redis work queue; a ``worker`` process runs the named lazy function on that already verified
  payload with :meth:`LazyJobs.run_job`, never sending it through HTTP verification again (a job may be older than
  the 5 minutes a signature is valid). Tokens are never queued: the worker uses its own client.

Jobs carry their shape's version (``"v"``, :data:`~bot.store.work_queue.JOB_VERSION`). When the shape changes, bump
the version and add to :data:`JOB_UPGRADES` the function that turns a job of the old version into the new shape:
a newer worker then runs the jobs an older ``web`` queued, and an older worker leaves newer jobs in the queue for a
newer worker (:class:`~bot.store.work_queue.WorkQueue` parks them), so a rolling deploy strands nothing.

Nothing a request carries selects lazy-only execution: :func:`no_lazy_only_from_outside` clears Bolt's
``x-slack-bolt-lazy-only`` / ``x-slack-bolt-lazy-function-name`` header switches on every dispatched request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from slack_bolt.kwargs_injection.async_utils import build_async_required_kwargs
from slack_bolt.lazy_listener.async_runner import AsyncLazyListenerRunner
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.util.utils import get_arg_names_of_callable, get_name_for_callable
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import StoreUnavailable
from bot.slack.context import REDELIVERED
from bot.store.work_queue import JOB_VERSION, WorkQueue

log = logging.getLogger(__name__)

LazyFunction = Callable[..., Awaitable[None]]
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]
# version k -> the function turning a job of version k into the shape of version k + 1 (none yet: version 1 is the
# first shape). Keep every entry while a job of its version may still wait in a queue (JOB_MARKER_TTL: a day).
JOB_UPGRADES: Mapping[int, Upgrade] = {}
# What a worker needs of Bolt's context (and what ack functions leave for their lazy functions); never a token.
QUEUED_CONTEXT = (  # the modals' keys: questions/answer_modal.py, approvals/deciding.py
    "bot_user_id",
    "bot_id",
    "answer_loading_view_id",
    "answer_accepted",
    "decline_accepted",
)


async def acked() -> None:
    """The ack function of events: Bolt acks them itself before it runs (their work is in lazy functions)."""


async def no_lazy_only_from_outside(req: AsyncBoltRequest, next: Callable[[], Awaitable[Any]]) -> Any:
    """Global middleware: a dispatched request always runs its ack function (Bolt would skip it, and run one lazy
    function inline, when the request carries the lazy-only headers)."""
    req.lazy_only = False
    req.lazy_function_name = None
    return await next()


class HttpBoltRequest(AsyncBoltRequest):
    """Bolt's request for an HTTP request, copied once for a lazy listener instead of twice.

    Bolt hands a lazy function ``copy.deepcopy(request.to_copyable())``. In HTTP mode ``to_copyable()`` already
    makes a new request: the body parsed again from its raw text, the context copied (``AsyncBoltContext
    .to_copyable``). The deepcopy after it copied all of that a second time, a deep copy of the whole payload in
    Python: ~13 % of a ``web`` process's CPU, ~5 % of ``serve``'s (``benchmarks.ack_latency --profile``). The copy
    made here answers ``deepcopy`` with itself. Socket Mode requests are Bolt's own (not this class): unchanged.

    A request made by :meth:`parsed` keeps its body as JSON text, and the copy is read from that text rather than
    parsed from the raw body again: a form body (a click, a submission: ``payload=`` and percent-encoded JSON) is
    percent-decoded by ``urllib`` in Python, 0.3-0.5 ms for a 3.8 KB click on a slow 2-core machine, against ~0.05 ms
    for ``json.loads`` of the same payload and ~0.05 ms for the ``json.dumps`` that keeps it (``benchmarks.call_costs``,
    "Parse" rows). The copy is the same either way: JSON text of the endpoint's own parse, taken before any listener
    ran."""

    _snapshot: str | None = None  # the body as JSON text, as first parsed (set by :meth:`parsed`)

    @classmethod
    def parsed(
        cls, raw_body: str, body: dict[str, Any], *, query: str, headers: dict[str, str | Sequence[str]]
    ) -> HttpBoltRequest:
        """Bolt's HTTP-mode request for ``raw_body``, already parsed into ``body`` (by Bolt's own ``parse_body``, as
        the endpoint's checks do): Bolt would parse it again, as it takes only text in HTTP mode; a dict body it
        takes as is in Socket Mode, so the request is built that way and then made an HTTP one (its raw body kept
        for Bolt's signature check and for the lazy listener's copy)."""
        # a JSON body is its own snapshot (parsed again by json.loads, as Bolt does); a form's is its parse, as JSON
        snapshot = raw_body if raw_body.startswith("{") else json.dumps(body)
        return cls._built(raw_body, body, snapshot, query=query, headers=headers, context=None)

    @classmethod
    def _built(
        cls,
        raw_body: str,
        body: dict[str, Any],
        snapshot: str,
        *,
        query: str | dict[str, Sequence[str]],
        headers: dict[str, str | Sequence[str]],
        context: dict[str, Any] | None,
    ) -> HttpBoltRequest:
        """The HTTP-mode request of ``raw_body`` parsed as ``body`` (``snapshot``: that parse as JSON text), built as
        a Socket Mode one (which takes a dict body as is) and then made an HTTP one."""
        request = cls(body=body, query=query, headers=headers, context=context, mode="socket_mode")
        request.raw_body, request.mode, request._snapshot = raw_body, "http", snapshot
        return request

    def to_copyable(self) -> AsyncBoltRequest:
        """A new request from the body as first parsed (else the raw body) and a copy of the context, as Bolt's
        (HTTP mode)."""
        if self.mode != "http":
            return super().to_copyable()
        headers: dict[str, str | Sequence[str]] = {name: list(values) for name, values in self.headers.items()}
        query: dict[str, Sequence[str]] = {name: list(values) for name, values in self.query.items()}
        context = self.context.to_copyable()
        if self._snapshot is None:
            return _FreshCopy(body=self.raw_body, query=query, headers=headers, context=context, mode=self.mode)
        body = json.loads(self._snapshot)
        return _FreshCopy._built(self.raw_body, body, self._snapshot, query=query, headers=headers, context=context)


class _FreshCopy(HttpBoltRequest):
    """A request :meth:`HttpBoltRequest.to_copyable` just made: nothing in it is shared, so its deep copy is
    itself."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _FreshCopy:
        return self


_ARG_NAMES: weakref.WeakKeyDictionary[LazyFunction, list[str]] = weakref.WeakKeyDictionary()


def _arg_names(function: LazyFunction) -> list[str]:
    """Bolt's ``get_arg_names_of_callable`` (``inspect.getfullargspec``), once per lazy function (kept while the
    function lives): the listeners are a fixed set, and inspecting a signature on every request costs ~50 µs of
    CPU. A copy, so nothing Bolt does with the list reaches the next request."""
    names = _ARG_NAMES.get(function)
    if names is None:
        names = _ARG_NAMES[function] = list(get_arg_names_of_callable(function))
    return list(names)


class InProcessRunner(AsyncLazyListenerRunner):
    """Runs lazy functions as tasks of this process; :meth:`drain` waits for them."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._tasks: set[asyncio.Future[Any]] = set()

    def start(self, function: LazyFunction, request: AsyncBoltRequest) -> None:
        """Bolt's hook: start ``function`` on ``request`` (a copy with its context) in the background."""
        self._spawn(self.run(function, request))

    async def run(self, function: LazyFunction, request: AsyncBoltRequest) -> None:
        """Run ``function`` with Bolt's arguments for ``request``; an exception is logged with its traceback."""
        kwargs = build_async_required_kwargs(
            logger=self.logger,
            required_arg_names=_arg_names(function),
            request=request,
            response=None,
            this_func=function,
        )
        try:
            await function(**kwargs)
        except Exception:
            log.exception("listener %s failed", get_name_for_callable(function))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait until the work started here (and any started meanwhile) has finished."""
        me = asyncio.current_task()
        while pending := [t for t in self._tasks if t is not me and not t.done()]:
            await asyncio.wait(pending)


class QueueRunner(InProcessRunner):
    """The ``web`` role: lazy functions are queued for workers. ``on_store_down(body)`` tells the person when the
    queue can't be reached (their request was acked, but nothing will happen)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        queue: WorkQueue,
        on_store_down: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        super().__init__(logger)
        self.queue = queue
        self.on_store_down = on_store_down

    def start(self, function: LazyFunction, request: AsyncBoltRequest) -> None:
        """Bolt's hook: queue the call instead of running it."""
        self._spawn(self._enqueue(function, request))

    async def _enqueue(self, function: LazyFunction, request: AsyncBoltRequest) -> None:
        context = {key: request.context.get(key) for key in QUEUED_CONTEXT if request.context.get(key)}
        job = {"fn": get_name_for_callable(function), "body": request.body, "context": context}
        try:
            await self.queue.enqueue(job)
        except StoreUnavailable:
            await self.on_store_down(request.body)


class LazyJobs:
    """The lazy functions a worker may run, by the name Bolt gives them (their ``__name__``); ``version`` and
    ``upgrades``: the job shape this worker runs and how older shapes become it (see the module docstring; tests
    make workers of other versions)."""

    def __init__(self, *, version: int = JOB_VERSION, upgrades: Mapping[int, Upgrade] = JOB_UPGRADES) -> None:
        self.functions: dict[str, LazyFunction] = {}
        self.version = version
        self.upgrades = upgrades

    def add(self, function: LazyFunction) -> LazyFunction:
        """Register ``function``. Raises ``ValueError`` when another function already has its name."""
        name = get_name_for_callable(function)
        known = self.functions.get(name)
        if known is not None and known != function:
            raise ValueError(f"two lazy functions are named {name!r}; a worker could not tell them apart")
        self.functions[name] = function
        return function

    def upgrade(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """``job`` in this worker's shape (older versions upgraded step by step; ``"v"`` absent means 1), or ``None``
        when it can't be: a newer version (the queue leaves those for newer workers) or no upgrade from its version.
        An upgrade that raises is a bug: the exception propagates (the queue logs it)."""
        v = job.get("v", 1)
        if not isinstance(v, int) or v > self.version:
            return None
        while v < self.version:
            step = self.upgrades.get(v)
            if step is None:
                return None
            v += 1
            job = {**step(job), "v": v}
        return job

    async def run_job(self, job: dict[str, Any], *, client: AsyncWebClient, runner: InProcessRunner) -> None:
        """Run one queued job (see the module docstring) with ``client``, upgraded to this worker's version first.
        A job that can't be upgraded, or names an unknown function, is logged and dropped."""
        queued = job
        job = self.upgrade(job) or {}
        name, body = job.get("fn"), job.get("body")
        function = self.functions.get(str(name))
        if not job or function is None or not isinstance(body, dict):
            log.error("work queue: dropping job %s (version %r, function %r)", queued.get("id"), queued.get("v"), name)
            return
        # The job id marks this delivery chain: a job redelivered after its worker died is the same job, so marks it
        # made (e.g. "event seen") are recognised as its own (see ConversationIndex.is_new_event).
        context = {**(job.get("context") or {}), "client": client, "job_id": str(job.get("id") or "")}
        request = AsyncBoltRequest(body=body, mode="socket_mode", context=context)
        request.lazy_only, request.lazy_function_name = True, str(name)
        token = REDELIVERED.set(bool(queued.get("redelivered")))
        try:
            await runner.run(function, request)
        finally:
            REDELIVERED.reset(token)
