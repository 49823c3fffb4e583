"""Bring your own agent: ``AGENT=mypkg.agents:build`` (or ``python -m bot serve --agent mypkg.agents:build``) names a
factory, ``module:attribute`` as uvicorn does, called as ``build(model=..., store=...)`` with the bot's configured
model and run store, and returning an :class:`~bot.agent.Agent`. A factory that takes a ``limits`` parameter is
also given the deployment's :class:`~bot.agent.run_limits.RunLimits`; either way they are applied to the agent it
returns (:meth:`~bot.agent.Agent.with_limits`): the deployment's limits apply to every agent.

The module is imported as Python finds it; when it is not found there, the current directory is put on the import
path (``sys.path``) and it is tried again, as uvicorn's ``--app-dir`` (default ``.``) does: ``python -m bot --agent
my_agent:build`` works from the folder holding ``my_agent.py`` however Python was started (``-P``,
``PYTHONSAFEPATH``, a launcher that does not add it).

A framework's agent is accepted too when the caller passes ``adopt`` (the Slack bot passes
:func:`bot.frameworks.adopt`): ``AGENT`` may name such an object itself (a ``pydantic_ai.Agent``, an
``agents.Agent``, a compiled LangGraph graph) or a factory returning one; ``adopt`` wraps it as an ``Agent``.

Every problem is one :class:`~bot.errors.ConfigError` line, raised at start-up: a malformed string, a module that
can't be imported (and why), a missing attribute, something not callable, a factory that raises, or a result that
is not an ``Agent``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from bot.agent.agent import Agent
from bot.agent.model import ChatModel
from bot.agent.run_limits import RunLimits
from bot.agent.store import RunStore
from bot.errors import ConfigError

SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


Adopt = Callable[[Any], Agent | None]
"""``adopt(obj)``: ``obj`` (another framework's agent) as an :class:`Agent`, or None when it is not one."""


def load_agent(
    spec: str, *, model: ChatModel, store: RunStore, limits: RunLimits | None = None, adopt: Adopt | None = None
) -> Agent:
    """Import ``spec`` (``module:attribute``) and call it as ``factory(model=model, store=store)`` (plus
    ``limits=limits`` when the factory takes a ``limits`` parameter); ``limits``, when given, are then applied to the
    agent with :meth:`~bot.agent.Agent.with_limits`. ``adopt``: turns a framework's agent (the attribute itself, or
    what the factory returns) into an ``Agent`` (see the module docstring). Raises ``ConfigError`` (one line) for
    every way that can fail."""
    if not SPEC.fullmatch(spec):
        raise ConfigError(f"AGENT {spec!r} must look like module:attribute, e.g. mypkg.agents:build")
    module_name, attribute = spec.split(":", 1)
    try:
        target: Any = _import(module_name)
    except Exception as exc:  # an import runs the module: anything can happen there
        raise ConfigError(
            f"AGENT {spec!r}: cannot import {module_name} ({type(exc).__name__}: {exc}){_extra_hint(exc)}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"AGENT {spec!r}: {module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    adopted = adopt(target) if adopt is not None else None
    if adopted is not None:
        return adopted.with_limits(limits) if limits is not None else adopted
    if not callable(target):
        raise ConfigError(f"AGENT {spec!r}: {attribute} is not callable (a factory build(model=..., store=...))")
    extra = {"limits": limits} if limits is not None and _takes_limits(target) else {}
    try:
        agent = target(model=model, store=store, **extra)
    except Exception as exc:
        raise ConfigError(f"AGENT {spec!r}: the factory raised {type(exc).__name__}: {exc}{_extra_hint(exc)}") from None
    if not isinstance(agent, Agent) and adopt is not None:
        agent = adopt(agent) or agent
    if not isinstance(agent, Agent):
        raise ConfigError(f"AGENT {spec!r}: the factory returned {type(agent).__name__}, not a bot.agent.Agent")
    return agent.with_limits(limits) if limits is not None else agent


FRAMEWORK_EXTRAS = {
    "pydantic_ai": "pydantic-ai",
    "agents": "openai-agents",
    "langgraph": "langgraph",
    "langchain_core": "langgraph",
}
"""The package extra (pyproject.toml's ``[project.optional-dependencies]``) that installs each agent framework, by
the top-level module a missing one fails to import."""


def _extra_hint(exc: BaseException) -> str:
    """For a framework not installed (``ModuleNotFoundError`` of one of :data:`FRAMEWORK_EXTRAS`' modules), how to
    install it; else ``""``."""
    missing = exc.name.split(".", 1)[0] if isinstance(exc, ModuleNotFoundError) and exc.name else ""
    extra = FRAMEWORK_EXTRAS.get(missing)
    return f"; install its framework with {sys.executable} -m pip install -e '.[{extra}]'" if extra else ""


def _takes_limits(factory: Any) -> bool:
    """Whether ``factory`` has a ``limits`` parameter (a factory whose signature can't be read has none)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "limits" in parameters


def _import(module_name: str) -> Any:
    """``importlib.import_module(module_name)``; when the module itself (not something it imports) is not found,
    again with the current directory first on ``sys.path``."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".", 1)[0]
        here = os.getcwd()
        if exc.name not in (top, module_name) or here in sys.path:
            raise
    sys.path.insert(0, here)
    importlib.invalidate_caches()
    return importlib.import_module(module_name)
