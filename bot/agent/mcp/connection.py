"""One MCP server's session for the bot (:class:`McpConnection`), and the tools it offers (:class:`McpTool`): the
session lives in one task of its own, opens lazily again after the server died, and turns every failure into a
tool error for the model. :mod:`bot.agent.mcp.toolset` starts and closes them all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection
from typing import Any

import anyio
import mcp_types as types
from jsonschema import SchemaError  # type: ignore[import-untyped,unused-ignore]
from jsonschema.validators import validator_for  # type: ignore[import-untyped,unused-ignore]
from mcp.client import Client, ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from bot.agent.forms import URL_SCHEMES, FormUnsupported
from bot.agent.mcp.config import HttpServer, McpServerConfig, StdioServer
from bot.agent.mcp.elicitation import call_with_input, elicit_result, question_for, validate_answer
from bot.agent.mcp.stderr import ServerStderr
from bot.agent.mcp.tool import McpArguments, McpStateRefused, McpTool, McpToolError, McpUnavailable, content_text
from bot.agent.tools import LiveAsk, ToolContext
from bot.errors import BotError, describe_error, describe_os_error

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0  # seconds to start a server, initialize the session and list its tools
CALL_TIMEOUT = 300.0  # seconds one tool call may take
CLOSE_TIMEOUT = 10.0  # seconds to close a session (a stdio server gets the SDK's grace period, then is killed)
MAX_LIST_PAGES = 100
CLIENT_INFO = types.Implementation(name="slack-ask-user", version="0.1.0")


class McpConnection:
    """One server's client session, held open by a task of its own; reconnects on a call after the server died."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        connect_timeout: float,
        call_timeout: float,
        url_schemes: Collection[str] = URL_SCHEMES,
    ) -> None:
        self.config = config
        self.url_schemes = tuple(url_schemes)  # the links its questions may show (MCP_ELICIT_URL_SCHEMES)
        self.name = config.name
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._owners: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._broken: str | None = None  # why the open session stopped working
        self._down = False  # an outage was logged and is not over
        self._closed = False
        self._one_call = asyncio.Lock()  # older protocol generation: one call at a time (see :meth:`_call_live`)
        self._asking: LiveAsk | None = None  # that call's way to ask a person
        self._ask_failed: BaseException | None = None  # why that call's question could not be asked
        self._clock: asyncio.Timeout | None = None  # that call's time limit (paused while a person is asked)
        self._one_question = asyncio.Lock()

    async def start(self) -> list[types.Tool]:
        """Open the session and list the server's tools. Raises :class:`McpUnavailable`."""
        async with self._lock:
            await self._stop_owner()  # a start that was cut short may have left one
            return await self._open(list_tools=True)

    def make_tool(self, mcp_tool: types.Tool, name: str) -> McpTool | None:
        """The agent tool for ``mcp_tool`` (offered as ``name``); ``None`` (logged) when its schema is invalid."""
        schema = dict(mcp_tool.input_schema)
        try:
            validator_class = validator_for(schema)
            validator_class.check_schema(schema)
            validator = validator_class(schema)
        except SchemaError as exc:
            log.warning(
                "MCP server %s: tool %s left out: invalid input schema (%s)", self.name, mcp_tool.name, exc.message
            )
            return None
        remote = mcp_tool.name

        async def execute(args: BaseModel, ctx: ToolContext | None) -> Any:
            arguments = args.root if isinstance(args, McpArguments) else args.model_dump(mode="json")
            return await self.call(remote, arguments, ctx)

        return McpTool(
            id=name,
            description=mcp_tool.description or mcp_tool.title or mcp_tool.name,
            input_schema=McpArguments,
            execute_fn=execute,
            require_approval=self.config.needs_approval(remote),
            resume_validator=validate_answer,
            server=self.name,
            mcp_name=remote,
            json_schema=schema,
            validator=validator,
        )

    async def call(self, tool: str, arguments: dict[str, Any], ctx: ToolContext | None = None) -> Any:
        """Call ``tool``; returns its result (structured content, else text). A question the server asks on the way
        is asked in ``ctx``'s run (:mod:`bot.agent.mcp.elicitation`): on the newer protocol generation the call
        suspends the run (``ToolSuspended``) and is sent again with the answers when it resumes. Raises
        :class:`McpToolError`."""
        session = await self._live_session()
        if session.discover_result is None:  # the older generation: questions arrive over this session
            return await self._call_live(session, tool, arguments, ctx)

        async def send(
            responses: dict[str, types.InputResponse] | None, state: str | None
        ) -> types.CallToolResult | types.InputRequiredResult:
            return await self._send(session, tool, arguments, responses=responses, request_state=state)

        return self._outcome(
            tool,
            await call_with_input(send, ctx, what=f"{tool} on MCP server {self.name}", url_schemes=self.url_schemes),
        )

    async def _call_live(
        self, session: ClientSession, tool: str, arguments: dict[str, Any], ctx: ToolContext | None
    ) -> Any:
        """A call on the older protocol generation. Its questions (``elicitation/create``) don't say which call
        asked, so calls to this server run one at a time and a question belongs to the call in flight; it is asked
        live (``ctx.ask_live``), and the call's time limit is paused while a person answers."""
        async with self._one_call:
            self._asking = ctx.ask_live if ctx is not None else None
            self._ask_failed = None
            try:
                async with asyncio.timeout(self.call_timeout) as clock:
                    self._clock = clock
                    result = await self._send(session, tool, arguments, limit=None)
            except TimeoutError:
                raise McpToolError(
                    f"{tool} on MCP server {self.name} took longer than {self.call_timeout:g} s"
                ) from None
            finally:
                self._asking = self._clock = None
            if self._ask_failed is not None:
                raise self._ask_failed
        if isinstance(result, types.InputRequiredResult):
            raise McpToolError(f"MCP server {self.name} asked for input in a way its protocol version does not allow")
        return self._outcome(tool, result)

    async def _on_question(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The session's ``elicitation/create`` handler (older protocol generation): ask the call in flight's
        person, live; ``cancel`` when nobody answered in time."""
        ask, clock = self._asking, self._clock
        if ask is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="no person to ask: no tool call of a run is in flight"
            )
        try:
            payload = question_for(params, url_schemes=self.url_schemes)
        except FormUnsupported as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"the bot can't ask this: {exc}")
        async with self._one_question:  # a call's questions are asked one at a time, like the agent's own
            return await self._ask_live(ask, clock, payload)

    async def _ask_live(
        self, ask: LiveAsk, clock: asyncio.Timeout | None, payload: dict[str, Any]
    ) -> types.ElicitResult | types.ErrorData:
        loop = asyncio.get_running_loop()
        when = clock.when() if clock is not None else None
        left = when - loop.time() if when is not None else None
        if clock is not None:
            clock.reschedule(None)  # a person's time is not the tool's
        try:
            answer = await ask(payload)
        except BotError as exc:  # the question could not be recorded, or the run was taken over
            self._ask_failed = exc
            return types.ElicitResult(action="cancel")
        finally:
            if clock is not None and left is not None:
                clock.reschedule(loop.time() + max(left, 1.0))
        return elicit_result(answer)

    async def _send(
        self,
        session: ClientSession,
        tool: str,
        arguments: dict[str, Any],
        *,
        responses: dict[str, types.InputResponse] | None = None,
        request_state: str | None = None,
        limit: float | None = -1.0,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One ``tools/call`` (``limit``: its read timeout, default ``call_timeout``). Raises :class:`McpToolError`."""
        try:
            result = await session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=self.call_timeout if limit == -1.0 else limit,
                input_responses=responses,
                request_state=request_state,
                allow_input_required=True,
            )
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED or self._owner_ended():
                raise self._lost("the connection closed") from None
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise McpToolError(
                    f"{tool} on MCP server {self.name} took longer than {self.call_timeout:g} s"
                ) from None
            if request_state is not None and exc.error.code == types.INVALID_PARAMS:  # e.g. restarted, or too late
                raise McpStateRefused(f"MCP server {self.name} refused {tool}: {exc.error.message}") from None
            raise McpToolError(f"MCP server {self.name} refused {tool}: {exc.error.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise self._lost(describe_error(exc)) from None
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as exc:
            if self._owner_ended():
                raise self._lost(describe_error(exc)) from None
            raise McpToolError(f"{tool} on MCP server {self.name} failed: {describe_error(exc)}") from None
        if not isinstance(result, types.CallToolResult | types.InputRequiredResult):
            raise McpToolError(f"{tool} on MCP server {self.name} answered with a result this bot does not know")
        return result

    def _outcome(self, tool: str, result: types.CallToolResult) -> Any:
        """A finished call's result for the model (structured content, else text). Raises :class:`McpToolError`."""
        if result.is_error:
            raise McpToolError(f"{tool} failed: {content_text(result.content) or 'the server gave no reason'}")
        if result.structured_content is not None:
            return result.structured_content
        return content_text(result.content)

    async def aclose(self) -> None:
        """End the session (and every task this connection started); later calls fail as unavailable."""
        self._closed = True
        if self._stop is not None:
            self._stop.set()  # the open session closes in its own task
        for task in self._owners:
            if task is not self._owner:
                task.cancel()  # still connecting
        if not self._owners:
            return
        _, pending = await asyncio.wait(list(self._owners), timeout=CLOSE_TIMEOUT)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    # --- internals ---------------------------------------------------------------------------------

    def _owner_ended(self) -> bool:
        return self._owner is None or self._owner.done()

    def _lost(self, reason: str) -> McpUnavailable:
        """The open session stopped working: log it (once per outage); the next call reconnects."""
        self._broken = reason
        if not self._down and not self._closed:
            self._down = True
            log.warning("MCP server %s is unavailable: %s; reconnecting on its next tool call", self.name, reason)
        return McpUnavailable(self.name, reason)

    async def _live_session(self) -> ClientSession:
        if self._closed:
            raise McpUnavailable(self.name, "the bot is shutting down")
        session = self._session
        if session is not None and self._broken is None and not self._owner_ended():
            return session
        async with self._lock:
            if self._session is not None and self._broken is None and not self._owner_ended():
                return self._session
            await self._stop_owner()
            try:
                await self._open(list_tools=False)
            except McpUnavailable as exc:
                self._lost(exc.reason)
                raise
            if self._down:
                self._down = False
                log.info("MCP server %s: reconnected", self.name)
            assert self._session is not None
            return self._session

    async def _stop_owner(self) -> None:
        owner, stop = self._owner, self._stop
        self._session = self._owner = self._stop = None
        if stop is not None:
            stop.set()
        if owner is not None:
            await asyncio.wait([owner], timeout=CLOSE_TIMEOUT)
            owner.cancel()

    async def _open(self, *, list_tools: bool) -> list[types.Tool]:
        """Start the owner task and wait until its session is ready. Raises :class:`McpUnavailable`."""
        if self._closed:
            raise McpUnavailable(self.name, "the bot is shutting down")
        ready: asyncio.Future[tuple[ClientSession, list[types.Tool]]] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        owner = asyncio.ensure_future(self._own(ready, stop, list_tools=list_tools))
        self._owners.add(owner)
        owner.add_done_callback(self._owners.discard)
        try:
            async with asyncio.timeout(self.connect_timeout):
                session, tools = await asyncio.shield(ready)
        except BaseException as exc:
            ready.cancel()
            stop.set()
            owner.cancel()
            if isinstance(exc, TimeoutError):
                raise McpUnavailable(self.name, f"no answer within {self.connect_timeout:g} s") from None
            raise
        self._session, self._owner, self._stop, self._broken = session, owner, stop, None
        return tools

    async def _own(
        self,
        ready: asyncio.Future[tuple[ClientSession, list[types.Tool]]],
        stop: asyncio.Event,
        *,
        list_tools: bool,
    ) -> None:
        """The session's task: opens the transport and the session, reports ready, holds them until ``stop``."""
        stderr = ServerStderr(self.name) if isinstance(self.config.transport, StdioServer) else None
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._transport(stack, stderr)
                client = Client(
                    contextlib.nullcontext((read, write)),
                    mode="legacy" if self.config.protocol == "legacy" else "auto",
                    client_info=CLIENT_INFO,
                    elicitation_callback=self._on_question,
                    cache=None,
                )
                session = (await stack.enter_async_context(client)).session
                tools = await _list_tools(session) if list_tools else []
                if not ready.done():
                    ready.set_result((session, tools))
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(McpUnavailable(self.name, "the bot is shutting down"))
            raise
        except Exception as exc:
            reason = self._describe(exc, stderr)
            if not ready.done():
                ready.set_exception(McpUnavailable(self.name, reason))
            elif not stop.is_set() and not self._closed and self._owner is asyncio.current_task():
                self._lost(reason)  # it died while idle
        finally:
            if stderr is not None:
                stderr.close()

    async def _transport(self, stack: contextlib.AsyncExitStack, stderr: ServerStderr | None) -> tuple[Any, Any]:
        transport = self.config.transport
        if isinstance(transport, StdioServer):
            assert stderr is not None
            params = StdioServerParameters(
                command=transport.command, args=list(transport.args), env=dict(transport.env), cwd=transport.cwd
            )
            streams = await stack.enter_async_context(stdio_client(params, errlog=stderr.writer))
            stderr.spawned()
            return streams
        assert isinstance(transport, HttpServer)
        http = await stack.enter_async_context(create_mcp_http_client(headers=dict(transport.headers)))
        return await stack.enter_async_context(streamable_http_client(transport.url, http_client=http))

    def _describe(self, exc: BaseException, stderr: ServerStderr | None) -> str:
        leaf = _leaf(exc)
        transport = self.config.transport
        if isinstance(leaf, MCPError) and leaf.error.code == types.CONNECTION_CLOSED:
            reason = "the server closed the connection"
        elif isinstance(leaf, FileNotFoundError | PermissionError) and isinstance(transport, StdioServer):
            reason = f"cannot run {transport.command!r}: {describe_os_error(leaf)}"
        elif isinstance(leaf, OSError):
            reason = describe_os_error(leaf)
        else:
            reason = describe_error(leaf)
        last = stderr.last_line() if stderr is not None else ""
        return f"{reason} (its last output: {last!r})" if last else reason


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups that is not a cancellation."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)] or list(exc.exceptions)
        exc = inner[0]
    return exc
