"""An offline, scripted stand-in for the chat model, so the playground works with no ``OPENAI_API_KEY``.

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
from dataclasses import dataclass
from typing import Any

from bot.agent.model import ModelEvent, TextDelta, TurnDone
from bot.agent.state import ToolCall

LABEL = "(demo model) "
"""Every reply of the demo model starts with this."""

HELP_HINT = "Say `help` to try another flow."

RESTART_TOOL = "restart_service"
"""The demo agent's tool that restarts a service (it needs a person's approval)."""
TICKET_TOOL = "lookup_ticket"
"""The demo agent's tool that looks up a support ticket."""
REFUND_TOOL = "refund"
"""The demo agent's tool that refunds an order (the demo policy: finance approves one over 100)."""
DEPLOY_TOOL = "deploy"
"""The demo agent's tool that deploys (the demo policy: a prod deploy's arguments show only in Details)."""
DEFAULT_REFUND = 25.0
DEFAULT_SERVICE = "api"
DEFAULT_TICKET = "SUP-1"
DEMO_AGENT_SPEC = "bot.playground.demo_agent:build"


@dataclass(frozen=True)
class _Question:
    """One scripted ``ask_user`` call: its arguments and how to phrase its answer in the reply."""

    key: str
    question: str
    options: tuple[tuple[str, str | None], ...] = ()
    selection_mode: str | None = None

    def arguments(self) -> dict[str, Any]:
        """The ``ask_user`` arguments: ``{"question", "options"?: [{"label", "description"?}], "selection_mode"?}``."""
        args: dict[str, Any] = {"question": self.question}
        if self.options:
            args["options"] = [
                {"label": label, **({"description": desc} if desc else {})} for label, desc in self.options
            ]
            args["selection_mode"] = self.selection_mode or "single_select"
        return args


_PROJECT_NAME = _Question(key="project_name", question="What's the project called?")
_ENVIRONMENT = _Question(
    key="environment",
    question="Which environment should I deploy to?",
    options=(
        ("staging", "A copy of production for testing; safe to break."),
        ("production", "What real users see. Deploys here are announced."),
        ("development", "The shared dev box; rebuilt every night."),
    ),
    selection_mode="single_select",
)
_FEATURES = _Question(
    key="features",
    question="Which features should go into the next release?",
    options=(
        ("Dark mode", "A dark theme that follows the system setting."),
        ("Search", "Full-text search across all projects."),
        ("Export to CSV", "Download any table as a CSV file."),
        ("Notifications", "Email and Slack alerts on changes."),
        ("Single sign-on", "Log in with the company's identity provider."),
    ),
    selection_mode="multi_select",
)
_CITIES = (
    "Amsterdam", "Athens", "Bangkok", "Barcelona", "Berlin", "Bogotá", "Buenos Aires", "Cairo", "Cape Town",
    "Chicago", "Copenhagen", "Dublin", "Helsinki", "Istanbul", "Lagos", "Lisbon", "London", "Madrid",
    "Melbourne", "Mexico City", "Montreal", "Mumbai", "Nairobi", "Oslo", "Paris", "Prague", "Seoul",
    "Singapore", "Tokyo", "Vienna",
)  # fmt: skip
_CITY = _Question(
    key="city",
    question="Which city should host the next meetup?",
    options=tuple((city, None) for city in _CITIES),
    selection_mode="single_select",
)
_TOPPINGS = (
    "Mozzarella", "Tomato", "Basil", "Mushrooms", "Olives", "Onions", "Peppers", "Pineapple", "Ham",
    "Salami", "Anchovies", "Artichokes",
)  # fmt: skip
_TOPPING = _Question(
    key="toppings",
    question="Which toppings go on the team pizza?",
    options=tuple((topping, None) for topping in _TOPPINGS),
    selection_mode="multi_select",
)
_QUESTIONS = {q.question: q for q in (_PROJECT_NAME, _ENVIRONMENT, _FEATURES, _CITY, _TOPPING)}

# Flows in the order they are tried; each keyword matches at the start of a word ("deployment", "multi-select").
FLOWS: tuple[tuple[str, tuple[str, ...], tuple[_Question, ...]], ...] = (
    ("two_questions", ("two questions", "both"), (_PROJECT_NAME, _ENVIRONMENT)),
    ("many", ("many",), (_CITY,)),
    ("lots", ("lots",), (_TOPPING,)),
    ("single_select", ("deploy", "pick", "choose", "single"), (_ENVIRONMENT,)),
    ("multi_select", ("plan", "features", "several", "multi"), (_FEATURES,)),
    ("help", ("help",), ()),
    ("free_form", ("name", "free", "text", "?"), (_PROJECT_NAME,)),
)
"""``(flow, keywords, questions)``; a flow without questions is the help text."""

WITH_DEMO_TOOLS_HELP = (
    LABEL + "I'm the offline demo model (no OPENAI_API_KEY is set), so I follow a script. "
    "Mention me (or DM me) with one of these words to try a flow:\n"
    "• `deploy` (or `pick`, `choose`, `single`): a single-select question with three buttons\n"
    "• `plan` (or `features`, `several`, `multi`): a multi-select question with checkboxes\n"
    "• `many`: a single-select question with 30 options (a select menu)\n"
    "• `lots`: a multi-select question with 12 options (a multi-select menu)\n"
    "• `name` (or `free`, `text`, or anything with a `?`): a free-form question; answer in the modal or reply "
    "in the thread\n"
    "• `two questions` (or `both`): two questions in one turn, asked one after the other\n"
    "• `restart` (e.g. `restart web`): a tool call that waits for two people (Bob and Carol) to approve it; "
    "either may Edit the service's name first\n"
    "• `refund` (e.g. `refund 250`): over 100 it waits for someone in @finance (Carol, asked by DM); up to 100 "
    "it runs at once\n"
    "• `deploy prod` (or `deploy staging`): a deploy you approve yourself; a prod deploy's arguments show only in "
    "Details\n"
    "• `ticket` (e.g. `ticket SUP-123`): a tool call that looks up a (made-up) support ticket\n"
    '• `call TOOL {json}` (e.g. `call lookup_ticket {"ticket_id": "SUP-7"}`): a call of any tool the agent '
    "has (your own too, with `--agent`), with that JSON object as its arguments\n"
    "• `help`: this message"
)
NEEDS_DEMO_TOOLS = (
    f"\n(`restart`, `refund`, `deploy prod` and `ticket` need the demo agent's tools: `AGENT={DEMO_AGENT_SPEC}`)"
)
HELP_TEXT = WITH_DEMO_TOOLS_HELP + NEEDS_DEMO_TOOLS
"""The reply to ``help`` and to anything the script does not know; it names every keyword, and how to get the demo
tools (:data:`WITH_DEMO_TOOLS_HELP` alone where the turn has them: the playground's own agent)."""

_SLACK_TOKEN = re.compile(r"<[^<>]*>")


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
            return _text_turn(_reply(asked, since_user, question_tool=self.tool_name))
        text = _text_of(messages[last_user]) if last_user >= 0 else ""
        wanted = parse_call(text)
        if wanted is not None:
            return _call_turn(messages, tools, *wanted)
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
            demo_tools = all(_has_tool(tools, name) for name in (RESTART_TOOL, REFUND_TOOL, DEPLOY_TOOL, TICKET_TOOL))
            return _text_turn(WITH_DEMO_TOOLS_HELP if demo_tools else HELP_TEXT)
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


_CALL = re.compile(r"\s*call(?:\s+(?P<name>[^\s{]+)(?P<args>.*)|\s*)$", re.DOTALL | re.IGNORECASE)
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def parse_call(text: str) -> tuple[str, str] | None:
    """``call TOOL {json}`` -> ``(TOOL, "{json}")`` (the arguments' text stripped; ``""`` when none; ``call`` alone
    -> ``("", "")``), or ``None`` when the message does not start with the word ``call`` (Slack ``<...>`` mentions
    before it are ignored).

    The text is unescaped as Slack escapes it (``&amp;``, ``&lt;``, ``&gt;``) and typographic quotes (which
    some keyboards type) become straight ones, so the JSON reads as typed.
    """
    match = _CALL.match(_SLACK_TOKEN.sub(" ", text))
    if match is None:
        return None
    args = (match.group("args") or "").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return match.group("name") or "", args.translate(_QUOTES).strip()


def _call_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]], name: str, args_text: str) -> TurnDone:
    """The turn for ``call NAME {json}``: the tool call, or a text reply saying what is wrong and what there is."""
    offered = {str((t.get("function") or {}).get("name")): t.get("function") or {} for t in tools}
    if not name:
        return _text_turn(
            f"{LABEL}Say which tool to call, and with what: `call TOOL {{json}}`. {_tool_listing(offered)}"
        )
    if name not in offered:
        return _text_turn(f"{LABEL}This agent has no `{name}` tool. {_tool_listing(offered)}")
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


def choose_flow(text: str) -> tuple[str, tuple[_Question, ...]]:
    """The flow for a user message: ``(flow name, questions to ask)``; no questions means the help text.

    Slack ``<...>`` tokens (mentions, links) are ignored; matching is case-insensitive, at word starts.
    """
    cleaned = _SLACK_TOKEN.sub(" ", text).lower()
    for flow, keywords, questions in FLOWS:
        if any(_mentions(cleaned, keyword) for keyword in keywords):
            return flow, questions
    return "help", ()


_RESTART = re.compile(r"(?<![a-z0-9])restart[a-z]*(?P<rest>.*)", re.DOTALL)
_TICKET_WORD = re.compile(r"(?<![a-z0-9])ticket")
_TICKET_ID = re.compile(r"(?<![a-z0-9])([a-z][a-z0-9]{0,9}-[0-9]{1,9})(?![a-z0-9])")
_TICKET_NUMBER = re.compile(r"(?<![a-z0-9])ticket[a-z]*\s*(?:no\.?|number)?\s*#?\s*([0-9]{1,9})(?![a-z0-9])")
_REFUND = re.compile(r"(?<![a-z0-9])refund[a-z]*(?P<rest>.*)", re.DOTALL)
_AMOUNT = re.compile(r"(?<![a-z0-9.])\$?([0-9]{1,7}(?:\.[0-9]{1,2})?)(?![0-9])")
_ORDER = re.compile(r"(?<![a-z0-9])ord-([0-9]{1,9})(?![a-z0-9])")
_DEPLOY_TO = re.compile(
    r"(?<![a-z0-9])deploy[a-z]*(?:\s+(?:it|this|that|the\s+app|v?[0-9][0-9.]*))?\s+(?:to\s+)?(?:the\s+)?"
    r"(?P<env>prod|production|staging|stage)(?![a-z0-9])"
)
_VERSION = re.compile(r"(?<![a-z0-9.])v?([0-9]{1,4}(?:\.[0-9]{1,4}){1,3})(?![0-9.])")
_SERVICE = re.compile(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9_-]+)*")
_FILLER = frozenset(
    {"the", "a", "an", "my", "our", "this", "that", "it", "service", "services", "server", "please", "now", "for"}
)


def choose_tool_flow(text: str) -> tuple[str, dict[str, Any]] | None:
    """The demo tool a user message asks for: ``(tool name, arguments)``, or ``None``.

    ``restart`` -> ``restart_service`` with ``{"name": ...}`` (the service named after "restart", default
    ``"api"``); ``ticket`` -> ``lookup_ticket`` with ``{"ticket_id": ...}`` (an id such as ``SUP-123`` anywhere
    in the text, or ``ticket 42`` -> ``SUP-42``, default ``"SUP-1"``). Matching is as in :func:`choose_flow`;
    ``refund`` -> ``refund`` with ``{"amount": ...}`` (the first number after "refund", default 25) and
    ``{"order_id": "ORD-7"}`` when an ``ORD-7`` is named; ``deploy`` followed by an environment (``deploy prod``,
    ``deploy 1.5.0 to staging``; ``production`` -> ``"prod"``, ``stage`` -> ``"staging"``) -> ``deploy`` with
    ``{"environment": ...}`` and ``{"version": ...}`` when one is named (``deploy`` alone is the single-select
    question). Matching is as in :func:`choose_flow`; the first of ``restart``, ``refund``, ``deploy``, ``ticket``
    wins.
    """
    cleaned = _SLACK_TOKEN.sub(" ", text).lower()
    restart = _RESTART.search(cleaned)
    if restart is not None:
        return RESTART_TOOL, {"name": _service_name(restart.group("rest"))}
    refund = _REFUND.search(cleaned)
    if refund is not None:
        return REFUND_TOOL, _refund_arguments(refund.group("rest"))
    deploy = _DEPLOY_TO.search(cleaned)
    if deploy is not None:
        env = "prod" if deploy.group("env").startswith("prod") else "staging"
        version = _VERSION.search(cleaned)
        return DEPLOY_TOOL, {"environment": env, **({"version": version.group(1)} if version else {})}
    if _TICKET_WORD.search(cleaned) is None:
        return None
    found = _TICKET_ID.search(cleaned)
    number = _TICKET_NUMBER.search(cleaned)
    ticket = found.group(1).upper() if found else f"SUP-{number.group(1)}" if number else DEFAULT_TICKET
    return TICKET_TOOL, {"ticket_id": ticket}


def _refund_arguments(rest: str) -> dict[str, Any]:
    """``{"amount": 250}`` (an int when whole) and ``"order_id"`` when the words after "refund" name ``ORD-n``."""
    order = _ORDER.search(rest)
    without_order = _ORDER.sub(" ", rest)
    found = _AMOUNT.search(without_order)
    amount: float = float(found.group(1)) if found else DEFAULT_REFUND
    if amount <= 0:
        amount = DEFAULT_REFUND
    args: dict[str, Any] = {"amount": int(amount) if amount.is_integer() else amount}
    if order is not None:
        args["order_id"] = f"ORD-{order.group(1)}"
    return args


def _service_name(rest: str) -> str:
    """The service named in the words after "restart" (filler words skipped), else :data:`DEFAULT_SERVICE`."""
    for token in rest.split()[:6]:
        word = token.strip(".,;:!?\"'()[]{}`*")
        if not word or word in _FILLER:
            continue
        return word if len(word) <= 40 and _SERVICE.fullmatch(word) else DEFAULT_SERVICE
    return DEFAULT_SERVICE


def split_pieces(text: str, *, words: int = 3) -> list[str]:
    """Split ``text`` into pieces of ``words`` words each (whitespace kept), so ``"".join(pieces) == text``."""
    tokens = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


# --- reading the conversation ------------------------------------------------------------------------


def _mentions(text: str, keyword: str) -> bool:
    if not keyword[0].isalnum():
        return keyword in text
    return re.search(r"(?<![a-z0-9])" + re.escape(keyword), text) is not None


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


# --- the reply after the answers ---------------------------------------------------------------------


def _reply(asked: dict[str, Any], since_user: list[dict[str, Any]], *, question_tool: str) -> str:
    """The reply after the tool calls of ``asked``: about the tools' results when it asked no question (no
    ``question_tool`` call), else about the answers to its questions."""
    calls = asked.get("tool_calls") or []
    names = {(call.get("function") or {}).get("name") for call in calls}
    if calls and question_tool not in names:
        return _tools_reply(calls, since_user)
    return _answers_reply(asked, since_user)


def _tools_reply(calls: list[dict[str, Any]], since_user: list[dict[str, Any]]) -> str:
    """One sentence per demo tool call, from its ``tool`` message after the last user message."""
    results = {str(m.get("tool_call_id")): m.get("content") for m in since_user if m.get("role") == "tool"}
    sentences: list[str] = []
    for call in calls:
        name = str((call.get("function") or {}).get("name"))
        if call.get("id") not in results:
            sentences.append(f"The `{name}` call got no result.")
            continue
        content, edited_by = _without_edit_note(results[call["id"]])
        sentence = _tool_sentence(name, content, _parse_tool_result(content))
        if edited_by is not None:  # bot.agent.approvals.edit_note: a person changed the arguments before approving
            sentence = f"{_mention(edited_by)} changed the arguments before approving. {sentence}"
        sentences.append(sentence)
    return LABEL + " ".join(sentences)


_EDIT_NOTE = re.compile(
    r"(?:Note: (?P<who>[^\n]+?) changed this call's arguments before approving it;[^\n]*?Its result follows\.\n"
    r"|\[(?P<who2>[^\n]+?) changed this call's arguments before approving it;[^\n]*?\]\n)"
)


def _without_edit_note(content: Any) -> tuple[Any, str | None]:
    """``(the result without the runtime's edit note, who edited)``; ``(content, None)`` when there is no note.
    The runtime puts one line before an edited call's result: an Edit's (:func:`bot.agent.approvals.edit_note`,
    ``"Note: U1 changed this call's arguments ... Its result follows."``) or ``Approve(arguments=...)``'s
    (:func:`bot.agent.approvals.note_edit`, ``"[U1 changed this call's arguments ...]"``)."""
    if not isinstance(content, str):
        return content, None
    found = _EDIT_NOTE.match(content)
    if found is None:
        return content, None
    return content[found.end() :], found.group("who") or found.group("who2")


def _mention(who: str) -> str:
    """``<@U1>`` for a user id, else the text as written (escaped, first letter upper-cased: "The approver")."""
    return f"<@{who}>" if re.fullmatch(r"[UW][A-Z0-9_]+", who) else _esc(who[:1].upper() + who[1:])


def _parse_tool_result(content: Any) -> dict[str, Any] | None:
    """A tool message's content as a dict, or ``None`` when it is not a JSON object (a plain text result)."""
    if not isinstance(content, str):
        return content if isinstance(content, dict) else None
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _tool_sentence(name: str, content: Any, result: dict[str, Any] | None) -> str:
    """e.g. ``"Done: restarted web (demo: nothing really restarted)."`` or ``"OK, I won't restart it (busy)."``."""
    what = {
        RESTART_TOOL: "restart it",
        TICKET_TOOL: "look up the ticket",
        REFUND_TOOL: "refund it",
        DEPLOY_TOOL: "deploy it",
    }.get(name, f"call `{name}`")
    if result is not None and result.get("status") == "declined":
        reason = result.get("reason")
        because = f" ({_esc(str(reason))})" if isinstance(reason, str) and reason.strip() else ""
        return f"OK, I won't {what}{because}."
    if result is not None and "error" in result:
        return f"I couldn't {what}: {_esc(str(result['error'])).rstrip('.')}."
    if name == TICKET_TOOL and result is not None and "id" in result:
        title = _esc(str(result.get("title") or "(no title)"))
        status = _esc(str(result.get("status") or "unknown"))
        assignee = result.get("assignee")
        owner = f"assigned to {_esc(str(assignee))}" if assignee else "unassigned"
        return f"{_esc(str(result['id']))} “{title}”: *{status}*, {owner}."
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if name not in (RESTART_TOOL, TICKET_TOOL, REFUND_TOOL, DEPLOY_TOOL):
        return f"`{name}` returned: {_esc(text.strip())}"
    return f"Done: {_esc(text.strip()).rstrip('.')}."


def _answers_reply(asked: dict[str, Any], since_user: list[dict[str, Any]]) -> str:
    """The reply for the tool calls of ``asked``, from their ``tool`` messages after the last user message."""
    results = {str(m.get("tool_call_id")): m.get("content") for m in since_user if m.get("role") == "tool"}
    sentences: list[str] = []
    errors: list[str] = []
    for call in asked.get("tool_calls") or []:
        fn = call.get("function") or {}
        question = _question_text(str(fn.get("arguments") or ""))
        what = f"“{question}”" if question else f"the `{fn.get('name')}` call"
        if call.get("id") not in results:
            errors.append(f"{what} got no answer")
            continue
        result = _parse_result(results[call["id"]])
        if "error" in result:
            errors.append(f"I couldn't ask {what}: {result['error']}")
        elif result.get("status") in ("no_answer", "cancelled"):  # the deadline passed, or it was withdrawn
            why = "nobody answered in time" if result["status"] == "no_answer" else "the question was withdrawn"
            sentences.append(f"No answer to {what} ({why}), so I did nothing.")
        else:
            sentences.append(_phrase(_QUESTIONS.get(question or ""), question, result))
    if errors:
        got = (" Still, " + " ".join(s[0].lower() + s[1:] for s in sentences)) if sentences else ""
        return f"{LABEL}Something went wrong: {'; '.join(errors)}.{got} {HELP_HINT}"
    return f"{LABEL}{' '.join(sentences) or 'Nothing was asked.'} {HELP_HINT}"


def _question_text(arguments: str) -> str | None:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    question = args.get("question") if isinstance(args, dict) else None
    return question.strip() if isinstance(question, str) and question.strip() else None


def _parse_result(content: Any) -> dict[str, Any]:
    """A tool message's content as a dict; non-JSON or non-object content becomes ``{"answer": text}``."""
    text = content if isinstance(content, str) else json.dumps(content)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"answer": text, "answer_type": "text"}
    return value if isinstance(value, dict) else {"answer": text, "answer_type": "text"}


def _esc(text: str) -> str:
    """Slack's escaping for text the user typed: ``&``, ``<``, ``>`` (so ``<!channel>`` does not ping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _phrase(known: _Question | None, question: str | None, result: dict[str, Any]) -> str:
    """One sentence about one answer, e.g. ``"Deploying to *production*, as <@U1> chose."``."""
    who = result.get("answered_by")
    by = f"<@{who}>" if isinstance(who, str) and who else "you"
    kind = result.get("answer_type")
    answers = result.get("answers")
    if isinstance(answers, list):
        listed = ", ".join(_esc(str(a)) for a in answers) or "nothing"
        if known is _FEATURES:
            return f"Planned: {listed}."
        if known is _TOPPING:
            return f"Pizza with {listed} ({len(answers)} of {len(_TOPPINGS)} toppings), as {by} chose."
        return f"You chose {listed} for “{question}”."
    answer = _esc(str(result.get("answer", "")))
    if kind == "typed_text":
        return f"None of the options, then: going with *{answer}*, which {by} typed in."
    phrases = {
        "project_name": f"The project is called *{answer}*, as {by} said.",
        "environment": f"Deploying to *{answer}*, as {by} chose.",
        "city": f"The next meetup is in *{answer}* (picked from {len(_CITIES)} cities by {by}).",
    }
    if known and known.key in phrases:
        return phrases[known.key]
    return f"You answered *{answer}* to “{question}”." if question else f"You answered *{answer}*."
