"""Measuring the work of a run where it happens: model turns, tool calls, Slack Web API calls and runs in flight.

Each helper moves its metrics (:mod:`bot.ops.metrics`) and, when an OpenTelemetry SDK is configured (a tracer
provider is set: :func:`bot.ops.tracing.configure_tracing`, or the ``opentelemetry-instrument`` wrapper), records
a span. Only ``opentelemetry-api`` is used here; without a configured SDK no span object is made at all (one
``isinstance`` per call), so the cost per request is the metric updates alone.

Spans (all carry ``askbot.run_id`` when known; never an argument, a text, a token or a payload):

- ``askbot.run`` - one segment of a run driven by this process (``askbot.run_id``);
- ``askbot.model_turn`` - one model turn (``askbot.error_kind`` when it failed);
- ``askbot.tool_call`` - one tool call (``askbot.tool``, ``askbot.tool_call_id``);
- ``slack <method>`` - one Web API call (``slack.method``, ``slack.error`` when it failed); its run id comes from
  the logging context (:mod:`bot.logs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from bot.errors import ModelCallFailed
from bot.logs import current_log_context
from bot.ops import metrics as m

try:
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - opentelemetry-api comes with the mcp SDK; the [otel] extra names it
    _trace = None  # type: ignore[assignment]

TRACER_NAME = "askbot"
_slack_calls: dict[str, Any] = {}  # method -> its askbot_slack_api_calls_total child (labels() once per method)


_tracers: dict[int, Any] = {}  # id(provider) -> its tracer (the global provider is set once a process)


def _tracer() -> Any | None:
    """The tracer when an SDK's provider is set, else None (the API's proxy provider would only make no-op spans)."""
    if _trace is None:
        return None
    provider = _trace.get_tracer_provider()
    tracer = _tracers.get(id(provider))
    if tracer is None:
        if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
            return None
        tracer = _tracers[id(provider)] = provider.get_tracer(TRACER_NAME)
    return tracer


@contextlib.contextmanager
def _span(name: str, attributes: dict[str, str], *, errors: bool = True) -> Iterator[Any | None]:
    """A span, or None without a configured SDK. ``errors``: an exception escaping marks it failed (not for a tool
    call, whose suspension is an exception and whose errors become the model's tool results)."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=errors, set_status_on_exception=errors
    ) as span:
        yield span


def _failed(span: Any | None, key: str, value: str) -> None:
    if span is not None and _trace is not None:
        span.set_attribute(key, value)
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, value))


@contextlib.asynccontextmanager
async def run_segment(run_id: str) -> AsyncIterator[None]:
    """A run being driven here: ``askbot_runs_in_flight`` up for its duration, and its ``askbot.run`` span."""
    m.RUNS_IN_FLIGHT.inc()
    try:
        with _span("askbot.run", {"askbot.run_id": run_id}):
            yield
    finally:
        m.RUNS_IN_FLIGHT.dec()


@contextlib.contextmanager
def model_turn(run_id: str) -> Iterator[None]:
    """One model turn: its duration (``askbot_model_turn_seconds``), its failure by ``ModelCallFailed.kind``."""
    start = m.monotonic()
    with _span("askbot.model_turn", {"askbot.run_id": run_id}) as span:
        try:
            yield
        except ModelCallFailed as exc:
            m.MODEL_ERRORS.labels(exc.kind).inc()
            _failed(span, "askbot.error_kind", exc.kind)
            raise
        finally:
            m.MODEL_TURN.observe(m.monotonic() - start)


def turn_ended(kind: str) -> None:
    """A model turn ended for another reason than ``stop`` (``kind``: an :data:`bot.agent.model.endings.EndingKind`)."""
    m.MODEL_TURN_ENDINGS.labels(kind).inc()


def request_refused(exc: ModelCallFailed) -> None:
    """A model request was not sent: ``exc`` says why (e.g. ``RequestOverBudget``), counted by its ``kind``."""
    m.MODEL_ERRORS.labels(exc.kind).inc()


def tool_result_cut() -> None:
    """A tool result was cut to its size bound before the model saw it."""
    m.TOOL_RESULTS_CUT.inc()


@contextlib.contextmanager
def tool_call(run_id: str, *, tool: str, tool_call_id: str) -> Iterator[None]:
    """One tool call's span (no metric of its own: tool outcomes reach the model, not the operator)."""
    attributes = {"askbot.run_id": run_id, "askbot.tool": tool, "askbot.tool_call_id": tool_call_id}
    with _span("askbot.tool_call", attributes, errors=False):
        yield


@contextlib.contextmanager
def slack_call(method: str) -> Iterator[None]:
    """One Web API call of ``method`` (e.g. ``chat.postMessage``): counted, and its failure by Slack's ``error``
    string (``SlackApiError``) or the exception's type (a connection error); never the token or the payload."""
    calls = _slack_calls.get(method)
    if calls is None:  # the first call of this method: its label checked once
        method = m.label_value(method)
        calls = _slack_calls[method] = m.SLACK_CALLS.labels(method)
    calls.inc()
    span = None
    tracer = _tracer()
    if tracer is not None:
        attributes = {"slack.method": method}
        run_id = current_log_context().get("run_id")
        if run_id:
            attributes["askbot.run_id"] = run_id
        span = tracer.start_span(f"slack {method}", attributes=attributes)
    try:
        if span is None:
            yield
        else:  # the error is set below, by its code only (an exception's text may quote a payload)
            with _trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield
    except Exception as exc:
        error = slack_error_code(exc)
        m.SLACK_ERRORS.labels(m.label_value(method), m.error_label(error)).inc()  # a bounded set of series
        _failed(span, "slack.error", error)  # a span is no series: its error as it was
        raise
    finally:
        if span is not None:
            span.end()


def slack_error_code(exc: BaseException) -> str:
    """Slack's ``error`` of a refused call (``invalid_auth``, ``ratelimited``...), else the exception's type name;
    made safe as a label value (:func:`bot.ops.metrics.label_value`; the metric bounds the set itself with
    :func:`bot.ops.metrics.error_label`)."""
    response = getattr(exc, "response", None)
    error = None
    if response is not None:
        with contextlib.suppress(Exception):
            error = response.get("error")
    if isinstance(error, str) and error:
        return m.label_value(error)
    return m.label_value(type(exc).__name__.lower())
