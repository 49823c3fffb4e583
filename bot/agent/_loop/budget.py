"""The token budget of a model request, and the bound on the history a run stores.

A run carries its whole conversation; without a bound every model request sends all of it (until the model
answers with its context-length error) and every turn loads and rewrites all of it in Redis. This module:

- **estimates** tokens without a tokenizer (:func:`message_tokens`): UTF-8 bytes / 4 of every string a message
  sends (content, tool call names and arguments, ids, provider extras such as ``reasoning_content``) plus
  :data:`PER_MESSAGE` tokens of framing per message (and per tool call);
- **calibrates** the estimate by what the server reports (:class:`Calibration`): per model, an exponential moving
  average of ``usage.prompt_tokens / estimated`` (in memory, per process), applied to later estimates; a
  context-length error's numbers (the model's limit, the tokens the request had) are learned too;
- **fits** a request into the budget (:func:`fit`): the oldest turns are left out first; a turn is a user message,
  an assistant message, or an assistant message with ``tool_calls`` together with its ``tool`` results (never
  separated); the last turn (the pending question or its answers) and the latest user message are always kept;
  a request never starts with a ``tool`` message. The cut moves in steps of a quarter of the budget, so
  consecutive requests share their prefix (providers' prompt caches);
- **refuses** a request still over the budget once every older turn is left out (:meth:`HistoryBudget.over`:
  the newest turn itself is too big, e.g. many large tool results): it is never sent
  (:class:`bot.errors.RequestOverBudget`, raised by :func:`bot.agent._loop.turns.budgeted_turn`). One tool result is
  bounded before it is stored (:func:`bot.agent.tools.bounded_result`), so this takes several large ones;
- **bounds the stored history** (:meth:`HistoryBudget.bound_stored`): once the stored messages estimate past
  :data:`STORE_HIGH` (2) x budget they are cut, same rules, to :data:`STORE_KEEP` (1.5) x budget. A request can
  never send more than 1 x budget of the newest turns, and what it did not send it never sends again (the history
  only grows at its end), so older messages are dead weight in every load and save; the half budget above 1 x is
  hysteresis, so the stored head moves in steps. Per-turn Redis bytes and load/save CPU stop growing with the
  thread (a thread's older messages stay readable in Slack itself).

Units: tokens everywhere (``int``); *raw* tokens are the uncalibrated estimate, *calibrated* ones are raw x the
model's ratio, comparable to the server's ``prompt_tokens`` and to the budget.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_HISTORY_BUDGET = 24_000
"""Tokens a model request may carry by default (system prompt, tool specs and messages): fits every current
chat model with 32k context or more while leaving room for the reply; ~1 cent a turn on gpt-4.1-mini."""

PER_MESSAGE = 4
"""Tokens of framing per message and per tool call (role, separators), as OpenAI's own accounting has."""

STORE_HIGH = 2.0
STORE_KEEP = 1.5
"""The stored history is cut when it estimates past ``STORE_HIGH`` x budget, down to ``STORE_KEEP`` x budget.
Both are in the same calibrated tokens as the budget, so a moving calibration moves them together; a request
takes at most 1 x budget (the quarter-budget step of its cut included), and half a budget more is the hysteresis:
the head of the stored history moves once per ~half a budget of new messages, not every turn."""

LEFT_OUT_NOTE = (
    "(The oldest messages of this conversation were left out to fit the model's context; if something from "
    "earlier matters and is not below, ask for it.)"
)
"""Appended to the system prompt of a request that leaves messages out (constant text: prompt caches hold)."""

_LIMIT = re.compile(r"(?:maximum context length is|limit of|context window of|context length of)\s+(\d+)", re.I)
_USED = re.compile(r"(?:resulted in|requested|you have|input of)\s+(\d+)\s+tokens", re.I)
_IN_MESSAGES = re.compile(r"(\d+)\s+in the messages", re.I)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode(errors="surrogatepass"))  # half emoji: 3 bytes
    if value is None or isinstance(value, bool | int | float):
        return 0 if value is None else 2
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    if isinstance(value, dict):
        return sum(_chars(v) for v in value.values())
    return len(str(value))


def message_tokens(message: dict[str, Any]) -> int:
    """Raw estimated tokens of one Chat Completions message: every string it sends (content or content parts,
    tool call ids, names and arguments, provider extras), UTF-8 bytes / 4, plus :data:`PER_MESSAGE` per message
    and per tool call."""
    calls = message.get("tool_calls")
    extra = PER_MESSAGE * len(calls) if isinstance(calls, list) else 0
    return PER_MESSAGE + extra + (_chars(message) + 3) // 4


def text_tokens(text: str) -> int:
    """Raw estimated tokens of a text (e.g. the system prompt, the JSON of the tool specs)."""
    return (_chars(text) + 3) // 4


def _count(value: object) -> bool:
    """Whether ``value`` is a finite number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class _ModelStats:
    ratio: float = 1.0
    samples: int = 0
    limit: int | None = None  # the context window the server said it has (tokens)


@dataclass
class Calibration:
    """Per model name: the ratio ``reported / estimated`` prompt tokens (an exponential moving average with
    ``weight`` for each new sample; the first sample is taken as is), clamped to ``[low, high]``, and the
    context window learned from a context-length error. In memory: each process learns on its own."""

    weight: float = 0.3
    low: float = 0.25
    high: float = 4.0
    _models: dict[str, _ModelStats] = field(default_factory=dict)

    def ratio(self, model: str) -> float:
        """Calibrated tokens per raw estimated token for ``model`` (1.0 before any report)."""
        stats = self._models.get(model)
        return stats.ratio if stats is not None else 1.0

    def observe(self, model: str, *, estimated: int, reported: int) -> float:
        """Take one report: ``estimated`` raw tokens were sent, the server counted ``reported``. Returns the new
        ratio. Reports that are not positive are ignored (some servers send 0 or 1 as a placeholder), and so are
        values that are not counts at all (text, None, NaN: a model adapter passing on what a server sent)."""
        stats = self._models.setdefault(model, _ModelStats())
        if not (_count(estimated) and _count(reported)) or estimated <= 0 or reported <= 1:
            return stats.ratio
        sample = min(self.high, max(self.low, reported / estimated))
        stats.ratio = sample if stats.samples == 0 else (1 - self.weight) * stats.ratio + self.weight * sample
        stats.samples += 1
        return stats.ratio

    def learn_limit(self, model: str, tokens: int) -> None:
        """Remember ``model``'s context window (tokens), as a context-length error stated it."""
        if tokens > 0:
            self._models.setdefault(model, _ModelStats()).limit = tokens

    def limit(self, model: str) -> int | None:
        """``model``'s context window as learned from an error, or None."""
        stats = self._models.get(model)
        return stats.limit if stats is not None else None

    def clear(self) -> None:
        """Forget everything learned (e.g. between tests)."""
        self._models.clear()


CALIBRATION = Calibration()
"""This process's calibration, shared by every agent (keyed by model name)."""


def error_numbers(text: str) -> tuple[int | None, int | None]:
    """``(context window, prompt tokens)`` from a context-length error's text (OpenAI's and vLLM's wordings), each
    None when not stated."""
    limit = _LIMIT.search(text)
    used = _IN_MESSAGES.search(text) or _USED.search(text)
    return (int(limit.group(1)) if limit else None, int(used.group(1)) if used else None)


def turns_of(messages: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """The messages cut into turns, ``[(start, end), ...]`` (end exclusive): an assistant message with
    ``tool_calls`` spans the ``tool`` messages that follow it; every other message is a turn of its own."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while j < n and messages[j].get("role") == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans


def fit(
    messages: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    *,
    budget: int,
    quantum: int = 0,
    count_latest_user: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """``(the messages to keep, how many were left out)`` so that their ``sizes`` (raw tokens per message) sum to
    at most ``budget`` where possible: oldest turns out first, the last turn and the latest user message always
    kept. ``quantum`` (tokens, 0 for none): the amount left out is rounded up to a multiple of it, so the cut
    stays put while the history grows by less than that. ``tool`` messages whose call is not kept are dropped."""
    keep = kept_indices(messages, sizes, budget=budget, quantum=quantum, count_latest_user=count_latest_user)
    if keep is None:
        return list(messages), 0
    return [messages[i] for i in keep], len(messages) - len(keep)


def kept_indices(
    messages: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    *,
    budget: int,
    quantum: int = 0,
    count_latest_user: bool = True,
) -> list[int] | None:
    """The indices of the messages :func:`fit` keeps, or None when it keeps them all. ``count_latest_user=False``:
    the latest user message, kept anyway, takes none of ``budget`` from the turns after it (the stored bound: once
    a newer user message comes, requests send those turns again, however long that message was)."""
    spans = turns_of(messages)
    if not spans:
        return None
    turn_sizes = [sum(sizes[a:b]) for a, b in spans]
    last_user = next((t for t in range(len(spans) - 1, -1, -1) if messages[spans[t][0]].get("role") == "user"), None)
    pinned = {len(spans) - 1} | ({last_user} if last_user is not None else set())
    total = sum(turn_sizes)
    if total <= budget:
        return None
    used = sum(turn_sizes[t] for t in pinned if count_latest_user or t == len(spans) - 1)
    cut = len(spans) - 1  # the first turn kept (pinned ones before it are kept too)
    for t in range(len(spans) - 2, -1, -1):
        if t in pinned:
            cut = t
            continue
        if used + turn_sizes[t] > budget:
            break
        used += turn_sizes[t]
        cut = t
    if quantum > 0:
        dropped = sum(turn_sizes[:cut])
        target = -(-dropped // quantum) * quantum
        while cut < len(spans) - 1 and dropped < target:
            dropped += turn_sizes[cut]
            cut += 1
    turns = sorted({t for t in pinned if t < cut} | set(range(cut, len(spans))))
    keep = [i for t in turns for i in range(*spans[t])]
    called = {
        c.get("id") for i in keep if messages[i].get("role") == "assistant" for c in messages[i].get("tool_calls") or []
    }
    return [i for i in keep if messages[i].get("role") != "tool" or messages[i].get("tool_call_id") in called]


@dataclass
class Request:
    """A model request fitted to the budget: ``messages`` (system prompt first), ``estimated`` (raw tokens of the
    whole request: system prompt, tool specs, messages), ``left_out`` (stored messages not sent), ``budget`` (the
    calibrated tokens it was fitted to; None: unbounded)."""

    messages: list[dict[str, Any]]
    estimated: int
    left_out: int
    budget: int | None = None


class HistoryBudget:
    """The budget of one agent's model requests: ``budget`` tokens (None: unbounded, nothing left out or cut),
    calibrated per ``model`` name by ``calibration``."""

    def __init__(self, budget: int | None, *, model: str, calibration: Calibration = CALIBRATION) -> None:
        self.budget = budget
        self.model = model
        self.calibration = calibration

    def effective(self, budget: int | None = None) -> int | None:
        """The budget in calibrated tokens: ``budget`` (default: the configured one), at most 80 % of the model's
        context window when an error told it (room for the reply)."""
        budget = self.budget if budget is None else budget
        limit = self.calibration.limit(self.model)
        if budget is not None and limit is not None:
            budget = min(budget, limit * 4 // 5)
        return budget

    def _raw(self, tokens: int) -> int:
        return int(tokens / self.calibration.ratio(self.model))

    def request(
        self,
        instructions: str,
        messages: Sequence[dict[str, Any]],
        *,
        tools_tokens: int,
        budget: int | None = None,
        sizes: Sequence[int] | None = None,
    ) -> Request:
        """The request for ``messages`` under ``budget`` (default :meth:`effective`); ``tools_tokens``: raw tokens
        of the tool specs sent beside them; ``sizes``: the messages' :func:`message_tokens` when known."""
        sizes = [message_tokens(m) for m in messages] if sizes is None else sizes
        fixed = text_tokens(instructions) + tools_tokens + PER_MESSAGE
        limit = self.effective(budget)
        keep = None
        if limit is not None:
            room = max(0, self._raw(limit) - fixed - text_tokens(LEFT_OUT_NOTE))
            keep = kept_indices(messages, sizes, budget=room, quantum=room // 4)
        if keep is None:
            whole = [{"role": "system", "content": instructions}, *messages]
            return Request(whole, fixed + sum(sizes), 0, limit)
        system = instructions + "\n\n" + LEFT_OUT_NOTE
        estimated = fixed + text_tokens(LEFT_OUT_NOTE) + sum(sizes[i] for i in keep)
        kept = [messages[i] for i in keep]
        left_out = len(messages) - len(keep)
        return Request([{"role": "system", "content": system}, *kept], estimated, left_out, limit)

    def over(self, request: Request) -> tuple[int, int] | None:
        """``(estimated, budget)`` in calibrated tokens when ``request`` (from :meth:`request`) estimates past the
        budget it was fitted to, so it must not be sent; None when it fits or nothing bounds it. Only what is always
        kept can be over: the system prompt, the tool specs, the newest turn and the latest user message."""
        if request.budget is None or request.estimated <= self._raw(request.budget):
            return None
        return math.ceil(request.estimated * self.calibration.ratio(self.model)), request.budget

    def bound_stored(
        self, messages: list[dict[str, Any]], sizes: Sequence[int] | None = None
    ) -> list[dict[str, Any]] | None:
        """The stored history cut to ``STORE_KEEP`` x budget once it is past ``STORE_HIGH`` x budget (same rules
        as a request, but the latest user message takes none of the room of the turns after it: a request sends
        them again once a newer user message comes, however long that one was), or None when it stays as it is
        (no budget, or under the bound). ``sizes``: the messages' :func:`message_tokens` when known."""
        if self.budget is None:
            return None
        sizes = [message_tokens(m) for m in messages] if sizes is None else sizes
        if sum(sizes) <= self._raw(int(STORE_HIGH * self.budget)):
            return None
        keep = self._raw(int(STORE_KEEP * self.budget))
        kept, left_out = fit(messages, sizes, budget=keep, count_latest_user=False)
        return kept if left_out else None


def tools_tokens(specs: Sequence[dict[str, Any]]) -> int:
    """Raw estimated tokens of the tool specs a request carries."""
    return text_tokens(json.dumps(list(specs))) if specs else 0
