"""OpenAI Agents SDK agents in Slack: :class:`OpenAIAgentsAgent` runs an ``agents.Agent`` as the bot's agent
(``pip install -e '.[openai-agents]'``; docs/frameworks/openai-agents.md).

The SDK's human-in-the-loop primitive: a tool declared with ``needs_approval`` (``@function_tool(needs_approval=
True)``, or a callable deciding per call) stops the run; ``result.interruptions`` lists the ``ToolApprovalItem`` s.
Each is asked in Slack as an approval; the run is stored as the SDK's ``RunState`` JSON (``result.to_state()
.to_json()``) in the run's framework record; once each has its decision the state is loaded again
(``RunState.from_json``), ``state.approve(item)`` or ``state.reject(item, rejection_message=...)`` (who declined and
why: :func:`~bot.frameworks.base.denial_text`) is called for each, and the run goes on (``Runner.run_streamed(agent,
state)``). The SDK takes no edited arguments, so an approval here is of the call as the model made it.

The SDK's tracing is off for these runs unless ``run_config`` says otherwise (it would send traces to OpenAI).
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent as SdkAgent
from agents import RunConfig, RunContextWrapper, Runner, RunState
from agents.items import ToolApprovalItem, ToolCallItem, ToolCallOutputItem
from agents.stream_events import RawResponsesStreamEvent, RunItemStreamEvent
from agents.tool import default_tool_error_function
from openai.types.responses import ResponseTextDeltaEvent

from bot.frameworks.base import Finished, FrameworkAgent, Outcome, Turn, Waiting, denial_text, output_text
from bot.frameworks.record import FrameworkRecord, Request

SDK_TOOL_FAILURE = default_tool_error_function(RunContextWrapper(context=None), RuntimeError())
"""What the SDK gives the model for a function tool that raised (its default ``failure_error_function``: a fixed
text): such a result is reported as a failed tool call (an approved call's request then says it failed)."""


class OpenAIAgentsAgent(FrameworkAgent):
    """An ``agents.Agent`` as the bot's agent. ``agent``: the SDK agent (model, tools, instructions, handoffs are
    its own); ``run_config``: the SDK's :class:`agents.RunConfig` for every run (default: tracing off);
    ``max_turns``: the SDK's turn limit per run; ``context``: the SDK's run context every run gets (what its tools
    read as ``ctx.context``; given again on each resume, in whichever process, rather than read back from the stored
    state). The rest as :class:`~bot.frameworks.base.FrameworkAgent`."""

    framework = "openai-agents"

    def __init__(
        self,
        agent: SdkAgent[Any],
        *,
        run_config: RunConfig | None = None,
        sdk_max_turns: int = 10,
        context: Any = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("id", agent.name or "openai-agents")
        kwargs.setdefault("name", agent.name or "OpenAI Agents SDK agent")
        super().__init__(**kwargs)
        self.agent = agent
        self.run_config = run_config or RunConfig(tracing_disabled=True)
        self.sdk_max_turns = sdk_max_turns
        self.context = context

    async def run_framework(self, turn: Turn) -> Outcome:
        record = turn.record
        start: str | list[Any] | RunState[Any, Any]
        if record is None:
            start = [*turn.history, {"role": "user", "content": turn.prompt}]
        else:
            start = await self._decided_state(record)
        result = Runner.run_streamed(
            self.agent, start, context=self.context, run_config=self.run_config, max_turns=self.sdk_max_turns
        )
        async for event in result.stream_events():
            if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
                turn.text(event.data.delta)
            elif isinstance(event, RunItemStreamEvent) and isinstance(event.item, ToolCallItem):
                raw = event.item.raw_item
                call_id, name = str(getattr(raw, "call_id", "") or ""), str(getattr(raw, "name", "") or "")
                turn.tool_call(call_id, name, _args(getattr(raw, "arguments", None)))
            elif isinstance(event, RunItemStreamEvent) and isinstance(event.item, ToolCallOutputItem):
                raw_output = event.item.raw_item
                call_id = str(raw_output.get("call_id", "") if isinstance(raw_output, dict) else "")
                output = event.item.output
                turn.tool_result(call_id, "", output, is_error=isinstance(output, str) and output == SDK_TOOL_FAILURE)
        if result.interruptions:
            state = result.to_state().to_json()
            described = descriptions(self.agent)
            requests = [
                request_of(item, description=described.get(str(item.tool_name or item.name or ""), ""))
                for item in result.interruptions
            ]
            return Waiting(requests=requests, state=state)
        output = result.final_output
        text = output_text(output)
        return Finished(text=text)

    async def _decided_state(self, record: FrameworkRecord) -> RunState[Any, Any]:
        """The stored ``RunState`` with every decision of ``record`` applied (approve / reject with the reason)."""
        given = RunContextWrapper(context=self.context) if self.context is not None else None
        state: RunState[Any, Any] = await RunState.from_json(self.agent, record.state, context_override=given)
        for item in state.get_interruptions():
            decision = record.decision(_call_id(item))
            if decision is None:
                continue
            if decision.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=denial_text(decision))
        return state


def descriptions(agent: SdkAgent[Any]) -> dict[str, str]:
    """``{tool name: description}`` of the tools of ``agent`` and of every agent its handoffs reach (a handed-off
    agent's tool asks for approval too), the first agent's first where names repeat."""
    found: dict[str, str] = {}
    seen: set[int] = set()
    queue: list[Any] = [agent]
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        for tool in getattr(current, "tools", None) or []:
            found.setdefault(str(getattr(tool, "name", "")), str(getattr(tool, "description", "") or ""))
        for handoff in getattr(current, "handoffs", None) or []:
            if isinstance(handoff, SdkAgent):
                queue.append(handoff)
            elif callable(ref := getattr(handoff, "_agent_ref", None)) and (target := ref()) is not None:
                queue.append(target)  # a Handoff made by handoff(agent): the SDK keeps a weak reference to it
    return found


BROKEN_ARGUMENTS = (
    ":warning: The model's arguments are not valid JSON: approving runs nothing (the SDK refuses them and tells the"
    " model so)."
)
"""Put before the description of a request whose arguments the SDK can't parse (shown as they came)."""


def request_of(item: ToolApprovalItem, *, description: str = "") -> Request:
    """The approval request of one ``ToolApprovalItem`` (its ``call_id``, tool name and arguments; ``description``:
    its tool's, after :data:`BROKEN_ARGUMENTS` when the arguments are not valid JSON)."""
    args = _args(item.arguments)
    if isinstance(item.arguments, str) and not _is_json(item.arguments):
        description = f"{BROKEN_ARGUMENTS} {description}".strip()
    return Request(
        tool_call_id=_call_id(item),
        kind="approval",
        tool_name=str(item.tool_name or item.name or ""),
        args=args,
        description=description,
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text or "{}")
    except ValueError:
        return False
    return True


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(value or getattr(raw, "id", "") or "")


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
