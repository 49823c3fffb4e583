"""Optional OpenTelemetry traces, configured from the SDK's standard environment variables.

``pip install 'slack-ask-user[otel]'`` brings ``opentelemetry-sdk`` and the OTLP/HTTP exporter. Then, at start-up
(:func:`configure_tracing`, called by ``python -m bot``), when ``OTEL_TRACES_EXPORTER`` or an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set:

- a ``TracerProvider`` is set up with the resource of ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` and
  the sampler of ``OTEL_TRACES_SAMPLER`` (the SDK reads both itself);
- each exporter named in ``OTEL_TRACES_EXPORTER`` (comma-separated; default ``otlp``; ``none``: no traces) is
  loaded from the ``opentelemetry_traces_exporter`` entry points (as the SDK's own auto-configuration does:
  ``otlp`` / ``otlp_proto_http`` from the exporter package, ``console`` from the SDK), built with no arguments
  (so it reads its own ``OTEL_EXPORTER_OTLP_*`` variables) and fed by a ``BatchSpanProcessor``.

A process already given a provider (e.g. run under ``opentelemetry-instrument``) is left as it is. Without the
SDK nothing is set up and the bot's spans cost nothing (:mod:`bot.ops.observe`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from importlib.util import find_spec
from typing import Any

from bot.errors import ConfigError

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters ``env`` asks for: ``OTEL_TRACES_EXPORTER``'s names, ``["otlp"]`` when only an OTLP endpoint
    is set, ``[]`` when tracing is not configured (or ``none``)."""
    raw = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:
        return ["otlp"] if any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES) else []
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    return [] if "none" in names else names


def configure_tracing(env: Mapping[str, str] | None = None) -> Any | None:
    """Set up the SDK's tracer provider from ``env`` (default: the process environment); returns it, or None when
    tracing is not configured, the SDK is not installed (one warning) or a provider is already set. Raises
    ``ConfigError`` naming an exporter that is not installed."""
    env = os.environ if env is None else env
    names = exporter_names(env)
    if not names:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_TRACES_EXPORTER / OTLP endpoint set but the OpenTelemetry SDK is not installed: no traces "
            "(pip install 'slack-ask-user[otel]')"
        )
        return None
    classes = [_exporter_class(name) for name in names]  # a name not installed is an error in any case
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # configured by someone else (e.g. opentelemetry-instrument)
    exporters = [exporter_class() for exporter_class in classes]
    provider = TracerProvider(resource=Resource.create())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing: exporting spans with %s", ", ".join(names))
    return provider


def exporter_problem(value: str) -> str | None:
    """Why ``OTEL_TRACES_EXPORTER=value`` can't be set up: a name no installed span exporter has (only with the
    OpenTelemetry SDK installed: without it tracing is off, with a warning), else None. Checked with the other
    settings (:class:`bot.config.Settings`), so it is told in the same round as theirs."""
    if find_spec("opentelemetry.sdk") is None:
        return None
    for name in exporter_names({"OTEL_TRACES_EXPORTER": value}):
        if not list(entry_points(group="opentelemetry_traces_exporter", name=name)):
            return (
                f"no span exporter {name!r} is installed "
                "(otlp: pip install 'slack-ask-user[otel]'; console comes with the SDK)"
            )
    return None


def _exporter_class(name: str) -> Callable[[], Any]:
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        raise ConfigError(f"OTEL_TRACES_EXPORTER: {exporter_problem(name) or f'no span exporter {name!r}'}")
    loaded: Callable[[], Any] = found[0].load()
    return loaded


def shutdown_tracing(provider: Any | None) -> None:
    """Flush and stop ``provider`` (what :func:`configure_tracing` returned), if any."""
    if provider is not None:
        provider.shutdown()
