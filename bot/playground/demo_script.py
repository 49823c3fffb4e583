"""The demo model's script (:mod:`bot.playground.demo_model`): what it can ask (:class:`Question`, the flows'
questions), the demo tools it calls, its help text, and how it reads a person's message: which flow it starts
(:func:`choose_flow`), which demo tool it calls and with what (:func:`choose_tool_flow`), or which tool a ``call TOOL
{json}`` names (:func:`parse_call`). Pure and deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

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
class Question:
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


PROJECT_NAME = Question(key="project_name", question="What's the project called?")
ENVIRONMENT = Question(
    key="environment",
    question="Which environment should I deploy to?",
    options=(
        ("staging", "A copy of production for testing; safe to break."),
        ("production", "What real users see. Deploys here are announced."),
        ("development", "The shared dev box; rebuilt every night."),
    ),
    selection_mode="single_select",
)
FEATURES = Question(
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
CITIES = (
    "Amsterdam", "Athens", "Bangkok", "Barcelona", "Berlin", "Bogotá", "Buenos Aires", "Cairo", "Cape Town",
    "Chicago", "Copenhagen", "Dublin", "Helsinki", "Istanbul", "Lagos", "Lisbon", "London", "Madrid",
    "Melbourne", "Mexico City", "Montreal", "Mumbai", "Nairobi", "Oslo", "Paris", "Prague", "Seoul",
    "Singapore", "Tokyo", "Vienna",
)  # fmt: skip
CITY = Question(
    key="city",
    question="Which city should host the next meetup?",
    options=tuple((city, None) for city in CITIES),
    selection_mode="single_select",
)
TOPPINGS = (
    "Mozzarella", "Tomato", "Basil", "Mushrooms", "Olives", "Onions", "Peppers", "Pineapple", "Ham",
    "Salami", "Anchovies", "Artichokes",
)  # fmt: skip
TOPPING = Question(
    key="toppings",
    question="Which toppings go on the team pizza?",
    options=tuple((topping, None) for topping in TOPPINGS),
    selection_mode="multi_select",
)
QUESTIONS = {q.question: q for q in (PROJECT_NAME, ENVIRONMENT, FEATURES, CITY, TOPPING)}

# Flows in the order they are tried; each keyword matches at the start of a word ("deployment", "multi-select").
FLOWS: tuple[tuple[str, tuple[str, ...], tuple[Question, ...]], ...] = (
    ("two_questions", ("two questions", "both"), (PROJECT_NAME, ENVIRONMENT)),
    ("many", ("many",), (CITY,)),
    ("lots", ("lots",), (TOPPING,)),
    ("single_select", ("deploy", "pick", "choose", "single"), (ENVIRONMENT,)),
    ("multi_select", ("plan", "features", "several", "multi"), (FEATURES,)),
    ("help", ("help",), ()),
    ("free_form", ("name", "free", "text", "?"), (PROJECT_NAME,)),
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
    "• `stop` (or `cancel`), in the thread while I work, or the thread's Stop button: stops the run\n"
    "• `help`: this message"
)
NEEDS_DEMO_TOOLS = (
    f"\n(`restart`, `refund`, `deploy prod` and `ticket` need the demo agent's tools: `AGENT={DEMO_AGENT_SPEC}`)"
)
HELP_TEXT = WITH_DEMO_TOOLS_HELP + NEEDS_DEMO_TOOLS
"""The reply to ``help`` and to anything the script does not know; it names every keyword, and how to get the demo
tools (:data:`WITH_DEMO_TOOLS_HELP` alone where the turn has them: the playground's own agent; :func:`help_text`
for a run with only some of them)."""
_TOOL_WORDS = {
    RESTART_TOOL: "`restart`",
    REFUND_TOOL: "`refund`",
    DEPLOY_TOOL: "`deploy prod`",
    TICKET_TOOL: "`ticket`",
}
_TOOL_LINES = {  # the help's line of each demo tool, in WITH_DEMO_TOOLS_HELP
    RESTART_TOOL: "• `restart` (e.g. `restart web`)",
    REFUND_TOOL: "• `refund` (e.g. `refund 250`)",
    DEPLOY_TOOL: "• `deploy prod` (or `deploy staging`)",
    TICKET_TOOL: "• `ticket` (e.g. `ticket SUP-123`)",
}


def help_text(tools: set[str]) -> str:
    """The help for a run whose agent has the tools named ``tools``: :data:`WITH_DEMO_TOOLS_HELP` with all four demo
    tools (the playground's own agent: its lines tell its approval rules); :data:`HELP_TEXT` with none; with some
    (an agent of a framework's example), their lines say only what the call does (that agent's own rules decide who
    approves it) and the footer names only the tools it lacks. Found by a new user's trial: with the Pydantic AI
    agent ``help`` promised Bob and Carol for a restart Alice alone approved, and said restart needs the demo agent."""
    have = [t for t in _TOOL_LINES if t in tools]
    if len(have) == len(_TOOL_LINES):
        return WITH_DEMO_TOOLS_HELP
    if not have:
        return HELP_TEXT
    lines = []
    for line in WITH_DEMO_TOOLS_HELP.split("\n"):
        tool = next((t for t, start in _TOOL_LINES.items() if line.startswith(start)), None)
        if tool is None:
            lines.append(line)
        elif tool in tools:
            lines.append(f"{_TOOL_LINES[tool]}: a call of this agent's `{tool}` tool (its own rules say who approves)")
    missing = ", ".join(_TOOL_WORDS[t] for t in _TOOL_LINES if t not in tools)
    return "\n".join(lines) + f"\n({missing}: need the demo agent's tools: `AGENT={DEMO_AGENT_SPEC}`)"


_SLACK_TOKEN = re.compile(r"<[^<>]*>")


SUMMARY = re.compile(r"\s*summari[sz]e:\s*(?P<text>\S.*)", re.DOTALL | re.IGNORECASE)
"""``Summarize: TEXT``: the demo model replies ``TEXT`` (:class:`bot.playground.demo_model.DemoModel`)."""
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


def choose_flow(text: str) -> tuple[str, tuple[Question, ...]]:
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


def _mentions(text: str, keyword: str) -> bool:
    if not keyword[0].isalnum():
        return keyword in text
    return re.search(r"(?<![a-z0-9])" + re.escape(keyword), text) is not None
