"""Reading a policy file (YAML ``.yaml`` / ``.yml``, TOML ``.toml``): :func:`load_policy`, :func:`parse_text` and
:func:`from_data` give a :class:`~bot.approval_policy.decisions.Policy` or raise :class:`PolicyError`, one line per
problem naming the file, the rule (its number and name) and the field (``rule 2 ('big refunds'): when.amount.gt:
must be a number``). YAML is read with a safe loader that refuses a key given twice."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from bot.approval_policy.decisions import Policy, rule_name
from bot.approval_policy.rules import PolicyFile, Rule
from bot.errors import ConfigError
from bot.settings_values import clipped, key_path, reason_of

MAX_FILE_BYTES = 1_000_000
_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "true/false"}  # what YAML gave, in words


class PolicyError(ConfigError, ValueError):
    """An approval policy file that can't be used: ``problems`` holds one line per problem, each naming the file,
    the rule (its number and name) and the field; ``str()`` is those lines joined by newlines. Also a
    ``ValueError``, so a pydantic validator (``APPROVAL_POLICY`` in :mod:`bot.config`) passes it on whole."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently), with YAML
    1.2's booleans: only ``true`` / ``false`` (any case as YAML 1.2 writes them). PyYAML reads YAML 1.1, where
    ``NO``, ``yes``, ``on`` and ``off`` are booleans too: ``when: {country: NO}`` matched ``False``, never the
    string ``"NO"`` (a break-it pass). A field that is a boolean still takes ``yes`` / ``on`` (pydantic reads them)."""


_BOOL = "tag:yaml.org,2002:bool"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (line {mark.line + 1})", mark
            )
        seen[key] = loader.construct_object(value_node, deep=True)
    return seen


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_text(text: str, *, kind: Literal["yaml", "toml"], source: str = "policy") -> Policy:
    """A policy from ``text`` (YAML or TOML); raises :class:`PolicyError` (each line starts ``source: ``)."""
    try:
        if kind == "toml":
            data: object = tomllib.loads(text)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError([f"{source}: not valid TOML ({exc})"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([f"{source}: not valid YAML ({' '.join(str(exc).split())})"]) from None
    return from_data(data, source=source)


def load_policy(path: str | Path) -> Policy:
    """The policy in the file at ``path`` (``.yaml`` / ``.yml``: YAML; ``.toml``: TOML). Raises
    :class:`PolicyError` with one line per problem."""
    file = Path(path)
    source = str(path)
    suffix = file.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise PolicyError([f"{source}: must be a .yaml, .yml or .toml file"])
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise PolicyError([f"{source}: larger than {MAX_FILE_BYTES} bytes"])
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError([f"{source}: no such file"]) from None
    except IsADirectoryError:
        raise PolicyError([f"{source}: is a directory, not a file"]) from None
    except PermissionError:
        raise PolicyError([f"{source}: can't be read (permission denied)"]) from None
    except UnicodeDecodeError:
        raise PolicyError([f"{source}: is not UTF-8 text"]) from None
    except OSError as exc:  # a symlink loop, a path through a file, a name too long, an I/O error...
        raise PolicyError([f"{source}: can't be read ({exc.strerror or type(exc).__name__})"]) from None
    return parse_text(text, kind="toml" if suffix == ".toml" else "yaml", source=source)


def from_data(data: object, *, source: str = "policy") -> Policy:
    """A policy from parsed data (a mapping with ``rules``). Raises :class:`PolicyError`: one line per problem,
    ``source: rule N ('name'): field.path: reason``."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {_KINDS.get(type(data), type(data).__name__)}"
        raise PolicyError([f"{source}: must be a mapping with rules: [...] (got {got})"])
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_problems(exc, data, source)) from None
    problems = []
    rules = parsed.rules
    names: dict[str, int] = {}
    unnamed = {rule_name(rule, n): n for n, rule in enumerate(rules, start=1) if rule.name is None}
    for number, rule in enumerate(rules, start=1):
        if rule.name is not None:
            if rule.name in names:
                problems.append(
                    f"{source}: rule {number} ({rule.name!r}): name: also the name of rule {names[rule.name]}"
                )
            elif rule.name in unnamed:  # a request records its rule's name: the two would be taken for each other
                problems.append(
                    f"{source}: rule {number} ({rule.name!r}): name: what rule {unnamed[rule.name]} is called, having"
                    " no name of its own (pick another)"
                )
            names.setdefault(rule.name, number)
        if rule.is_default() and number < len(rules):
            problems.append(
                f"{source}: rule {number + 1} ({rule_name(rules[number], number + 1)!r}): can never match:"
                f" rule {number} ({rule_name(rule, number)!r}) matches every call before it"
            )
            break
    last = rules[-1]
    if not last.is_default():
        problems.append(
            f"{source}: rule {len(rules)} ({rule_name(last, len(rules))!r}): the last rule must be the default,"
            ' matching every call: tool: "*" with no when and no requester (add one at the end)'
        )
    if problems:
        raise PolicyError(problems)
    return Policy(rules, source=source)


def _problems(exc: ValidationError, data: Mapping[str, Any], source: str) -> list[str]:
    raw_rules = data.get("rules")
    out: list[str] = []
    for item in exc.errors(include_url=False):
        loc = list(item["loc"])
        prefix = f"{source}: "
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            number = loc[1] + 1
            raw = raw_rules[loc[1]] if isinstance(raw_rules, (list, tuple)) and loc[1] < len(raw_rules) else None
            name = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
            prefix += f"rule {number}" + (f" ({clipped(name)})" if name else "") + ": "
            loc = loc[2:]
        field = key_path([p for p in loc if not _is_union_tag(p)])
        reason = reason_of(item)
        if reason.startswith(tuple(f"{f}: " for f in Rule.model_fields)):  # a rule-wide check naming its field
            field, _, reason = reason.partition(": ")
        line = prefix + (f"{field}: " if field else "") + reason
        if line not in out:
            out.append(line)
    return out


def _is_union_tag(part: object) -> bool:
    """pydantic's loc names the union member it tried (``Escalation``, ``literal['decline']``): not a field."""
    return isinstance(part, str) and part.startswith(("literal[", "function-"))
