"""What one argument of a call must be, in a policy rule's ``when`` (docs/approvals.md): :class:`Condition`, its
operators (equals, ``in``, ``gt`` / ``gte`` / ``lt`` / ``lte``, ``glob``, ``regex``, ``present``; no ``eval``), and
:func:`lookup`, which finds an argument by its path (``target.env``). JSON's equality throughout: ``true`` is not
``1``, ``"1"`` is not ``1``."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

MAX_REGEX = 500  # characters of a `regex` pattern (the operator's, but a policy file is no place for a novel)

Scalar = str | int | float | bool | None

_OPS = ("equals", "in", "gt", "gte", "lt", "lte", "glob", "regex", "present")


def _scalar(value: object, what: str) -> Scalar:
    if value is None or isinstance(value, (str, bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number")
        return value
    raise ValueError(f"{what} must be a string, number, true/false or null (got a {type(value).__name__})")


def _same(a: object, b: object) -> bool:
    """JSON equality: true is not 1, "1" is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Condition(BaseModel):
    """What one argument must be; every operator given must hold. In a file: a plain value means ``equals``, a
    list means ``in`` (one of), a mapping names operators: ``{gt: 100}``, ``{glob: "prod-*"}``, ``{present: false}``.

    ``gt`` / ``gte`` / ``lt`` / ``lte`` hold for numbers only (never for true/false or a numeric string); ``glob``
    (:func:`fnmatch.fnmatchcase`, case-sensitive, the whole string) and ``regex`` (Python :mod:`re`, searched
    anywhere: anchor with ``^`` / ``$``; at most :data:`MAX_REGEX` characters, compiled at load) for strings only;
    ``present``: whether the argument is there at all (``null`` counts as there). A missing argument fails every
    operator but ``present: false``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    equals: Scalar = None
    equals_set: bool = Field(default=False, exclude=True)
    in_: tuple[Scalar, ...] | None = Field(default=None, alias="in")
    gt: int | float | None = None
    gte: int | float | None = None
    lt: int | float | None = None
    lte: int | float | None = None
    glob: str | None = None
    regex: str | None = None
    present: bool | None = None
    _pattern: re.Pattern[str] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        if isinstance(value, (list, tuple)):
            return {"in": value}
        if not isinstance(value, dict):
            return {"equals": _scalar(value, "the value"), "equals_set": True}
        if not value:
            raise ValueError("an empty condition: give a value, a list (one of) or operators (" + ", ".join(_OPS) + ")")
        unknown = [str(k) for k in value if k not in _OPS]
        if unknown:
            raise ValueError(f"unknown operator {unknown[0]!r}: use " + ", ".join(_OPS))
        out = dict(value)
        if "equals" in out:
            out["equals"] = _scalar(out["equals"], "equals")
            out["equals_set"] = True
        return out

    @field_validator("in_", mode="before")
    @classmethod
    def _in(cls, value: object) -> object:
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError("in must be a non-empty list of values")
        return tuple(_scalar(v, "each value of in") for v in value)

    @field_validator("gt", "gte", "lt", "lte", mode="before")
    @classmethod
    def _bound(cls, value: object) -> object:
        if not _number(value):
            raise ValueError("must be a number")
        try:
            finite = math.isfinite(float(value))  # type: ignore[arg-type]
        except OverflowError:  # an integer past a float's range: compared as a float, it can't be
            raise ValueError("must be a number within +-1.8e308") from None
        if not finite:
            raise ValueError("must be a number")
        return value

    @field_validator("glob", "regex", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        if not isinstance(value, str) or not value:
            raise ValueError("must be a non-empty string")
        return value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) > MAX_REGEX:
            raise ValueError(f"must be at most {MAX_REGEX} characters")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        return value

    @field_validator("present", mode="before")
    @classmethod
    def _present(cls, value: object) -> object:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Condition:
        if self.present is False and len(self.operators()) > 1:
            raise ValueError("present: false can't be combined with other operators (a missing argument has no value)")
        if self.regex is not None:
            self._pattern = re.compile(self.regex)
        return self

    def operators(self) -> list[str]:
        """The operators this condition gives, in :data:`_OPS` order."""
        given = {
            "equals": self.equals_set,
            "in": self.in_ is not None,
            "gt": self.gt is not None,
            "gte": self.gte is not None,
            "lt": self.lt is not None,
            "lte": self.lte is not None,
            "glob": self.glob is not None,
            "regex": self.regex is not None,
            "present": self.present is not None,
        }
        return [op for op in _OPS if given[op]]

    def check(self, found: bool, value: object) -> list[tuple[str, bool]]:
        """Each operator's verdict on an argument (``found``: it is there; ``value``: its value), as
        ``(description, held)``."""
        out: list[tuple[str, bool]] = []
        for op in self.operators():
            if op == "present":
                out.append((f"present: {str(self.present).lower()}", found is self.present))
                continue
            shown = repr(value) if found else "missing"
            if not found:
                out.append((f"{shown}, so not {self._describe(op)}", False))
                continue
            held = self._holds(op, value)
            out.append((f"{shown} {'is' if held else 'is not'} {self._describe(op)}", held))
        return out

    def summary(self, path: str) -> str:
        """The condition on ``path`` in a few words (``amount > 100``, ``environment = 'prod'``)."""
        parts = []
        for op in self.operators():
            if op == "present":
                parts.append(f"{path} {'present' if self.present else 'absent'}")
            else:
                parts.append(f"{path} {self._describe(op, short=True)}")
        return " and ".join(parts)

    def _describe(self, op: str, *, short: bool = False) -> str:
        operand = {
            "equals": self.equals,
            "in": list(self.in_ or ()),
            "gt": self.gt,
            "gte": self.gte,
            "lt": self.lt,
            "lte": self.lte,
            "glob": self.glob,
            "regex": self.regex,
        }[op]
        if short:
            symbols = {"equals": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
            return f"{symbols.get(op, op)} {operand!r}"
        words = {
            "equals": "equal to",
            "in": "one of",
            "gt": ">",
            "gte": ">=",
            "lt": "<",
            "lte": "<=",
            "glob": "matching glob",
            "regex": "matching regex",
        }[op]
        return f"{words} {operand!r}"

    def _holds(self, op: str, value: object) -> bool:
        if op == "equals":
            return _same(value, self.equals)
        if op == "in":
            return any(_same(value, v) for v in self.in_ or ())
        if op in ("gt", "gte", "lt", "lte"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return False
            number = value
            bound: int | float = getattr(self, op)
            return {"gt": number > bound, "gte": number >= bound, "lt": number < bound, "lte": number <= bound}[op]
        if not isinstance(value, str):
            return False
        if op == "glob":
            return fnmatch.fnmatchcase(value, self.glob or "")
        assert self._pattern is not None
        return self._pattern.search(value) is not None


def lookup(args: Mapping[str, Any], path: str) -> tuple[bool, object]:
    """``(found, value)`` of argument ``path`` in ``args``: the key itself if ``args`` has it, else dots descend
    into objects (``target.env``: ``args["target"]["env"]``)."""
    if path in args:
        return True, args[path]
    current: object = args
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current
