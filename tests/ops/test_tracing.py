"""OpenTelemetry traces: with an SDK configured, a run gives spans of its model turns, tool calls and Slack calls, each
naming the run and carrying no secret; ``OTEL_*`` variables set the SDK up at start-up."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot.errors import ConfigError
from bot.ops.tracing import configure_tracing, exporter_names
from bot.testing.slack_scenarios import ALICE, GENERAL, ask, text_is, thread_run_id
from tests.slack.test_serve_process import complete_env, error_lines, run_bot

ROOT = Path(__file__).resolve().parent.parent.parent


class Recording(SpanProcessor):
    """Passes ended spans to an in-memory exporter while a test records (the global provider is set once a
    process, so it stays; the other tests' spans are dropped)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.inner = SimpleSpanProcessor(self.exporter)
        self.on = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


_recording = Recording()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert isinstance(provider, TracerProvider)
    if _recording not in provider._active_span_processor._span_processors:
        provider.add_span_processor(_recording)
    _recording.exporter.clear()
    _recording.on = True
    yield _recording.exporter
    _recording.on = False


async def test_a_run_traces_its_model_turns_tool_calls_and_slack_calls(
    fake_redis: aioredis.Redis, harness: Any, spans: InMemorySpanExporter, slack_secrets: tuple[str, str]
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.settle()
        run_id = await thread_run_id(h, thread)
    finished = spans.get_finished_spans()
    of_run = [s for s in finished if (s.attributes or {}).get("askbot.run_id") == run_id]
    names = [s.name for s in of_run]
    assert names.count("askbot.model_turn") == 2  # asked, then the reply after the answer
    assert names.count("askbot.run") == 2  # the segment that asked, the one the answer resumed
    tools = [s for s in of_run if s.name == "askbot.tool_call"]
    assert tools and {(s.attributes or {}).get("askbot.tool") for s in tools} == {"ask_user"}
    assert "slack chat.postMessage" in names and "slack chat.update" in names
    runs = {s.context.span_id for s in of_run if s.name == "askbot.run"}
    assert all(s.parent is not None and s.parent.span_id in runs for s in of_run if s.name == "askbot.model_turn")
    secrets = (*slack_secrets, "sk-test")
    for span in finished:
        shown = span.name + repr(dict(span.attributes or {})) + repr([e.attributes for e in span.events])
        assert not any(secret in shown for secret in secrets), span.name


async def test_a_refused_slack_call_is_a_failed_span_with_slack_s_error(
    fake_redis: aioredis.Redis, harness: Any, spans: InMemorySpanExporter
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        h.ws.fake.fail_next("chat.update", "message_not_found")
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.settle()
    [failed] = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("slack.error")]
    assert failed.name == "slack chat.update" and failed.attributes is not None
    assert failed.attributes["slack.error"] == "message_not_found"
    assert failed.status.status_code == trace.StatusCode.ERROR


def test_the_exporters_come_from_the_standard_variables() -> None:
    assert exporter_names({}) == []
    assert exporter_names({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) == ["otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "console, otlp"}) == ["console", "otlp"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == []
    assert configure_tracing({}) is None
    with pytest.raises(ConfigError, match="no span exporter 'nope' is installed"):
        configure_tracing({"OTEL_TRACES_EXPORTER": "nope"})


SCRIPT = """
from bot.ops import observe
from bot.ops.tracing import configure_tracing, shutdown_tracing
provider = configure_tracing()
with observe.tool_call("run_env", tool="lookup", tool_call_id="c1"):
    pass
shutdown_tracing(provider)
"""


def test_the_sdk_is_set_up_from_otel_variables_at_start_up() -> None:
    env = {"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "askbot-test"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert '"name": "askbot.tool_call"' in out.stdout and '"askbot.run_id": "run_env"' in out.stdout
    assert '"service.name": "askbot-test"' in out.stdout


def test_an_exporter_that_is_not_installed_is_a_start_up_error() -> None:
    [line] = error_lines(run_bot("serve", env=complete_env(OTEL_TRACES_EXPORTER="zipkin"), timeout=30))
    assert line.startswith("error: OTEL_TRACES_EXPORTER: no span exporter 'zipkin' is installed")


def test_an_exporter_that_is_not_installed_is_told_with_the_other_settings_in_one_round() -> None:
    """Found by a break-it review: it was told alone (checked after the settings), so a set-up with another problem
    took two rounds. Now with a bad value and with a setting not set."""
    env = complete_env(OTEL_TRACES_EXPORTER="zipkin", ASK_TTL_SECONDS="soon")
    del env["OPENAI_API_KEY"]
    lines = error_lines(run_bot("serve", env=env, timeout=30))
    assert any(line.startswith("error: OTEL_TRACES_EXPORTER: no span exporter 'zipkin'") for line in lines), lines
    assert any(line.startswith("error: ASK_TTL_SECONDS") for line in lines), lines
    assert any(line.startswith("error: not set: OPENAI_API_KEY") for line in lines), lines


def test_a_span_keeps_slack_s_error_when_the_metric_s_label_set_is_full() -> None:
    """The metric's error labels are a bounded set; a span is no series, so it keeps the error Slack gave."""
    from slack_sdk.errors import SlackApiError

    from bot.ops import metrics
    from bot.ops.observe import slack_error_code

    for i in range(metrics.ERROR_LABELS_MAX):
        metrics.error_label(f"seen_{i}")
    refused = SlackApiError("refused", {"ok": False, "error": "message_not_found"})
    assert slack_error_code(refused) == "message_not_found"
    assert metrics.error_label("message_not_found") == metrics.OTHER
