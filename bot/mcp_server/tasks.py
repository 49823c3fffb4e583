"""MCP tasks for the MCP server's questions: the ``io.modelcontextprotocol/tasks`` extension (SEP-2663, on the
2026-07-28 protocol revision), server half :class:`Tasks` and, for agents on the ``mcp`` SDK's own client, client
half :class:`TasksClient`.

Why this generation: the 2025-11-25 revision had tasks in the core protocol (``tools/call`` with a ``task`` param,
``tasks/get`` / ``tasks/result`` / ``tasks/list`` / ``tasks/cancel``); the 2026-07-28 revision removed them from the
core and moved them to this extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``; no ``tasks/result`` or
``tasks/list``: a finished task's ``tasks/get`` carries its result). The installed SDK (``mcp`` 2.3) implements
neither: its 2025-11-25 method tables leave ``tasks/*`` out and on that wire a ``tools/call`` may answer only a
``CallToolResult``; it offers the extension hooks this module uses
(:class:`mcp.server.extension.Extension`: new methods and a ``tools/call`` interceptor; on the client
:class:`mcp.client.extension.ClientExtension` with a :class:`~mcp.client.extension.ResultClaim` for ``resultType:
"task"``). A claimed result can only travel on the 2026-07-28 wire, so a client on the older handshake keeps the
blocking call, as does a client that does not declare the extension on its request (Claude Code 2.1.197 does
not).

A task is the question's run (``taskId`` is its run id); its status is read from the run in Redis at every
``tasks/get``, so any server process on the same Redis answers for any task, across restarts of the server and
of the client:

- ``working`` while the question waits for a person in Slack (``statusMessage``: whom and where), and once
  answered while the answer is recorded (``statusMessage``: "the answer is being recorded"). Not
  ``input_required``: the extension means by it input the *client* must give (its ``inputRequests``, answered with
  ``tasks/update``), and here none of it is the client's to give: a generic client told ``input_required`` looks for
  requests to fulfil and finds none. ``tasks/update`` has nothing to take (it is acknowledged, its responses
  ignored, as the extension says of unknown keys);
- ``completed`` with ``result``: the very ``CallToolResult`` the blocking call returns (``no_answer`` past the
  deadline included);
- ``cancelled`` once withdrawn (``tasks/cancel``, which withdraws the question in Slack as a client's
  cancellation of a blocking call does), an approval's as a question's (:func:`withdrawn`).

A task is its caller's: another caller's ``tasks/get`` / ``tasks/cancel`` of it is "no such task" (``-32602``).
A client may also be told of its tasks' status changes (``notifications/tasks`` on a ``subscriptions/listen``
stream naming them): :mod:`bot.mcp_server.task_status`; this module holds their wire shapes and the client's
:func:`listen_tasks`.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import anyio
import pydantic_core
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    Notification,
    NotificationParams,
    Request,
    RequestParams,
    Result,
    SubscriptionFilter,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

from bot.agent.state import RunState
from bot.errors import RunNotFound, StoreCorrupt
from bot.mcp_server.asker import AGENT_THAT_ASKED, CALLER, ENDED, MCP_TOOL, Asked, Asker, outcome_of
from bot.mcp_server.callers import Caller

log = logging.getLogger(__name__)

TASKS = "io.modelcontextprotocol/tasks"  # the extension's identifier (SEP-2663)
TASK_IDS = "taskIds"  # subscriptions/listen's notifications key naming the tasks to be told of
TASK_NOTIFICATION = "notifications/tasks"  # the extension's task status notification
POLL_MS = 2000  # pollIntervalMs: one Redis read per poll
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
Render = Callable[[RunState], CallToolResult]  # an ended question run -> the tool's result (as the blocking call's)


def structured_result(outcome: dict[str, Any]) -> CallToolResult:
    """A tool result carrying ``outcome`` as the SDK's ``MCPServer`` makes one of a tool's ``dict`` return:
    ``structuredContent`` and the same JSON as one text block (``pydantic_core.to_json``, indent 2)."""
    text = pydantic_core.to_json(outcome, fallback=str, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=outcome)


class TaskIdParams(RequestParams):
    """``tasks/get`` / ``tasks/cancel`` params: ``{"taskId"}``."""

    task_id: str


class UpdateTaskParams(TaskIdParams):
    """``tasks/update`` params: ``{"taskId", "inputResponses"}``."""

    input_responses: dict[str, Any] | None = None


class TaskFields(Result):
    """A task's fields (SEP-2663 ``Task``): times ISO 8601, ``ttlMs`` / ``pollIntervalMs`` in milliseconds."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskResult(TaskFields):
    """A task as ``tasks/get`` returns it (SEP-2663 ``DetailedTask``): ``result`` once ``completed`` (the tool's
    ``CallToolResult``), ``error`` once ``failed``; ``inputRequests`` (``input_required`` only) is never sent here:
    :class:`Tasks` asks the client for nothing."""

    result_type: Literal["complete"] = "complete"
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskNotificationParams(NotificationParams):
    """``notifications/tasks`` params: the whole task as ``tasks/get`` returns it (``result`` once ``completed``),
    and the listen stream's ``_meta`` (:mod:`bot.mcp_server.task_status`)."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    status: TaskStatus


class TaskNotification(Notification[TaskNotificationParams, Literal["notifications/tasks"]]):
    """The extension's task status notification (its ``TaskStatusNotification``)."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: TaskNotificationParams


class CreateTaskResult(TaskFields):
    """The ``tools/call`` result that is a task (``resultType: "task"``; the extension's ``CreateTaskResult``)."""

    result_type: Literal["task"] = "task"


@dataclass
class Tasked:
    """Where the tool, asked to make a task (:data:`TASKING` set), leaves the question it posted."""

    asked: Asked | None = None


TASKING: contextvars.ContextVar[Tasked | None] = contextvars.ContextVar("mcp_tasking", default=None)
"""Set by :meth:`Tasks.intercept_tool_call` around a call that becomes a task: the tool posts its question, leaves
it here and returns at once instead of waiting (:func:`bot.mcp_server.server.ask_and_wait`)."""


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the tasks extension, on the 2026-07-28 wire (the only one a task
    result can travel on)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and TASKS in (extensions or {})


def withdrawn(state: RunState) -> bool:
    """Whether the question of run ``state`` was withdrawn by the agent that asked (``tasks/cancel``, a client's
    cancellation): its answer is that withdrawal (``outcome: "cancelled"`` by :data:`AGENT_THAT_ASKED`,
    :meth:`bot.agent.Agent.cancel_question`). An approval's withdrawal reads as a decline in the blocking call's
    result; its task is ``cancelled`` as a question's is. A person's Cancel in Slack is not one: it is the call's
    result, as the blocking call gets it."""
    return any(
        a.tool_call_id == f"ask_{state.run_id}" and a.outcome == "cancelled" and a.answered_by == AGENT_THAT_ASKED
        for a in state.answers
    )


def _iso(value: Any) -> str:
    return str(value.isoformat()).replace("+00:00", "Z")


class Tasks(Extension):
    """The tasks extension on ``asker``'s questions: ``tools`` (MCP tool name -> how an ended run becomes its
    result) become tasks for clients that declare the extension; ``caller_of`` names the caller of a request
    (raises ``MCPError``/``ToolError`` when there is none)."""

    identifier = TASKS

    def __init__(
        self,
        asker: Asker,
        *,
        tools: Mapping[str, Render],
        caller_of: Callable[[ServerRequestContext[Any, Any]], Caller],
        retention: float,
    ) -> None:
        self.asker, self.renders, self.caller_of, self.retention = asker, dict(tools), caller_of, retention

    def methods(self) -> list[MethodBinding]:
        """``tasks/get``, ``tasks/update``, ``tasks/cancel``, on the 2026-07-28 wire."""
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=versions),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, protocol_versions=versions),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=versions),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """A call of a tool in :attr:`renders` from a client that declares the extension: the question is posted (the
        tool's own checks and refusals as for a blocking call) and its task returned at once; any other call as
        it is."""
        if params.name not in self.renders or not declares_tasks(ctx):
            return await call_next(ctx)
        box = Tasked()
        token = TASKING.set(box)
        try:
            result = await call_next(ctx)
        finally:
            TASKING.reset(token)
        if box.asked is None:  # refused, or bad input: the tool's error result, as a blocking call gets it
            return result
        state = await self.asker.agent.get_run(box.asked.run_id)
        task = await self.task_of(state)
        fields = task.model_dump(by_alias=True, exclude={"result_type", "input_requests", "result", "error"})
        return CreateTaskResult.model_validate(fields)

    async def task_of(self, state: RunState) -> TaskResult:
        """The task that run ``state`` is, as ``tasks/get`` reports it (see the module docstring)."""
        created = state.created_at
        deadline = state.pending.expires_at if state.pending is not None else None
        kept_until = (deadline or state.updated_at) + timedelta(seconds=self.retention)
        base: dict[str, Any] = {
            "taskId": state.run_id,
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(state.updated_at),
            "ttlMs": max(int((kept_until - created).total_seconds() * 1000), 0),
            "pollIntervalMs": POLL_MS,
        }
        asked = self.asker.asked_of(state)
        if state.status in ENDED:
            if withdrawn(state):  # a person's Cancel, or a stop in Slack: the result, as the blocking call's
                return TaskResult.model_validate(
                    {**base, "status": "cancelled", "statusMessage": f"withdrawn by {AGENT_THAT_ASKED}"}
                )
            result = self._render(state)
            return TaskResult.model_validate(
                {**base, "status": "completed", "result": result.model_dump(by_alias=True, exclude_none=True)}
            )
        if state.status == "suspended":
            waiting = await self.asker.waiting_for(asked)
            return TaskResult.model_validate({**base, "status": "working", "statusMessage": waiting})
        return TaskResult.model_validate({**base, "status": "working", "statusMessage": "the answer is being recorded"})

    def _render(self, state: RunState) -> CallToolResult:
        name = state.metadata.get(MCP_TOOL)
        render = self.renders.get(str(name)) if name else None
        return render(state) if render is not None else structured_result(outcome_of(state))

    async def _run(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunState:
        """The run that task ``task_id`` of this request's caller is. Raises ``MCPError`` (-32021: the client did
        not declare the extension; -32602: no such task of this caller's)."""
        if not declares_tasks(ctx):
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"Client did not declare required extension {TASKS!r}",
                data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
            )
        state = await self.caller_run(ctx, task_id)
        if state is None:
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: no such task (or it expired)")
        return state

    async def caller_run(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunState | None:
        """The run that task ``task_id`` is when it is a task of this request's caller, else None (no such task,
        past retention, another caller's). Raises ``StoreUnavailable``, ``MCPError``/``ToolError`` (the request
        names no caller)."""
        caller = self.caller_of(ctx)
        try:
            state = await self.asker.agent.get_run(task_id) if task_id.startswith("run_mcp") else None
        except (RunNotFound, StoreCorrupt):
            state = None
        if state is None or str(state.metadata.get(CALLER, "")) != caller.name:
            return None
        return state

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        return await self.task_of(await self._run(ctx, params.task_id))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> HandlerResult:
        await self._run(ctx, params.task_id)  # a known task; its inputRequests are never any: nothing to take
        return EmptyResult()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        state = await self._run(ctx, params.task_id)
        with anyio.CancelScope(shield=True):  # once asked to, the withdrawal is carried out whole
            await self.asker.withdraw(self.asker.asked_of(state))
        return EmptyResult()


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    """The client's ``tasks/get`` (``Mcp-Name`` header: the task id, as the extension asks over HTTP)."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    """The client's ``tasks/cancel``."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def get_task(session: Any, task_id: str) -> TaskResult:
    """``tasks/get`` of ``task_id`` on an SDK ``ClientSession``. Raises ``MCPError``."""
    result: TaskResult = await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskResult)
    return result


async def cancel_task(session: Any, task_id: str) -> None:
    """``tasks/cancel`` of ``task_id`` on an SDK ``ClientSession``. Raises ``MCPError``."""
    await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), EmptyResult)


class ListenTasks(Request[SubscriptionsListenRequestParams, Literal["subscriptions/listen"]]):
    """The client's ``subscriptions/listen`` naming tasks (``notifications.taskIds``)."""

    method: Literal["subscriptions/listen"] = "subscriptions/listen"
    params: SubscriptionsListenRequestParams


async def listen_tasks(session: Any, task_ids: list[str]) -> SubscriptionsListenResult:
    """``subscriptions/listen`` for ``task_ids`` on an SDK ``ClientSession``: returns when the server ends the
    stream (every task ended); the acknowledgement reaches the session's ``message_handler`` and each
    ``notifications/tasks`` the extension's binding (:class:`TasksClient`). Raises ``MCPError``."""
    notifications = SubscriptionFilter.model_validate({TASK_IDS: list(task_ids)})
    request = ListenTasks(params=SubscriptionsListenRequestParams(notifications=notifications))
    result: SubscriptionsListenResult = await session.send_request(request, SubscriptionsListenResult)
    return result


class TasksClient(ClientExtension):
    """The client half, for the ``mcp`` SDK's ``Client(extensions=[TasksClient()])``: declares the extension, and
    ``call_tool`` of a tool that becomes a task follows it until it ends, returning the task's result (a cancelled
    task is an error result): it listens for the task's status notifications (``subscriptions/listen`` naming it,
    :mod:`bot.mcp_server.task_status`), each of which carries the whole task, and also polls ``tasks/get`` (every
    ``pollIntervalMs``, at most ``max_poll`` seconds apart, at least ``min_poll``) in case none comes.
    ``on_task(task)`` is awaited with each task seen (e.g. to keep its id, to pick it up after a restart with
    :func:`get_task`), ``on_notified(task)`` with each ``notifications/tasks`` received (any task's). ``listen``:
    False polls only. Without the extension (or with ``allow_claimed=True``) the caller gets the
    :class:`CreateTaskResult` itself."""

    identifier = TASKS

    def __init__(
        self,
        *,
        on_task: Callable[[TaskFields], Awaitable[None]] | None = None,
        on_notified: Callable[[TaskResult], Awaitable[None]] | None = None,
        listen: bool = True,
        min_poll: float = 0.05,
        max_poll: float = 10.0,
    ) -> None:
        self.on_task, self.on_notified, self.listen = on_task, on_notified, listen
        self.min_poll, self.max_poll = min_poll, max_poll
        self._told: dict[str, TaskResult] = {}  # task id -> the last notification of it not yet taken
        self._wake: dict[str, anyio.Event] = {}  # task id -> set when a notification of it arrives

    def claims(self) -> list[ResultClaim[Any]]:
        """The one result shape it claims: ``resultType: "task"`` on ``tools/call``."""
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    def notifications(self) -> list[NotificationBinding[Any]]:
        """The one notification it observes: ``notifications/tasks``."""
        return [
            NotificationBinding(method=TASK_NOTIFICATION, params_type=TaskNotificationParams, handler=self._notified)
        ]

    async def _notified(self, params: TaskNotificationParams) -> None:
        task = TaskResult.model_validate(params.model_dump(by_alias=True, exclude={"meta"}))
        if self.on_notified is not None:
            await self.on_notified(task)
        if (wake := self._wake.get(task.task_id)) is not None:
            self._told[task.task_id] = task
            wake.set()

    async def _listen(self, session: Any, task_id: str) -> None:
        try:
            await listen_tasks(session, [task_id])
        except MCPError as exc:  # a server that can't tell: polling goes on
            log.debug("task %s: no status notifications: %s", task_id, exc)

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        task_id = created.task_id
        self._wake[task_id] = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                if self.listen:
                    group.start_soon(self._listen, ctx.session, task_id)
                try:
                    result = await self._follow(created, ctx)
                finally:
                    group.cancel_scope.cancel()
            return result
        finally:
            self._wake.pop(task_id, None)
            self._told.pop(task_id, None)

    async def _follow(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        task: TaskFields = created
        while True:
            if self.on_task is not None:
                await self.on_task(task)
            result = getattr(task, "result", None)
            if task.status == "completed" and result is not None:
                return CallToolResult.model_validate(result)
            if task.status in ("cancelled", "failed"):
                why = task.status_message or (getattr(task, "error", None) or {}).get("message") or task.status
                text = TextContent(type="text", text=f"task {task.status}: {why}")
                return CallToolResult(content=[text], is_error=True)
            wait = (task.poll_interval_ms or 1000) / 1000
            with anyio.move_on_after(min(max(wait, self.min_poll), self.max_poll)):
                await self._wake[created.task_id].wait()
            told = self._told.pop(created.task_id, None)
            if told is not None:
                self._wake[created.task_id] = anyio.Event()
                task = told
            else:
                task = await get_task(ctx.session, created.task_id)
