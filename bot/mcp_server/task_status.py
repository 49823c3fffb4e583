"""Task status notifications: a client told of its task's status changes (the tasks extension's
``notifications/tasks``, on a ``subscriptions/listen`` stream), served by :class:`TaskListen`.

The extension (``io.modelcontextprotocol/tasks``, 2026-07-28 wire) lets a client ask to be told: it sends
``subscriptions/listen`` with ``notifications.taskIds``, the server acknowledges the ids it will report on
(``notifications/subscriptions/acknowledged``, ``taskIds``: the caller's own tasks among them; another caller's
or an unknown id is left out), and then sends ``notifications/tasks`` on that stream, each carrying the whole task
as ``tasks/get`` returns it at that moment (``result`` once ``completed``), stamped with the stream's
``_meta["io.modelcontextprotocol/subscriptionId"]``. A client that did not declare the extension on the listen
request is refused (``-32021``). The installed SDK (``mcp`` 2.3) serves ``subscriptions/listen`` for its own
change events only (its ``ListenHandler`` drops ``taskIds``), so :class:`TaskListen`, a server middleware, serves a
listen request that names task ids, still delivering the SDK's change events it asked for from the server's
``SubscriptionBus``; any other listen request goes on to the SDK's handler. Its client half is
:class:`bot.mcp_server.tasks.TasksClient`.

Which process tells: the one holding the client's stream, whichever process recorded the change (the person's
click is taken by a ``serve`` process, a ``tasks/cancel`` may reach another MCP server process). It reads the
watched tasks' runs from Redis every :data:`WATCH_SECONDS` (one read per task not yet ended; a store outage is
waited through) and sends a notification when a task's status or ``lastUpdatedAt`` changed since the last one it
sent. Right after the acknowledgement it sends each task's current state, so a change between the client's
``tasks/get`` and its listen is not missed. A task is ``working`` while it waits for a person (its
``statusMessage`` says whom) and while its answer is recorded (milliseconds): a client is told ``working``, then
``completed`` or ``cancelled``. Once every task it watches has ended (or expired), and it asked for none of the
SDK's events, the stream ends gracefully (the ``subscriptions/listen`` result).

The 2025-11-25 revision's ``notifications/tasks/status`` is not sent: on that wire the SDK serves no tasks at all
(:mod:`bot.mcp_server.tasks`), so a client there keeps the blocking call and its progress notifications.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, ServerEvent, event_matches, event_to_notification
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ServerNotification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bot.errors import RunNotFound, StoreCorrupt, StoreUnavailable
from bot.mcp_server.tasks import (
    TASK_IDS,
    TASKS,
    TaskNotification,
    TaskNotificationParams,
    TaskResult,
    Tasks,
    declares_tasks,
)

log = logging.getLogger(__name__)

LISTEN = "subscriptions/listen"
WATCH_SECONDS = 1.0  # how often a stream's process reads its tasks' runs from Redis
MAX_TASK_IDS = 100  # task ids one listen request may name; more is refused (-32602)
MAX_STREAMS = 256  # listen streams naming tasks one process serves at once; more is refused (-32603)
ENDED_STATUSES = ("completed", "failed", "cancelled")


def task_ids_of(params: Any) -> list[str] | None:
    """The ``notifications.taskIds`` of raw ``subscriptions/listen`` params, or None when it names none. Raises
    ``MCPError`` (-32602) when it is not a list of at most :data:`MAX_TASK_IDS` strings."""
    notifications = params.get("notifications") if isinstance(params, dict) else None
    ids = notifications.get(TASK_IDS) if isinstance(notifications, dict) else None
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_TASK_IDS:
        raise MCPError(code=INVALID_PARAMS, message=f"{TASK_IDS} must be a list of at most {MAX_TASK_IDS} task ids")
    return list(dict.fromkeys(ids)) or None


def honored_kinds(requested: SubscriptionFilter) -> SubscriptionFilter:
    """The SDK's change events of ``requested`` this stream delivers (every one asked for, as the SDK's own
    handler honours them), without ``taskIds``."""
    return SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
        resource_subscriptions=list(requested.resource_subscriptions) if requested.resource_subscriptions else None,
    )


class TaskListen:
    """Server middleware (``MCPServer(middleware=[...])``) serving ``subscriptions/listen`` requests that name
    ``taskIds`` for ``tasks`` (see the module docstring); ``bus``: the server's ``SubscriptionBus`` (the SDK's
    events such a stream also asked for). ``every``: seconds between reads of the watched runs."""

    def __init__(self, tasks: Tasks, bus: SubscriptionBus, *, every: float = WATCH_SECONDS) -> None:
        self.tasks, self.bus, self.every = tasks, bus, every
        self.streams = 0

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """A listen request naming task ids is served here; every other request goes on."""
        if ctx.method != LISTEN or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return await call_next(ctx)  # (on an older wire the SDK answers "Method not found")
        if (ids := task_ids_of(ctx.params)) is None:
            return await call_next(ctx)
        if not declares_tasks(ctx):
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="Missing required client capability",
                data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
            )
        if ctx.request_id is None:
            raise MCPError(code=INVALID_REQUEST, message="subscriptions/listen requires a request id")
        try:
            params = SubscriptionsListenRequestParams.model_validate(ctx.params or {}, by_name=False)
        except ValidationError:
            raise MCPError(code=INVALID_PARAMS, message="Invalid subscriptions/listen params") from None
        if self.streams >= MAX_STREAMS:
            raise MCPError(code=INTERNAL_ERROR, message="Subscription limit reached")
        self.streams += 1
        try:
            return await self._serve(ctx, ids, honored_kinds(params.notifications))
        finally:
            self.streams -= 1

    async def _serve(
        self, ctx: ServerRequestContext[Any, Any], ids: list[str], kinds: SubscriptionFilter
    ) -> SubscriptionsListenResult:
        subscription_id = ctx.request_id
        assert subscription_id is not None
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        watched = [task_id for task_id in ids if await self.tasks.caller_run(ctx, task_id) is not None]
        uris = frozenset(kinds.resource_subscriptions or ())
        wants_events = any((kinds.tools_list_changed, kinds.prompts_list_changed, kinds.resources_list_changed, uris))
        send, receive = anyio.create_memory_object_stream[ServerEvent](1024)

        def deliver(event: ServerEvent) -> None:
            if event_matches(kinds, uris, event):
                try:
                    send.send_nowait(event)
                except (anyio.WouldBlock, anyio.ClosedResourceError):
                    log.warning("listen stream %r: event backlog full; an event was dropped", subscription_id)

        unsubscribe = self.bus.subscribe(deliver) if wants_events else (lambda: None)
        honored = SubscriptionFilter.model_validate(
            {**kinds.model_dump(by_alias=True, exclude_none=True), TASK_IDS: watched}
        )
        last: dict[str, tuple[str, str]] = {}  # task id -> (status, lastUpdatedAt) last sent

        async def tell(task: TaskResult) -> None:
            fields = task.model_dump(by_alias=True, exclude_none=True, exclude={"result_type"})
            note = TaskNotification(params=TaskNotificationParams.model_validate({**fields, "_meta": meta}))
            await ctx.session.send_notification(cast(ServerNotification, note), related_request_id=subscription_id)
            last[task.task_id] = (task.status, task.last_updated_at)

        async def look() -> None:
            for task_id in [t for t in watched if last.get(t, ("",))[0] not in ENDED_STATUSES]:
                try:
                    state = await self.tasks.asker.agent.get_run(task_id)
                except (RunNotFound, StoreCorrupt):  # past retention: nothing more to tell of it
                    watched.remove(task_id)
                    continue
                except StoreUnavailable as exc:
                    log.warning("listen stream %r: waiting through a store outage: %s", subscription_id, exc)
                    return
                task = await self.tasks.task_of(state)
                if last.get(task_id) != (task.status, task.last_updated_at):
                    await tell(task)

        try:
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=subscription_id,
            )
            looked = -self.every
            while wants_events or any(last.get(t, ("",))[0] not in ENDED_STATUSES for t in watched):
                if time.monotonic() - looked >= self.every:
                    looked = time.monotonic()
                    await look()
                    continue
                with anyio.move_on_after(max(self.every - (time.monotonic() - looked), 0)):
                    event = await receive.receive()
                    await ctx.session.send_notification(
                        event_to_notification(event, meta), related_request_id=subscription_id
                    )
        finally:
            unsubscribe()
            send.close()
            receive.close()
        return SubscriptionsListenResult(_meta=meta)
