"""Running one tool call inside a run (:class:`ToolRunner`): its result becomes the call's ``tool`` message; a
suspension becomes the run's pending call (with its deadline) and stops the batch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from bot.agent._loop.live_questions import LiveQuestions
from bot.agent.ask_user import too_many_options
from bot.agent.hooks import RunHooks
from bot.agent.state import Answer, PendingCall, RunState, ToolCall, utcnow
from bot.agent.stream import AgentStream, ToolResultChunk, ToolResultPayload
from bot.agent.tools import Tool, ToolContext, ToolInputError, ToolSuspended, bounded_result, tool_result_content
from bot.errors import RunConflict, StoreUnavailable

log = logging.getLogger(__name__)


class Suspended(Exception):
    """A tool suspended the run: ``state`` was updated in place (``pending``, ``status``)."""


@dataclass(frozen=True, kw_only=True)
class ToolRunner:
    """How a run's tool calls are run, what travels with every call: ``tools`` by name (what the model may call),
    ``ask_ttl`` (seconds, None: none) the deadline of a question a call suspends on, ``max_result_chars`` the bound
    of a result's text (:func:`add_result`; None: unbounded), ``max_options`` the most options a question a call
    suspends on may offer (more: an error result, :func:`~bot.agent.ask_user.too_many_options`; None: any),
    ``hooks`` told of each call (:mod:`bot.agent.hooks`), ``live`` lets a tool ask while it runs
    (:mod:`bot.agent._loop.live_questions`; None: it can't)."""

    tools: dict[str, Tool]
    ask_ttl: float | None
    max_result_chars: int | None
    hooks: RunHooks
    live: LiveQuestions | None = None
    max_options: int | None = None

    async def run(
        self,
        state: RunState,
        call: ToolCall,
        args: dict[str, Any],
        out: AgentStream,
        *,
        resume: Answer | None = None,
        suspended: dict[str, Any] | None = None,
    ) -> None:
        """Run ``call`` of ``state`` with ``args`` (``resume``: the answer it was suspended for, ``suspended``: the
        payload it suspended with), its outcome emitted to ``out``. Unknown tools, invalid arguments and tools that
        raise become error results for the model; never raises except :class:`Suspended`, after setting the run's
        pending call (its deadline ``ask_ttl`` seconds from now, when given), and a live question's
        ``RunConflict`` / ``StoreUnavailable``."""
        tools, ask_ttl, live = self.tools, self.ask_ttl, self.live
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            unknown = {"error": f"unknown tool {call.name!r}; tools: {known}"}
            self.add_result(state, call, unknown, out, is_error=True)
            return
        ctx = ToolContext(
            run_id=state.run_id,
            tool_call_id=call.id,
            resume_data=resume.resume_data if resume else None,
            answered_by=resume.answered_by if resume else None,
            metadata=state.metadata,
            suspend_payload=suspended,
            ask_live=live.asker(state, call, args, out, ttl=ask_ttl, max_options=self.max_options)
            if live is not None
            else None,
        )
        try:
            with self.hooks.tool_call(state.run_id, tool=call.name, tool_call_id=call.id):
                result = await tool.execute(args, ctx)
        except ToolSuspended as signal:
            too_many = too_many_options(signal.payload, self.max_options)
            if too_many is not None:  # the frontend could not show it: the model asks again, differently
                self.add_result(state, call, {"error": too_many}, out, is_error=True)
                return
            now = utcnow()
            state.pending = PendingCall(
                tool_call_id=call.id,
                tool_name=call.name,
                args=args,
                suspend_payload=signal.payload,
                suspended_at=now,
                expires_at=now + timedelta(seconds=ask_ttl) if ask_ttl is not None else None,
            )
            state.status = "suspended"
            raise Suspended() from None
        except (RunConflict, StoreUnavailable):  # a live question could not be recorded or read: the segment ends
            raise
        except ToolInputError as exc:
            self.add_result(state, call, {"error": str(exc)}, out, is_error=True)
            return
        except Exception as exc:
            log.warning("run %s: tool %s raised %s", state.run_id, call.name, type(exc).__name__)
            error = f"tool {call.name} failed: {type(exc).__name__}: {exc}"
            self.add_result(state, call, {"error": error}, out, is_error=True)
            return
        self.add_result(state, call, result, out)

    def add_result(
        self, state: RunState, call: ToolCall, result: Any, out: AgentStream, *, is_error: bool = False
    ) -> None:
        """:func:`add_result` with this runner's bound and hooks."""
        add_result(state, call, result, out, max_chars=self.max_result_chars, hooks=self.hooks, is_error=is_error)


def add_result(
    state: RunState,
    call: ToolCall,
    result: Any,
    out: AgentStream,
    *,
    max_chars: int | None,
    hooks: RunHooks,
    is_error: bool = False,
    stopped: bool = False,
) -> None:
    """Append ``result`` as ``call``'s ``tool`` message and emit a ``tool-result`` chunk. The one way a tool call's
    outcome reaches the model (a tool's return, an MCP server's content, an answer to a question, an error's text):
    its text is bounded to ``max_chars`` characters here (:func:`bot.agent.tools.bounded_result`; None: unbounded),
    before it is stored or sent (``hooks`` told when it is cut). The chunk carries the tool's own ``result``;
    ``stopped``: the call never ran (or may not have finished), the run was stopped first."""
    content, cut = bounded_result(tool_result_content(result), max_chars)
    if cut:
        hooks.on_tool_result_cut()
        log.warning("run %s: %d characters of %s's result cut (at most %s)", state.run_id, cut, call.name, max_chars)
    state.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    out.emit(ToolResultChunk(state.run_id, ToolResultPayload(call.id, call.name, result, is_error, stopped=stopped)))
