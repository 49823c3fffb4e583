"""Tool calls assembled from the ``tool_calls`` entries of Chat Completions deltas, whatever the server's layout.

OpenAI streams each call as entries sharing an ``index``: the first carries ``id`` and ``function.name``,
later ones append to ``function.arguments``. OpenAI-compatible servers vary: some repeat the name on every
entry, some send a name in pieces, some omit ``index`` or ``id``, some reuse ``index: 0`` (or one id) for
several calls each sent whole, some send ``arguments`` as a JSON object instead of text. The rules, applied
per entry (see :meth:`ToolCallAssembler.feed`), keep every known layout apart without guessing from timing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.agent.state import ToolCall
from bot.agent.text import json_without_surrogates, without_surrogates

TOOL_CALL_FIELDS = frozenset({"index", "id", "type", "function"})
"""The keys Chat Completions defines for a ``tool_calls[]`` entry; any other key is a provider extra."""


def merge_extra(target: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Merge provider fields that arrive across several deltas into ``target`` (in place).

    Per key: ``None`` is skipped; strings are concatenated (``reasoning_content`` streams in pieces); lists
    are extended; dicts are merged (shallow, later keys win); any other value (or a change of type) replaces.
    Lists and dicts are copied on first sight, so ``target`` never aliases the delta's objects.
    """
    for key, value in json_without_surrogates(dict(fields)).items():
        if value is None:
            continue
        old = target.get(key)
        if isinstance(old, str) and isinstance(value, str):
            target[key] = old + value
        elif isinstance(old, list) and isinstance(value, list):
            old.extend(value)
        elif isinstance(old, dict) and isinstance(value, dict):
            old.update(value)
        elif isinstance(value, list):
            target[key] = list(value)
        elif isinstance(value, dict):
            target[key] = dict(value)
        else:
            target[key] = value


@dataclass
class _Call:
    """One call being assembled; ``pieces`` are its argument text fragments in order."""

    id: str
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    _complete: bool | None = None  # cached "arguments are one complete JSON object"; None = not checked yet

    def arguments(self) -> str:
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""

    def has_complete_arguments(self) -> bool:
        """True when the arguments so far parse as a JSON object (cheap when they cannot: no trailing ``}``)."""
        if self._complete is None:
            if not self.pieces or not self.pieces[-1].rstrip().endswith("}"):
                self._complete = False
            else:
                try:
                    self._complete = isinstance(json.loads(self.arguments()), dict)
                except (ValueError, RecursionError):  # not JSON (yet), or nested past Python's recursion
                    self._complete = False
        return self._complete

    def add_arguments(self, text: str) -> None:
        self.pieces.append(text)
        self._complete = None


class ToolCallAssembler:
    """Assembles the ``tool_calls`` entries of one assistant turn into :class:`ToolCall` objects.

    ``feed`` takes entries as dicts or as the openai SDK's ``ChoiceDeltaToolCall`` objects, shaped
    ``{"index"?: int, "id"?: str, "type"?: "function", "function"?: {"name"?: str, "arguments"?: str | object},
    ...provider extras}``. Which call an entry belongs to:

    - with an ``index``: the current call at that index, unless the entry's ``id`` differs from that call's id
      (then it starts a new call at that index);
    - without an ``index``: the call with that ``id``; with an unknown ``id``, a new call; with no ``id``, the
      last call;
    - in every case, an entry carrying a name starts a new call when the target already has a name and
      complete JSON-object arguments, and the entry carries arguments of its own or a different name (a server
      sending several whole calls at one index, or without indexes or ids).

    Within a call: a name sent in pieces before any arguments is concatenated (``"ask_"``, ``"user"``); a
    repeated name is ignored; argument text is appended; arguments sent as a JSON object (or array) are
    serialised to JSON text; other keys of the entry (e.g. ``extra_content`` with a thought signature) are
    merged into ``ToolCall.extra`` by :func:`merge_extra`. Per entry the cost is a few attribute reads, and a
    JSON parse only when a name arrives for a call whose arguments end with ``}``.
    """

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}

    def feed(self, entries: Iterable[Any]) -> None:
        """Add the ``tool_calls`` entries of one delta (or of one whole message, each with its own index)."""
        for entry in entries:
            if isinstance(entry, Mapping):
                index = entry.get("index")
                call_id = entry.get("id")
                fn = entry.get("function")
                name = fn.get("name") if isinstance(fn, Mapping) else None
                arguments = fn.get("arguments") if isinstance(fn, Mapping) else None
                extra: Mapping[str, Any] | None = {k: v for k, v in entry.items() if k not in TOOL_CALL_FIELDS}
            else:  # the openai SDK's ChoiceDeltaToolCall (built without validation: fields may be absent)
                index = getattr(entry, "index", None)
                call_id = getattr(entry, "id", None)
                fn = getattr(entry, "function", None)
                name = getattr(fn, "name", None)
                arguments = getattr(fn, "arguments", None)
                extra = entry.model_extra
            self._add(
                index if isinstance(index, int) else None,
                call_id if isinstance(call_id, str) else None,
                name if isinstance(name, str) else None,
                arguments,
                extra,
            )

    def _add(
        self,
        index: int | None,
        call_id: str | None,
        name: str | None,
        arguments: Any,
        extra: Mapping[str, Any] | None,
    ) -> None:
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        arguments = without_surrogates(arguments) if isinstance(arguments, str) else arguments
        name = without_surrogates(name) if name else name
        call_id = without_surrogates(call_id) if call_id else call_id
        if index is not None:
            call = self._by_index.get(index)
        elif call_id:
            call = self._by_id.get(call_id)
        else:
            call = self._calls[-1] if self._calls else None
        if call is not None and (
            (call_id and call.id and call_id != call.id)
            or (name and call.name and (arguments or name != call.name) and call.has_complete_arguments())
        ):
            call = None
        if call is None:
            call = _Call(id="")
            self._calls.append(call)
        if index is not None:
            self._by_index[index] = call
        if call_id:
            if not call.id:
                call.id = call_id
            self._by_id[call_id] = call
        if name and name != call.name:
            if not call.name:
                call.name = name
            elif not call.pieces:
                call.name += name  # a name streamed in pieces, before any arguments
        if arguments:
            call.add_arguments(arguments)
        if extra:
            merge_extra(call.extra, extra)

    def calls(self) -> list[ToolCall]:
        """The assembled calls in arrival order.

        A call with no arguments gets ``"{}"``. A call with no id, or with an id an earlier call of this turn
        already has, gets a fresh ``call_<n>`` id unique within the turn. An entry that carried nothing (no id,
        name, arguments or extras) is not a call and is dropped.
        """
        taken = {c.id for c in self._calls if c.id}
        used: set[str] = set()
        out: list[ToolCall] = []
        for n, call in enumerate(self._calls):
            if not (call.id or call.name or call.pieces or call.extra):
                continue
            call_id = call.id
            if not call_id or call_id in used:
                call_id, k = f"call_{n}", 0
                while call_id in taken or call_id in used:
                    k += 1
                    call_id = f"call_{n}_{k}"
            used.add(call_id)
            out.append(ToolCall(id=call_id, name=call.name, arguments=call.arguments() or "{}", extra=call.extra))
        return out
