"""manifest.yml grants exactly what the code needs: every Web API method the bot calls has its bot scope, every
subscribed event has its scope, no scope is left unused, and DMs work (the App Home Messages tab is on and
writable).

The calls are found by reading the package source under ``bot/`` (``bot/fakeslack/``, ``bot/playground/`` and
``bot/testing/`` talk to fakes and are left out): every attribute named like a method of ``AsyncWebClient``
(``client.chat_postMessage``, ``self.client.reactions_add``, ``.views_open``, ``call = c.reactions_add if add else
c.reactions_remove``), ``api_call("...")``, and the Bolt listener utilities that call the Web API for you
(``say_stream``, ``set_status``...). Scopes come from Slack's method and event reference (docs.slack.dev/reference).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from slack_sdk.web.async_client import AsyncWebClient

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bot"
EXCLUDED = (PACKAGE / "fakeslack", PACKAGE / "playground", PACKAGE / "testing")
MANIFEST = ROOT / "manifest.yml"

HISTORY = ("channels:history", "groups:history", "im:history", "mpim:history")

# Web API method -> the bot scopes it needs: each entry is a group of alternatives, one of which must be granted.
SCOPES: dict[str, tuple[tuple[str, ...], ...]] = {
    "chat.postMessage": (("chat:write",),),
    "chat.update": (("chat:write",),),
    "chat.postEphemeral": (("chat:write",),),
    "chat.delete": (("chat:write",),),
    "chat.getPermalink": (),
    "chat.startStream": (("chat:write",),),
    "chat.appendStream": (("chat:write",),),
    "chat.stopStream": (("chat:write",),),
    "reactions.add": (("reactions:write",),),
    "reactions.remove": (("reactions:write",),),
    "views.open": (),
    "views.update": (),
    "views.push": (),
    "views.publish": (),
    "auth.test": (),
    # The history scope of the conversation's type; the message.* subscriptions below ask for each type's.
    "conversations.replies": (HISTORY,),
    "conversations.history": (HISTORY,),
    "users.info": (("users:read",),),
    "conversations.info": (("channels:read", "groups:read", "im:read", "mpim:read"),),
    "usergroups.users.list": (("usergroups:read",),),
    "usergroups.list": (("usergroups:read",),),
    "conversations.members": (("channels:read", "groups:read", "im:read", "mpim:read"),),
    # Slack takes chat:write for setStatus since 2026-03 (assistant:write for the time being too).
    "assistant.threads.setStatus": (("chat:write", "assistant:write"),),
    "assistant.threads.setTitle": (("assistant:write",),),
    "assistant.threads.setSuggestedPrompts": (("assistant:write",),),
    # Slack: "Authentication token bearing the chat:write scope" (sessions in threads); agent apps get
    # assistant:write with agent_view.
    "agents.sessions.setStatus": (("chat:write",),),
    "agents.sessions.rename": (("chat:write",),),
    # Called with the app-level token (xapp-, scope connections:write), which the manifest does not list.
    "apps.connections.open": (),
}

# Subscribed bot event -> the bot scopes it needs (same shape as SCOPES).
EVENT_SCOPES: dict[str, tuple[tuple[str, ...], ...]] = {
    "app_mention": (("app_mentions:read",),),
    "message.channels": (("channels:history",),),
    "message.groups": (("groups:history",),),
    "message.im": (("im:history",),),
    "message.mpim": (("mpim:history",),),
    "app_home_opened": (),
    "assistant_thread_started": (("assistant:write",),),
    "assistant_thread_context_changed": (("assistant:write",),),
    # The agent messaging experience (features.agent_view): no scope of their own in Slack's event reference.
    "agent_session_stopped": (),
    "app_context_changed": (),
}

# AsyncWebClient helpers that call other methods without naming them in an api_call("...").
CLIENT_HELPERS: dict[str, tuple[str, ...]] = {
    "chat_stream": ("chat.startStream", "chat.appendStream", "chat.stopStream"),
}

# Bolt listener arguments (parameters of a listener, called by their bare name) and classes that call the Web
# API for the code. Not ``say`` (chat.postMessage): the bot names its own helpers so, and chat:write is needed anyway.
BOLT_UTILITIES: dict[str, tuple[str, ...]] = {
    "say_stream": ("chat.startStream", "chat.appendStream", "chat.stopStream"),
    "set_status": ("assistant.threads.setStatus",),
    "set_title": ("assistant.threads.setTitle",),
    "set_suggested_prompts": ("assistant.threads.setSuggestedPrompts",),
    # The default thread context store reads the thread and keeps the context in the first reply's metadata.
    "get_thread_context": ("conversations.replies",),
    "save_thread_context": ("conversations.replies", "chat.update"),
}
BOLT_CLASSES: dict[str, tuple[str, ...]] = {
    # Its default assistant_thread_context_changed handler saves the context (see save_thread_context).
    "AsyncAssistant": ("conversations.replies", "chat.update"),
}

_API_CALL = re.compile(r"""api_call\(\s*(?:#[^\n]*\n\s*)*["']([a-zA-Z.]+)["']""")
_SELF_CALL = re.compile(r"self\.([a-z]+_[A-Za-z_]+)\(")


@functools.cache
def client_method(attr: str) -> tuple[str, ...] | None:
    """The Slack methods that ``AsyncWebClient.<attr>`` calls; None when it is not one of its API methods."""
    if attr in CLIENT_HELPERS:
        return CLIENT_HELPERS[attr]
    if attr.startswith("_") or not callable(vars(AsyncWebClient).get(attr)):
        return None  # not defined by AsyncWebClient itself (api_call, token, session... come from its base)
    source = inspect.getsource(getattr(AsyncWebClient, attr))
    methods = set(_API_CALL.findall(source))
    for helper in _SELF_CALL.findall(source):  # e.g. files_upload_v2 -> files_getUploadURLExternal, ...
        if helper != attr:
            methods.update(client_method(helper) or ())
    assert methods, f"AsyncWebClient.{attr} calls no Web API method we can see: add it to CLIENT_HELPERS"
    return tuple(sorted(methods))


def source_files() -> list[Path]:
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if not any(p.is_relative_to(d) for d in EXCLUDED)]
    assert files, f"no Python files under {PACKAGE}"
    return files


def calls_in(tree: ast.AST, where: str) -> Iterator[tuple[str, int]]:
    """(Slack method, line) for each Web API call made in ``tree`` (the source of ``where``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            for method in client_method(node.attr) or ():
                yield method, node.lineno
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "api_call":
                named = [k.value for k in node.keywords if k.arg == "api_method"]
                arg = node.args[0] if node.args else named[0] if named else None
                if isinstance(arg, ast.Name) and arg.id == "api_method" and where.endswith("web_api.py"):
                    continue  # SharedWebClient.api_call passes every call on (to count it): no method of its own
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
                    f"{where}:{node.lineno}: api_call with a method name that is not a string literal"
                )
                yield arg.value, node.lineno
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            for method in BOLT_CLASSES.get(name, ()):
                yield method, node.lineno
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} & BOLT_UTILITIES.keys()
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id in params:
                    for method in BOLT_UTILITIES[inner.func.id]:
                        yield method, inner.lineno


@functools.cache
def called_methods() -> dict[str, list[str]]:
    """Slack method -> where it is called (``bot/...py:line``)."""
    found: dict[str, list[str]] = {}
    for path in source_files():
        where = str(path.relative_to(ROOT))
        for method, line in calls_in(parse(path.read_text(encoding="utf-8"), where), where):
            found.setdefault(method, []).append(f"{where}:{line}")
    return found


def manifest() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "manifest.yml is not a mapping"
    return data


def bot_scopes(data: dict[str, Any]) -> set[str]:
    return set(data.get("oauth_config", {}).get("scopes", {}).get("bot") or [])


def bot_events(data: dict[str, Any]) -> set[str]:
    return set(data.get("settings", {}).get("event_subscriptions", {}).get("bot_events") or [])


def missing(needs: tuple[tuple[str, ...], ...], granted: set[str]) -> list[str]:
    return [" or ".join(group) for group in needs if not granted.intersection(group)]


def test_the_scan_finds_the_bots_calls() -> None:
    """Guards the scan itself: the bot posts messages, so a scan that finds no chat.postMessage is broken."""
    calls = called_methods()
    assert "chat.postMessage" in calls, f"the source scan found no chat.postMessage; it found {sorted(calls)}"
    fakes = ("bot/fakeslack/", "bot/playground/", "bot/testing/")
    assert not any(w.startswith(fakes) for where in calls.values() for w in where)


def test_every_called_method_is_in_the_scope_table() -> None:
    unknown = {m: where for m, where in called_methods().items() if m not in SCOPES}
    assert not unknown, (
        "Web API methods without a known scope; add each to SCOPES in tests/test_manifest.py with its bot scopes "
        "from https://docs.slack.dev/reference/methods/<method> (and to manifest.yml): "
        + "; ".join(f"{m} (called at {', '.join(where)})" for m, where in sorted(unknown.items()))
    )


def parse(source: str, where: str) -> ast.Module:
    """``ast.parse``, once more after CPython 3.11's spurious "AST constructor recursion depth mismatch"
    SystemError (an interpreter bug seen under the parallel suite, not a fault of the file)."""
    try:
        return ast.parse(source, filename=where)
    except SystemError:
        return ast.parse(source, filename=where)


def test_every_called_method_has_its_scope_in_the_manifest() -> None:
    granted = bot_scopes(manifest())
    lacking = {
        m: (missing(SCOPES[m], granted), where)
        for m, where in called_methods().items()
        if m in SCOPES and missing(SCOPES[m], granted)
    }
    assert not lacking, "manifest.yml lacks scopes the code needs: " + "; ".join(
        f"{m} needs {', '.join(scopes)} (called at {', '.join(where)})"
        for m, (scopes, where) in sorted(lacking.items())
    )


def test_every_subscribed_event_has_its_scope() -> None:
    data = manifest()
    granted, events = bot_scopes(data), bot_events(data)
    unknown = sorted(events - EVENT_SCOPES.keys())
    assert not unknown, f"events without a known scope: {unknown}; add them to EVENT_SCOPES in tests/test_manifest.py"
    lacking = {e: missing(EVENT_SCOPES[e], granted) for e in events if missing(EVENT_SCOPES[e], granted)}
    assert not lacking, f"manifest.yml subscribes to events without their scopes: {lacking}"


def test_no_scope_is_unused() -> None:
    data = manifest()
    needs = [SCOPES.get(m, ()) for m in called_methods()] + [EVENT_SCOPES.get(e, ()) for e in bot_events(data)]
    used = {scope for need in needs for group in need for scope in group}
    unused = sorted(bot_scopes(data) - used)
    assert not unused, (
        f"manifest.yml asks for scopes no called method or subscribed event needs: {unused} "
        f"(called: {sorted(called_methods())}; events: {sorted(bot_events(data))})"
    )


def test_dms_work() -> None:
    """The README's DMs: people write in the App Home Messages tab, and the bot posts there (chat.postMessage to
    a user id); both need the tab enabled and writable, and message.im delivers what people write."""
    data = manifest()
    app_home = data.get("features", {}).get("app_home") or {}
    assert app_home.get("messages_tab_enabled") is True, "features.app_home.messages_tab_enabled must be true"
    assert app_home.get("messages_tab_read_only_enabled") is False, (
        "features.app_home.messages_tab_read_only_enabled must be false (people write to the bot there)"
    )
    assert "message.im" in bot_events(data)


def test_group_dm_thread_replies_are_delivered() -> None:
    """Replies in a question's thread answer it in channels, private channels and group DMs alike."""
    events = bot_events(manifest())
    assert {"app_mention", "message.channels", "message.groups", "message.mpim"} <= events


_LISTENED = re.compile(r"""app\.event\(\s*["']([a-z_]+)["']""")
ASSISTANT_EVENTS = {"assistant_thread_started", "assistant_thread_context_changed", "message.im"}


def listened_events() -> set[str]:
    """The events the bot's listeners take: ``app.event("...")`` (``message`` as any ``message.*``), and those
    Bolt's ``AsyncAssistant`` (or a subclass of it) routes (assistant thread started / context changed, messages in
    the DM)."""
    events: set[str] = set()
    for path in source_files():
        text = path.read_text(encoding="utf-8")
        events |= set(_LISTENED.findall(text))
        if "AsyncAssistant(" in text or "(AsyncAssistant)" in text:  # Bolt's, made or subclassed (PaneAssistant)
            events |= ASSISTANT_EVENTS
    return events


PANE_ONLY = {"assistant_thread_started", "assistant_thread_context_changed"}
"""Events Slack sends only to an ``assistant_view`` app (``SLACK_VIEW=assistant``; docs/slack-setup.md says what to
put back in the manifest for it); the manifest declares ``agent_view``."""


def test_every_event_listened_to_is_subscribed() -> None:
    subscribed = bot_events(manifest())
    listened = listened_events()
    assert {"app_mention", "message", "app_home_opened", "agent_session_stopped"} | ASSISTANT_EVENTS <= listened
    any_message = any(s.startswith("message.") for s in subscribed)
    lacking = sorted(e for e in listened - PANE_ONLY if e not in subscribed and not (e == "message" and any_message))
    assert not lacking, f"manifest.yml does not subscribe to events the bot listens to: {lacking}"


def test_the_agent_view_is_declared_with_what_sessions_and_stop_need() -> None:
    """Slack's agent messaging experience (docs.slack.dev ai/migrating-to-agent-messaging): features.agent_view with
    its agent_description instead of assistant_view; Stop needs the agent_session_stopped subscription (else
    setStatus warns missing_agent_session_stopped_event_subscription); the Messages tab's app_home_opened and
    app_context_changed replace the pane's events; thread sessions need chat:write."""
    data = manifest()
    features = data.get("features", {})
    view = features.get("agent_view") or {}
    assert view.get("agent_description"), "features.agent_view.agent_description must be set"
    assert "assistant_view" not in features, "agent_view replaces assistant_view: one of them, not both"
    assert {"agent_session_stopped", "app_context_changed", "app_home_opened", "message.im"} <= bot_events(data)
    assert {"chat:write", "assistant:write"} <= bot_scopes(data)
