"""Pydantic AI agents in Slack: :class:`PydanticAIAgent` runs a ``pydantic_ai.Agent`` as the bot's agent
(``pip install -e '.[pydantic-ai]'``; docs/frameworks/pydantic-ai.md).

Pydantic AI's human-in-the-loop primitive is the deferred tool: a run whose output types include
``DeferredToolRequests`` ends with one when the model called

- a tool declared with ``requires_approval=True`` (or one that raised ``ApprovalRequired``): asked in Slack as an
  approval; approved: ``ToolApproved()`` (with ``override_args`` when a person edited the arguments in Slack: the
  request keeps the tool's ``parameters_json_schema`` for the Edit form, and the model is told of the edit after
  the call's result, as the resumed run's user prompt),
  declined: ``ToolDenied(message)``, the message saying who declined and why (:func:`~bot.frameworks.base.denial_text`);
- a tool that raised ``CallDeferred``: asked in Slack as a question whose answer is the tool's result. With the
  ``ask_user`` shape in its arguments (``question``, ``options``, ``selection_mode``; :func:`ask_user` is such a
  tool, ready to register) it is shown with buttons / checkboxes / a modal; any other call is shown as its name and
  arguments (JSON) with a free-text answer (``CallDeferred(metadata={"question": "..."})`` gives the text to show).

The run is stored as its message history (``ModelMessagesTypeAdapter`` JSON) in the run's framework record; once
every request has its decision the agent runs again with ``message_history`` and ``DeferredToolResults`` keyed by
``tool_call_id``.

A tool that raises is a failed tool result the model reads (:class:`ToolFailures`: ``tool NAME failed: Error:
message``, Pydantic AI's ``ToolFailed``), as with the bot's own agent, rather than the end of the run: an approved
call that failed would otherwise fail the run, and each Retry would run it again.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import CallDeferred, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.run import AgentRunResultEvent

from bot.agent.ask_user import AskUserOption
from bot.frameworks.base import (
    Finished,
    FrameworkAgent,
    Outcome,
    Turn,
    Waiting,
    answer_value,
    denial_text,
    output_text,
)
from bot.frameworks.record import FrameworkRecord, Request


async def ask_user(
    question: str,
    options: list[AskUserOption] | None = None,
    selection_mode: Literal["single_select", "multi_select"] | None = None,
) -> str | list[str]:
    """Ask the human user a question and wait for the answer. Give ``options`` for a choice (selection_mode
    single_select for one, multi_select for several); omit them for a free-form answer.

    A Pydantic AI tool (``agent.tool_plain(ask_user)``) that never answers itself: it defers the call
    (``CallDeferred(kind="question")``), and the person's answer in Slack is its result (several options: the
    list of their labels)."""
    raise CallDeferred(kind="question")


class ToolFailures(AbstractCapability[Any]):
    """A Pydantic AI capability, given to each run: a tool's exception (other than Pydantic AI's own control flow:
    ``ModelRetry``, ``CallDeferred``, ``ApprovalRequired``...) becomes a failed tool result the model reads,
    ``tool NAME failed: Error: message``, the bot's own agent's words (:mod:`bot.agent._loop.tool_calls`)."""

    async def on_tool_execute_error(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, error: Exception) -> Any:
        raise ToolFailed(f"tool {call.tool_name} failed: {type(error).__name__}: {error}") from error


class PydanticAIAgent(FrameworkAgent):
    """A ``pydantic_ai.Agent`` as the bot's agent. ``agent``: the Pydantic AI agent (its model, tools and
    instructions are its own; the run's output type is ``[its output type, DeferredToolRequests]``); the rest as
    :class:`~bot.frameworks.base.FrameworkAgent`. A structured (non-text) output is replied as its JSON. ``deps``:
    the agent's dependencies (its ``deps_type``), given to every run, the first and each resumed one, in whichever
    process."""

    framework = "pydantic-ai"

    def __init__(self, agent: PydanticAgent[Any, Any], *, deps: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("id", agent.name or "pydantic-ai")
        kwargs.setdefault("name", agent.name or "Pydantic AI agent")
        super().__init__(**kwargs)
        self.agent = agent
        self.deps = deps

    async def run_framework(self, turn: Turn) -> Outcome:
        record = turn.record
        if record is None:
            history: list[ModelMessage] = [_message(m) for m in turn.history]
            prompt: str | None = turn.prompt
            results = None
        else:
            history = list(ModelMessagesTypeAdapter.validate_python(record.state or []))
            notes = [d.note for d in record.decisions if d.note]  # edits: the model is told after the results
            prompt = "\n".join(notes) or None
            results = deferred_results(record)
        output_type = [self.agent.output_type, DeferredToolRequests]
        final: Any = None
        running: Any = self.agent.run_stream_events(  # typed per output type: ours is a union with deferred requests
            prompt,
            message_history=history,
            deferred_tool_results=results,
            output_type=output_type,
            deps=self.deps,
            capabilities=[ToolFailures()],
        )
        async with running as events:
            async for event in events:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    turn.text(event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    turn.text(event.delta.content_delta)
                elif isinstance(event, FunctionToolCallEvent) and event.args_valid is True:
                    turn.tool_call(event.part.tool_call_id, event.part.tool_name, event.part.args_as_dict())
                elif isinstance(event, FunctionToolResultEvent):
                    part = event.part
                    failed = getattr(part, "outcome", "success") == "failed"
                    turn.tool_result(part.tool_call_id, part.tool_name, part.content, is_error=failed)
                elif isinstance(event, AgentRunResultEvent):
                    final = event.result
        if final is None:
            raise RuntimeError("the Pydantic AI run ended without a result")
        kept = ModelMessagesTypeAdapter.dump_python(final.all_messages(), mode="json")
        output = final.output
        if isinstance(output, DeferredToolRequests):
            described = descriptions(self.agent)
            schemas = parameters(self.agent)
            requests = [
                r.model_copy(
                    update={
                        "description": described.get(r.tool_name, ""),
                        "parameters": schemas.get(r.tool_name) if r.kind == "approval" else None,
                    }
                )
                for r in requests_of(output)
            ]
            made = {p.tool_call_id: i for i, p in enumerate(_tool_calls(final.all_messages()))}
            requests.sort(key=lambda r: made.get(r.tool_call_id, len(made)))  # asked in the order the model made them
            return Waiting(requests=requests, state=kept)
        return Finished(text=output_text(output), state=kept)


def descriptions(agent: PydanticAgent[Any, Any]) -> dict[str, str]:
    """``{tool name: description}`` of the function tools of ``agent``'s toolsets (what an approval request shows)."""
    found: dict[str, str] = {}
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)  # a FunctionToolset's tools by name
        if isinstance(tools, dict):
            for name, tool in tools.items():
                found[str(name)] = str(getattr(tool, "description", "") or "")
    return found


def parameters(agent: PydanticAgent[Any, Any]) -> dict[str, dict[str, Any]]:
    """``{tool name: the JSON schema of its arguments}`` of the function tools of ``agent``'s toolsets (Pydantic AI's
    ``tool_def.parameters_json_schema``, what the model sees): an approval request's Edit form is built from it, and
    an edit is validated against it before ``ToolApproved(override_args=...)`` runs the call with it."""
    found: dict[str, dict[str, Any]] = {}
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if isinstance(tools, dict):
            for name, tool in tools.items():
                schema = getattr(getattr(tool, "tool_def", None), "parameters_json_schema", None)
                if isinstance(schema, dict):
                    found[str(name)] = dict(schema)
    return found


def requests_of(deferred: DeferredToolRequests) -> list[Request]:
    """The requests a run's ``DeferredToolRequests`` make: its approvals, then its calls (questions)."""
    requests = [
        Request(tool_call_id=part.tool_call_id, kind="approval", tool_name=part.tool_name, args=part.args_as_dict())
        for part in deferred.approvals
    ]
    for part in deferred.calls:
        meta = deferred.metadata.get(part.tool_call_id) or {}
        args = part.args_as_dict()
        shown = meta.get("question")
        question = {"question": shown} if isinstance(shown, str) and shown.strip() else args
        requests.append(
            Request(
                tool_call_id=part.tool_call_id, kind="question", tool_name=part.tool_name, args=args, question=question
            )
        )
    return requests


def deferred_results(record: FrameworkRecord) -> DeferredToolResults:
    """The ``DeferredToolResults`` of ``record``'s decisions, keyed by ``tool_call_id``: approvals as
    ``ToolApproved`` (``override_args``: edited arguments) or ``ToolDenied`` (:func:`denial_text`), questions as the
    answer (:func:`answer_value`: its text, or the labels of several options as a list)."""
    results = DeferredToolResults()
    for decision in record.decisions:
        if decision.kind == "approval":
            results.approvals[decision.tool_call_id] = (
                ToolApproved(override_args=decision.args) if decision.approved else ToolDenied(denial_text(decision))
            )
        else:
            results.calls[decision.tool_call_id] = answer_value(decision)
        if decision.answered_by:
            results.answered_by[decision.tool_call_id] = decision.answered_by
    return results


def _tool_calls(messages: list[ModelMessage]) -> list[ToolCallPart]:
    """Every tool call of ``messages``' model responses, in the order the model made them."""
    return [p for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]


def _message(message: dict[str, str]) -> ModelMessage:
    if message["role"] == "user":
        return ModelRequest(parts=[UserPromptPart(content=message["content"])])
    return ModelResponse(parts=[TextPart(content=message["content"])])


__all__ = [
    "PydanticAIAgent",
    "ToolFailures",
    "ask_user",
    "deferred_results",
    "descriptions",
    "parameters",
    "requests_of",
]
