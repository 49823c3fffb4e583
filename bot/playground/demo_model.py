"""An offline, scripted stand-in for the chat model, so the playground works with no ``OPENAI_API_KEY``: the script
it follows is :mod:`bot.playground.demo_script`, what it says once its tool calls came back
:mod:`bot.playground.demo_replies`.

:class:`DemoModel` implements the model port (:class:`bot.agent.model.ChatModel`): ``stream_turn(messages,
*, tools)`` yields :class:`~bot.agent.model.TextDelta` pieces (a few words each) and ends with one
:class:`~bot.agent.model.TurnDone`. It never touches the network and is deterministic: the same messages
give the same turn, tool call ids included. Every reply starts with ``"(demo model) "``.

What it does is decided from the conversation (Chat Completions messages)::

    [{"role": "system", "content": "..."},
     {"role": "user", "content": "deploy please"},                       # the LAST user message decides
     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_demo_...", "type": "function",
         "function": {"name": "ask_user", "arguments": "{\\"question\\": ...}"}}]},
     {"role": "tool", "tool_call_id": "call_demo_...",
      "content": "{\\"answer\\": \\"production\\", \\"answer_type\\": \\"option\\", \\"answered_by\\": \\"U1\\"}"}]

- No assistant tool calls after the last user message: the last user message's text (lower-cased, Slack
  ``<...>`` mentions and links removed) picks a flow, first match wins:

  ============================================  ==========================================================
  keywords (a word starting with one of them)   turn
  ============================================  ==========================================================
  ``call TOOL {json}`` (the message starts      a call of any tool the turn offers, with that JSON object as
  with ``call``)                                its arguments (none: ``{}``); a tool it doesn't offer, or
                                                arguments that are not a JSON object, get a text reply
                                                that says why and lists the tools with their arguments
  ``restart`` (only when ``tools`` has          a ``restart_service`` call (it waits for a person's
  ``restart_service``)                          approval): ``{"name": "api"}``, or the service named after
                                                "restart" ("restart the web service" -> ``"web"``)
  ``refund`` (only when ``tools`` has           a ``refund`` call: ``{"amount": 25}``, or the number after
  ``refund``)                                   "refund" (``refund 250`` -> ``250``), with ``"order_id"`` when
                                                the text names an ``ORD-7``
  ``deploy`` and an environment (only when      a ``deploy`` call: ``{"environment": "prod"}`` (or
  ``tools`` has ``deploy``)                     ``"staging"``), with ``"version"`` when one is named
                                                (``deploy 1.5.0 to prod``); ``deploy`` alone is the question
  ``ticket`` (only when ``tools`` has           a ``lookup_ticket`` call: ``{"ticket_id": "SUP-1"}``, or the
  ``lookup_ticket``)                            id in the text (``SUP-123``; ``ticket 42`` -> ``SUP-42``)
  ``two questions``, ``both``                   two ``ask_user`` calls in one message: free-form "What's
                                                the project called?", then single_select "Which
                                                environment should I deploy to?" (staging / production /
                                                development, each with a description)
  ``many``                                      single_select with 30 options (Slack shows a select menu)
  ``lots``                                      multi_select with 12 options (a multi-select menu)
  ``deploy``, ``pick``, ``choose``, ``single``  single_select with 3 options with descriptions
  ``plan``, ``features``, ``several``,          multi_select with 5 options with descriptions
  ``multi``
  ``help``                                      the help text (no tool call)
  ``Summarize: TEXT`` (a message that starts    ``TEXT`` as the reply (no tool call): what an agent's own
  so; ``Summarise:`` too)                       model call asks of it (``examples/langgraph_agent.py``)
  ``name``, ``free``, ``text``, or a ``?``      a free-form question
  anything else                                 the help text (no tool call)
  ============================================  ==========================================================

  When ``tools`` has no ``ask_user`` the turn is text only (the help text, or a note that it would have
  asked a question). Without the demo tools (``bot.playground.demo_agent``) ``restart`` and ``ticket`` are not
  keywords: the flows above decide, and where they would give the help text the reply says the tool is missing.
- Otherwise (the latest assistant message after the last user message has tool calls, whose results the
  runtime has all added): a text reply that uses the answers, e.g. ``"(demo model) Deploying to
  *production*, as <@U1> chose."`` or ``"(demo model) Planned: Search, Dark mode."``; a ``{"error": ...}``
  result is explained instead. After the demo tools the reply uses their results: ``"(demo model) Done:
  restarted web (demo: nothing really restarted)."`` once a restart was approved and ran, ``"(demo model) OK,
  I won't restart it (<reason>)."`` when it was declined, ``"(demo model) `coffee_count` returned: {...}"`` after
  another tool (``call TOOL {json}``), a one-line summary of a looked-up ticket
  (``"(demo model) SUP-123 “Login page times out”: *open*, assigned to Bob."``). Only tool results after the
  last user message count, so a conversation can go on with a new user message after a finished exchange.

Tool result contents it reads (see :func:`bot.agent.ask_user.answer_result`): ``{"answer": str,
"answer_type": "option" | "typed_text" | "text", "answered_by"?: "U.."}``, ``{"answers": [str, ...],
"answer_type": "options", "answered_by"?}``, ``{"error": str}``, ``{"status": "no_answer" | "cancelled"}``; any
other content is taken as the answer
text. For the demo tools: a declined call's ``{"status": "declined", "reason": str | None, "declined_by"?}``
(:mod:`bot.agent.approvals`), ``{"error": str}``, a ticket ``{"id", "title", "status", "assignee"}``, and any
other content as the tool's text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from bot.agent.model import ModelEvent, TextDelta, TurnDone
from bot.agent.state import ToolCall
from bot.playground.demo_replies import reply
from bot.playground.demo_script import (
    DEMO_AGENT_SPEC,
    HELP_HINT,
    LABEL,
    SUMMARY,
    choose_flow,
    choose_tool_flow,
    help_text,
    parse_call,
)
from bot.slack.render.mrkdwn import escape


class DemoModel:
    """A scripted, offline :class:`bot.agent.model.ChatModel` for trying every flow without an API key.

    ``delay``: seconds to sleep before each streamed text piece (0 for tests; ~0.05 feels live).
    ``words_per_piece``: how many words each :class:`TextDelta` carries. ``tool_name``: the name of the
    ask-user tool to call (it must be among the ``tools`` of a turn, else the reply is text only).
    """

    def __init__(self, *, delay: float = 0.0, words_per_piece: int = 3, tool_name: str = "ask_user") -> None:
        if delay < 0:
            raise ValueError("delay must not be negative")
        if words_per_piece < 1:
            raise ValueError("words_per_piece must be at least 1")
        self.delay = delay
        self.words_per_piece = words_per_piece
        self.tool_name = tool_name
        # Set when the playground serves this model as a loopback Chat Completions endpoint, for agent frameworks'
        # own clients (bot.playground.demo_endpoint; an OpenAIEndpoint).
        self.openai_endpoint: Any = None

    async def stream_turn(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelEvent]:
        """One assistant turn: :class:`TextDelta` pieces of the reply text, then one :class:`TurnDone`.

        ``TurnDone.finish_reason`` is ``"tool_calls"`` when it asks (content ``""``) and ``"stop"`` otherwise.
        """
        done = self.turn(messages, tools=tools)
        for piece in split_pieces(done.content, words=self.words_per_piece):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(piece)
        yield done

    def turn(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]) -> TurnDone:
        """The whole turn at once (what :meth:`stream_turn` streams); pure and deterministic."""
        last_user = _last_index(messages, "user")
        since_user = messages[last_user + 1 :] if last_user >= 0 else list(messages)
        asked = next((m for m in reversed(since_user) if m.get("role") == "assistant" and m.get("tool_calls")), None)
        if asked is not None:
            return _text_turn(reply(asked, since_user, question_tool=self.tool_name))
        text = _text_of(messages[last_user]) if last_user >= 0 else ""
        wanted = parse_call(text)
        if wanted is not None:
            return _call_turn(messages, tools, *wanted)
        summary = SUMMARY.match(text)
        if summary is not None:  # an agent's own model call (a framework's graph): the text it gave, as it is
            return _text_turn(LABEL + escape(summary.group("text").strip()))
        tool_flow = choose_tool_flow(text)
        if tool_flow is not None and _has_tool(tools, tool_flow[0]):
            name, arguments = tool_flow
            (call_id,) = _call_ids(messages, 1)
            call = ToolCall(id=call_id, name=name, arguments=json.dumps(arguments, ensure_ascii=False))
            return TurnDone(content="", tool_calls=[call], finish_reason="tool_calls")
        flow, questions = choose_flow(text)
        if not questions:
            if tool_flow is not None:
                return _text_turn(
                    f"{LABEL}This is where I'd call the `{tool_flow[0]}` tool, but this run has no such tool. The "
                    f"playground's demo agent has it: start it with `AGENT={DEMO_AGENT_SPEC}`. {HELP_HINT}"
                )
            return _text_turn(help_text({str((t.get("function") or {}).get("name")) for t in tools}))
        if not _has_tool(tools, self.tool_name):
            return _text_turn(
                f"{LABEL}This is where I'd ask you a question (the {flow.replace('_', '-')} flow), but this run "
                f"has no `{self.tool_name}` tool, so I can only reply in text. {HELP_HINT}"
            )
        return TurnDone(
            content="",
            tool_calls=[
                ToolCall(id=call_id, name=self.tool_name, arguments=json.dumps(q.arguments(), ensure_ascii=False))
                for call_id, q in zip(_call_ids(messages, len(questions)), questions, strict=True)
            ],
            finish_reason="tool_calls",
        )


def _call_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]], name: str, args_text: str) -> TurnDone:
    """The turn for ``call NAME {json}``: the tool call, or a text reply saying what is wrong and what there is."""
    offered = {str((t.get("function") or {}).get("name")): t.get("function") or {} for t in tools}
    if not name:
        return _text_turn(
            f"{LABEL}Say which tool to call, and with what: `call TOOL {{json}}`. {_tool_listing(offered)}"
        )
    if name not in offered:
        return _text_turn(f"{LABEL}This agent has no `{name}` tool. {_tool_listing(offered)}")
    required = ((offered[name].get("parameters") or {}).get("required")) or []
    if not args_text and required:  # no arguments given for a tool that needs some: say what it takes
        return _text_turn(
            f"{LABEL}`{name}` needs arguments; write them as one JSON object: {_example(name, offered[name])}"
        )
    try:
        arguments = json.loads(args_text) if args_text else {}
    except json.JSONDecodeError as exc:
        return _text_turn(
            f"{LABEL}I couldn't read the arguments of `call {name}` as JSON ({exc.msg} at character {exc.pos + 1}). "
            f"Write them as one JSON object: {_example(name, offered[name])}"
        )
    if not isinstance(arguments, dict):
        return _text_turn(
            f"{LABEL}The arguments of `call {name}` must be a JSON object, not {type(arguments).__name__}: "
            f"{_example(name, offered[name])}"
        )
    (call_id,) = _call_ids(messages, 1)
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(arguments, ensure_ascii=False))
    return TurnDone(content="", tool_calls=[call], finish_reason="tool_calls")


def _tool_listing(offered: dict[str, dict[str, Any]]) -> str:
    """``"Its tools: `call ask_user {"question": …}`, `call lookup_ticket {"ticket_id": …}`."`` (sorted)."""
    if not offered:
        return "It has no tools at all."
    return "Its tools: " + ", ".join(_example(name, fn) for name, fn in sorted(offered.items())) + "."


def _example(name: str, function: dict[str, Any]) -> str:
    """``"`call coffee_count {"team": …}`"``: the tool's required arguments (all of them when none is required)."""
    schema = function.get("parameters") or {}
    properties = list((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else []
    required = [p for p in (schema.get("required") or []) if p in properties] if isinstance(schema, dict) else []
    shown = required or properties
    args = ", ".join(f'"{p}": …' for p in shown)
    return f"`call {name} {{{args}}}`"


def split_pieces(text: str, *, words: int = 3) -> list[str]:
    """Split ``text`` into pieces of ``words`` words each (whitespace kept), so ``"".join(pieces) == text``."""
    tokens = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


# --- reading the conversation ------------------------------------------------------------------------


def _last_index(messages: list[dict[str, Any]], role: str) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == role:
            return i
    return -1


def _text_of(message: dict[str, Any]) -> str:
    """A message's text: ``content`` as a string, or the ``text`` parts of a content list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _has_tool(tools: list[dict[str, Any]], name: str) -> bool:
    return any((t.get("function") or {}).get("name") == name for t in tools)


def _call_ids(messages: list[dict[str, Any]], count: int) -> list[str]:
    """``call_demo_<12 hex of the conversation's SHA-256>_<n>``: deterministic, and unique within a run
    because the conversation grows and ``n`` counts every tool call made so far."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:12]
    made = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    return [f"call_demo_{digest}_{made + i + 1}" for i in range(count)]


def _text_turn(text: str) -> TurnDone:
    return TurnDone(content=text, tool_calls=[], finish_reason="stop")
