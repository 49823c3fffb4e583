"""One MCP server's session for the bot (:class:`McpConnection`), and the tools it offers (:class:`McpTool`): the
session lives in one task of its own, opens lazily again after the server died, and turns every failure into a
tool error for the model. :mod:`bot.agent.mcp_tools` starts and closes them all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import mcp_types as types
from jsonschema import SchemaError  # type: ignore[import-untyped,unused-ignore]
from jsonschema.validators import validator_for  # type: ignore[import-untyped,unused-ignore]
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, RootModel

from bot.agent.mcp_config import HttpServer, McpServerConfig, StdioServer
from bot.agent.tools import Tool, ToolContext, ToolInputError
from bot.errors import describe_error, describe_os_error

log = logging.getLogger("bot.agent.mcp_tools")  # one logger for everything MCP

CONNECT_TIMEOUT = 30.0  # seconds to start a server, initialize the session and list its tools
CALL_TIMEOUT = 300.0  # seconds one tool call may take
CLOSE_TIMEOUT = 10.0  # seconds to close a session (a stdio server gets the SDK's grace period, then is killed)
MAX_LIST_PAGES = 100
CLIENT_INFO = types.Implementation(name="slack-ask-user", version="0.1.0")


class McpToolError(ToolInputError):
    """An MCP tool call that went wrong (an ``isError`` result, a protocol error, a timeout, the server unavailable);
    its message goes back to the model as the tool's error."""


class McpUnavailable(McpToolError):
    """The server can't be reached: it failed to start, died, or is being closed."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server} is unavailable: {reason}")
        self.server, self.reason = server, reason


class McpArguments(RootModel[dict[str, Any]]):
    """A call's arguments, validated against the MCP tool's own JSON schema."""


@dataclass(frozen=True, kw_only=True)
class McpTool(Tool):
    """A tool of an MCP server: ``id`` is the name the model sees, ``server`` / ``mcp_name`` where it comes from,
    ``json_schema`` the tool's input schema as the server gave it."""

    server: str
    mcp_name: str
    json_schema: dict[str, Any] = field(hash=False)
    validator: Any = field(default=None, repr=False, compare=False)  # jsonschema validator of json_schema

    def spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools[]`` entry, with the MCP tool's schema as its parameters."""
        return {
            "type": "function",
            "function": {"name": self.id, "description": self.description, "parameters": self.json_schema},
        }

    def parse_args(self, args: dict[str, Any]) -> BaseModel:
        """Validate ``args`` against the MCP tool's schema. Raises :class:`ToolInputError` naming each problem."""
        if self.validator is not None:
            try:
                errors = sorted(self.validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path])
            except Exception:  # e.g. a $ref it can't resolve: the server validates its arguments anyway
                errors = []
            if errors:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}" for e in errors[:5]
                )
                raise ToolInputError(f"invalid arguments for {self.id}: {problems}")
        return McpArguments(args)


class McpConnection:
    """One server's client session, held open by a task of its own; reconnects on a call after the server died."""

    def __init__(self, config: McpServerConfig, *, connect_timeout: float, call_timeout: float) -> None:
        self.config = config
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
            return await self.call(remote, arguments)

        return McpTool(
            id=name,
            description=mcp_tool.description or mcp_tool.title or mcp_tool.name,
            input_schema=McpArguments,
            execute_fn=execute,
            require_approval=self.config.needs_approval(remote),
            server=self.name,
            mcp_name=remote,
            json_schema=schema,
            validator=validator,
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call ``tool``; returns its result (structured content, else text). Raises :class:`McpToolError`."""
        session = await self._live_session()
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=self.call_timeout)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED or self._owner_ended():
                raise self._lost("the connection closed") from None
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise McpToolError(
                    f"{tool} on MCP server {self.name} took longer than {self.call_timeout:g} s"
                ) from None
            raise McpToolError(f"MCP server {self.name} refused {tool}: {exc.error.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise self._lost(describe_error(exc)) from None
        except Exception as exc:
            if self._owner_ended():
                raise self._lost(describe_error(exc)) from None
            raise McpToolError(f"{tool} on MCP server {self.name} failed: {describe_error(exc)}") from None
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
        stderr = _ServerStderr(self.name) if isinstance(self.config.transport, StdioServer) else None
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._transport(stack, stderr)
                session = await stack.enter_async_context(ClientSession(read, write, client_info=CLIENT_INFO))
                await session.initialize()
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

    async def _transport(self, stack: contextlib.AsyncExitStack, stderr: _ServerStderr | None) -> tuple[Any, Any]:
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

    def _describe(self, exc: BaseException, stderr: _ServerStderr | None) -> str:
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


def content_text(blocks: Sequence[types.ContentBlock]) -> str:
    """Text blocks as they are, other content described in brackets, one block per line."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri} ({resource.mime_type or 'binary'})]")
    return "\n".join(parts)


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


class _ServerStderr:
    """A stdio server's stderr: logged at DEBUG, line by line, and its last lines kept to explain a failure."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._lines: deque[str] = deque(maxlen=5)
        self._partial = b""
        self._loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._read_fd: int | None = read_fd
        os.set_blocking(read_fd, False)
        try:
            self._loop.add_reader(read_fd, self._readable)
        except NotImplementedError:  # an event loop without add_reader: the server writes to our stderr
            self.writer.close()
            os.close(read_fd)
            self._read_fd, self.writer = None, sys.stderr

    def spawned(self) -> None:
        """The server has its copy of the pipe: close ours, so the pipe ends when the server does."""
        if self.writer is not sys.stderr:
            self.writer.close()

    def last_line(self) -> str:
        """The last non-blank line the server wrote (at most 200 characters), or ``""``."""
        self._readable()
        pending = [self._partial.decode("utf-8", "replace")] if self._partial.strip() else []
        line = next((line for line in reversed([*self._lines, *pending]) if line.strip()), "")
        return line.strip()[:200]

    def close(self) -> None:
        self.spawned()
        if self._read_fd is not None:
            self._readable()
            self._loop.remove_reader(self._read_fd)
            os.close(self._read_fd)
            self._read_fd = None

    def _readable(self) -> None:
        while self._read_fd is not None:
            try:
                data = os.read(self._read_fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:  # the server (and everything it started) closed its stderr
                self._loop.remove_reader(self._read_fd)
                return
            *lines, self._partial = (self._partial + data).split(b"\n")
            if len(self._partial) > 65536:  # no newline for that long: take it as a line
                lines.append(self._partial)
                self._partial = b""
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip()
                self._lines.append(line)
                log.debug("MCP server %s: %s", self.server, line)
