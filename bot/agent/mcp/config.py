"""The MCP servers file (``MCP_CONFIG``) and the tool names the model sees; no MCP SDK needed here.

The file is the format MCP clients share (Claude Desktop, Cursor, ...)::

    {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"},
                   "requireApproval": ["create_*", "delete_*"]},
        "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                 "requireApproval": true}
    }}

- ``command`` (with optional ``args``, ``env``, ``cwd``): a stdio server, started as a subprocess. It gets the
  variables of ``env`` and a few safe ones (``PATH``, ``HOME``, ...), not the bot's environment (so not its
  tokens or keys).
- ``url`` (with optional ``headers``): a streamable HTTP server.
- ``requireApproval``: ``true`` (every tool of the server), ``false`` (the default) or a list of ``fnmatch``
  patterns on the server's tool names (``"delete_*"``); a matching call waits for a person's OK.
- ``protocol``: ``auto`` (the default: the newest protocol generation the server speaks, else the older
  one) or ``legacy`` (the initialize handshake only). It decides how a server's questions (elicitation) reach
  the bot; see :mod:`bot.agent.mcp.elicitation`.
- ``disabled: true`` skips a server. ``type`` may say ``stdio`` or ``http`` / ``streamable-http`` (SSE servers are
  not supported). Other keys (other clients' settings) are ignored.
- ``${NAME}`` and ``${NAME:-default}`` in ``command``, ``args``, ``env``, ``cwd``, ``url`` and ``headers`` are
  replaced from the environment, so the file need not hold secrets; an unset variable without a default is an
  error.

Secrets: every secret-bearing value of the file reaches the log redactor (:meth:`McpServerConfig.secret_values`,
gathered by :meth:`bot.config.Settings.secret_values`): each ``${NAME}`` expansion wherever it is used, ``env`` and
``headers`` values (and a header's credential after its scheme, ``Bearer <token>``), ``args``, and a ``url``'s
path, query, each query value and password (its scheme and host stay readable in logs).

Tool names: each server's tools are offered as ``server__tool`` (:func:`tool_names`), made to fit the model API's
``^[a-zA-Z0-9_-]{1,64}$``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from bot.errors import ConfigError

MODEL_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_TOOL_NAME = 64
SEPARATOR = "__"
HASH_CHARS = 8
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_STDIO_TYPES = ("stdio",)
_HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


class McpConfigError(ConfigError):
    """The MCP servers file is missing, not JSON, or malformed; the message is one line naming each problem."""


@dataclass(frozen=True, kw_only=True)
class StdioServer:
    """A server started as a subprocess and spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True, kw_only=True)
class HttpServer:
    """A streamable HTTP server."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class McpServerConfig:
    """One entry of ``mcpServers``. ``require_approval``: ``True``, ``False`` or ``fnmatch`` patterns."""

    name: str
    transport: StdioServer | HttpServer
    require_approval: bool | tuple[str, ...] = False
    protocol: str = "auto"  # "auto" or "legacy" (the SDK's ``Client(mode=...)``)
    expanded: tuple[str, ...] = field(default=(), repr=False, compare=False)  # the ${NAME} values it took

    def secret_values(self) -> list[str]:
        """The values of this entry that may carry a secret, for the log redactor (see the module docstring):
        ``${NAME}`` expansions, ``env`` / ``headers`` values (and a header's credential after its scheme),
        ``args``, and the ``url``'s path, query, query values and password."""
        values = list(self.expanded)
        transport = self.transport
        if isinstance(transport, StdioServer):
            values += [*transport.args, *transport.env.values()]
        else:
            for header in transport.headers.values():
                values += [header, header.strip().partition(" ")[2].strip()]
            parts = urlsplit(transport.url)
            values += [parts.path, parts.query, parts.fragment, parts.password or ""]
            values += [parts.path + ("?" + parts.query if parts.query else "")]
            values += [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
        return [v for v in dict.fromkeys(values) if v]

    def needs_approval(self, tool_name: str) -> bool:
        """Whether calls of this server's tool ``tool_name`` (its MCP name) wait for a person's OK."""
        if isinstance(self.require_approval, bool):
            return self.require_approval
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.require_approval)


def load_mcp_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> list[McpServerConfig]:
    """The servers of the file at ``path`` (disabled ones left out), ``${NAME}`` taken from ``environ`` (default:
    ``os.environ``). Raises :class:`McpConfigError` with a one-line reason."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError("no such file") from None
    except IsADirectoryError:
        raise McpConfigError("is a directory, not a file") from None
    except UnicodeDecodeError:
        raise McpConfigError("is not UTF-8 text") from None
    except OSError as exc:
        raise McpConfigError(f"can't be read: {exc.strerror or type(exc).__name__}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_mcp_config(data, environ=environ)


def parse_mcp_config(data: object, *, environ: Mapping[str, str] | None = None) -> list[McpServerConfig]:
    """The servers of an already parsed file (see the module docstring). Raises :class:`McpConfigError` naming
    every problem on one line."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError('must be a JSON object with an "mcpServers" object, e.g. {"mcpServers": {}}')
    servers: list[McpServerConfig] = []
    for name, entry in data["mcpServers"].items():
        where = f"mcpServers.{name}"
        if not name.strip():
            problems.append(f"{where}: a server needs a non-blank name")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be an object")
            continue
        if entry.get("disabled") is True:
            continue
        reader = _Reader(where, entry, env, problems)
        server = reader.server(name)
        if server is not None:
            servers.append(server)
    if problems:
        raise McpConfigError("; ".join(problems))
    return servers


class _Reader:
    """Reads one server entry, appending its problems to ``problems``."""

    def __init__(self, where: str, entry: dict[str, Any], env: Mapping[str, str], problems: list[str]) -> None:
        self.where, self.entry, self.env, self.problems = where, entry, env, problems
        self.expanded: list[str] = []  # every ${NAME} value substituted: secrets to the log redactor

    def server(self, name: str) -> McpServerConfig | None:
        before = len(self.problems)
        kind = self.entry.get("type")
        has_command, has_url = "command" in self.entry, "url" in self.entry
        transport: StdioServer | HttpServer | None = None
        if kind == "sse":
            self.fail("type", "SSE servers are not supported; use the server's streamable HTTP endpoint")
        elif kind is not None and kind not in _STDIO_TYPES + _HTTP_TYPES:
            self.fail("type", "must be stdio or http (streamable HTTP)")
        elif has_command and has_url:
            self.fail("", 'has both "command" and "url"; give one')
        elif has_command and kind not in _HTTP_TYPES:
            transport = self.stdio()
        elif has_url and kind not in _STDIO_TYPES:
            transport = self.http()
        else:
            self.fail("", 'needs "command" (a stdio server) or "url" (a streamable HTTP server)')
        approval = self.approval()
        protocol = self.entry.get("protocol", "auto")
        if protocol not in ("auto", "legacy"):
            self.fail("protocol", 'must be "auto" or "legacy"')
        if transport is None or len(self.problems) > before:
            return None
        return McpServerConfig(
            name=name,
            transport=transport,
            require_approval=approval,
            protocol=protocol,
            expanded=tuple(self.expanded),
        )

    def fail(self, key: str, reason: str) -> None:
        self.problems.append(f"{self.where}{'.' + key if key else ''}: {reason}")

    def text(self, key: str, value: object) -> str | None:
        if not isinstance(value, str):
            self.fail(key, "must be a string")
            return None
        missing: list[str] = []

        def substitute(match: re.Match[str]) -> str:
            variable, default = match.group(1), match.group(2)
            found = self.env.get(variable)
            if found is None and default is None:
                missing.append(variable)
                return ""
            value = found if found is not None else default
            self.expanded.append(value)
            return value

        expanded = _VARIABLE.sub(substitute, value)
        if missing:
            self.fail(key, f"environment variable {missing[0]} is not set")
            return None
        return expanded

    def text_map(self, key: str) -> dict[str, str]:
        raw = self.entry.get(key, {})
        if not isinstance(raw, dict):
            self.fail(key, "must be an object of strings")
            return {}
        values = {name: self.text(f"{key}.{name}", value) for name, value in raw.items()}
        return {name: value for name, value in values.items() if value is not None}

    def stdio(self) -> StdioServer | None:
        command = self.text("command", self.entry["command"])
        if command is not None and not command.strip():
            self.fail("command", "must not be blank")
        raw_args = self.entry.get("args", [])
        if not isinstance(raw_args, list):
            self.fail("args", "must be a list of strings")
            raw_args = []
        args = [self.text(f"args[{i}]", arg) for i, arg in enumerate(raw_args)]
        env = self.text_map("env")
        cwd = self.text("cwd", self.entry["cwd"]) if self.entry.get("cwd") is not None else None
        if command is None or not command.strip() or any(arg is None for arg in args):
            return None
        return StdioServer(command=command, args=tuple(a for a in args if a is not None), env=env, cwd=cwd)

    def http(self) -> HttpServer | None:
        url = self.text("url", self.entry["url"])
        headers = self.text_map("headers")
        if url is None:
            return None
        parts = urlsplit(url.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            self.fail("url", "must be an http:// or https:// URL with a host")
            return None
        return HttpServer(url=url.strip(), headers=headers)

    def approval(self) -> bool | tuple[str, ...]:
        value = self.entry.get("requireApproval", False)
        if isinstance(value, bool):
            return value
        if isinstance(value, list) and all(isinstance(p, str) and p for p in value):
            return tuple(value)
        self.fail("requireApproval", 'must be true, false or a list of tool name patterns, e.g. ["delete_*"]')
        return False


def tool_names(pairs: Iterable[tuple[str, str]], *, reserved: Collection[str] = ()) -> dict[tuple[str, str], str]:
    """The model-facing name of each ``(server, tool)`` pair: ``server__tool`` when that is a valid name
    (``^[a-zA-Z0-9_-]{1,64}$``), unique among the pairs and not in ``reserved``; otherwise the name with every
    other character replaced by ``_``, cut to fit, and ``_`` plus a hash of the exact pair added.

    Deterministic: a pair's name depends only on the pair, except when its plain name collides (then every pair
    of that collision gets the hashed form). Never two pairs with one name, never a reserved name.
    """
    unique = sorted(set(pairs))
    taken = set(reserved)
    plain: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for server, tool in unique:
        plain[f"{server}{SEPARATOR}{tool}"].append((server, tool))
    names: dict[tuple[str, str], str] = {}
    hashed: list[tuple[str, str]] = []
    for name, members in plain.items():
        if len(members) == 1 and MODEL_TOOL_NAME.fullmatch(name) and name not in taken:
            names[members[0]] = name
        else:
            hashed.extend(members)
    used = taken | set(names.values())
    for server, tool in sorted(hashed):
        candidates = (_hashed_name(server, tool, length) for length in (HASH_CHARS, 16, 24, 32))
        found = next((c for c in candidates if c not in used), None)
        counter = 2
        while found is None or found in used:  # only a crafted reserved name or a sha256 clash gets here
            found = _hashed_name(server, tool, 32)[: MAX_TOOL_NAME - 6] + f"_{counter}"
            counter += 1
        names[(server, tool)] = found
        used.add(found)
    return names


def _hashed_name(server: str, tool: str, hash_chars: int) -> str:
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:hash_chars]
    readable = _NOT_ALLOWED.sub("_", f"{server}{SEPARATOR}{tool}")[: MAX_TOOL_NAME - hash_chars - 1]
    return f"{readable}_{digest}"
