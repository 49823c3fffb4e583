"""Every Prometheus metric of the bot, defined here once (``prometheus-client``), and their exposition.

The code that decides an event counts it at that one place (:mod:`bot.ops.audit` for the decisions on questions
and approvals, :mod:`bot.ops.observe` for model turns, tool calls and Slack calls); nothing here does I/O on the
hot path: an increment is a lock and an addition in memory (or in an mmap'd file in multiprocess mode).

Metrics (names carry the ``askbot_`` prefix, base units; counters end in ``_total``):

- ``askbot_questions_asked_total{mode}``: questions a run asked; ``mode`` ``free_form`` / ``single_select`` /
  ``multi_select`` / ``form`` (an MCP server's form);
- ``askbot_questions_answered_total{mode}``: answers taken (the claim won);
- ``askbot_questions_expired_total{kind}``: questions (``kind="question"``) or approvals (``"approval"``) whose
  deadline passed unanswered;
- ``askbot_questions_withdrawn_total{kind}``: withdrawn (cancelled) ones;
- ``askbot_answers_refused_total{kind,reason}``: answers or decisions refused: ``not_allowed`` (who may answer or
  approve), ``expired`` (too late), ``closed`` (the run no longer waits for it);
- ``askbot_answers_duplicate_total{kind}``: refused as answered already (a double click, a second person);
- ``askbot_time_to_answer_seconds{kind}`` (histogram): from asked to answered / decided;
- ``askbot_approvals_requested_total``; ``askbot_approvals_total{decision}``: ``approved`` / ``declined``;
- ``askbot_approval_decisions_total{rule,outcome}``: approval decisions by the ``APPROVAL_POLICY`` rule that asked
  (``none`` without one) and ``approved`` / ``declined`` / ``expired`` / ``withdrawn``;
  ``askbot_approval_grants_given_total{rule,scope}`` / ``askbot_approval_grants_used_total{rule,scope}``: standing
  grants given, and calls they approved unasked (``scope``: ``thread`` / ``channel`` / ``always``);
- ``askbot_run_resumes_total{trigger}``: runs continued, by ``answer`` / ``approval`` / ``no_answer`` /
  ``cancelled`` / ``retry``;
- ``askbot_model_turn_seconds`` (histogram): one model turn, request to its last chunk (failed ones too);
- ``askbot_model_errors_total{kind}``: failed turns by ``ModelCallFailed.kind`` (``server``, ``timeout``,
  ``connection``, ``too_long``, ``incomplete``, ``adapter``, ``context_length``, ``no_reply``: the turn ended
  without text for another reason than ``stop``), and ``over_budget``: requests the token budget refused to send;
- ``askbot_model_turn_endings_total{finish_reason}``: model turns without tool calls that ended for another reason
  than ``stop`` (:mod:`bot.agent.model.endings`), with text or without: ``length``, ``content_filter``, ``missing``
  (none given, no text), ``other``;
- ``askbot_tool_results_cut_total``: tool results cut to ``TOOL_RESULT_MAX_CHARS`` before the model saw them;
- ``askbot_slack_api_calls_total{method}``: Web API calls (one per call, whatever slack_sdk retried) of the bot's
  client (:class:`bot.slack.transport.web_api.SharedWebClient`): all but Bolt's own cached ``auth.test`` of its first
  request;
- ``askbot_slack_api_errors_total{method,error}``: failed ones, by Slack's ``error`` string (or the exception's
  type name for a connection failure); at most :data:`ERROR_LABELS_MAX` distinct error values a process, later
  new ones count as ``other`` (the strings come from outside);
- ``askbot_runs_in_flight`` (gauge): runs this process drives now (multiprocess: summed over live processes);
- split mode, read from Redis at scrape time: ``askbot_queue_jobs`` (jobs not yet handled),
  ``askbot_queue_oldest_job_age_seconds`` (the oldest one's age, 0 when none), ``askbot_queue_pending_jobs``
  (delivered to a worker, not yet acknowledged).

Several processes: each process serves its own registry (:func:`exposition`). With ``PROMETHEUS_MULTIPROC_DIR``
set in the environment of every process before it starts (the library's multiprocess mode, for several processes
behind one port), the values live in that directory and every scrape aggregates them with
``prometheus_client.multiprocess.MultiProcessCollector`` (counters and histograms summed, the in-flight gauge summed
over live processes; :func:`process_exiting` removes a stopping process's live gauge). The shared state (the queue)
is read from Redis at scrape time by :class:`QueueGauges`, so every process reports the same figures.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterable, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bot.errors import StoreUnavailable
from bot.store.work_queue import QueueStats, WorkQueue

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

QUESTIONS_ASKED = Counter("askbot_questions_asked_total", "Questions a run asked, by selection mode.", ["mode"])
QUESTIONS_ANSWERED = Counter("askbot_questions_answered_total", "Answers taken, by selection mode.", ["mode"])
QUESTIONS_EXPIRED = Counter(
    "askbot_questions_expired_total", "Questions (kind=question) or approvals whose deadline passed.", ["kind"]
)
QUESTIONS_WITHDRAWN = Counter("askbot_questions_withdrawn_total", "Questions or approvals withdrawn.", ["kind"])
ANSWERS_REFUSED = Counter(
    "askbot_answers_refused_total", "Answers or decisions refused, by reason.", ["kind", "reason"]
)
ANSWERS_DUPLICATE = Counter(
    "askbot_answers_duplicate_total", "Answers or decisions refused because one was taken already.", ["kind"]
)
TIME_TO_ANSWER = Histogram(
    "askbot_time_to_answer_seconds",
    "Seconds from a question (or approval request) asked to its answer (decision).",
    ["kind"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400),
)
APPROVALS_REQUESTED = Counter("askbot_approvals_requested_total", "Approval requests asked.")
APPROVALS = Counter("askbot_approvals_total", "Approval decisions by a person.", ["decision"])
APPROVALS_BY_RULE = Counter(
    "askbot_approval_decisions_total", "Approval decisions by policy rule and outcome.", ["rule", "outcome"]
)
GRANTS_GIVEN = Counter("askbot_approval_grants_given_total", "Standing grants given.", ["rule", "scope"])
GRANTS_USED = Counter(
    "askbot_approval_grants_used_total", "Calls a standing grant approved unasked.", ["rule", "scope"]
)
RESUMES = Counter("askbot_run_resumes_total", "Runs continued, by what continued them.", ["trigger"])
MODEL_TURN = Histogram(
    "askbot_model_turn_seconds",
    "Seconds of one model turn (request to its last chunk), failed ones included.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
MODEL_ERRORS = Counter("askbot_model_errors_total", "Failed model turns, by kind.", ["kind"])
MODEL_TURN_ENDINGS = Counter(
    "askbot_model_turn_endings_total",
    "Model turns without tool calls that ended for another reason than stop, by finish_reason.",
    ["finish_reason"],
)
TOOL_RESULTS_CUT = Counter("askbot_tool_results_cut_total", "Tool results cut to their size bound.")
SLACK_CALLS = Counter("askbot_slack_api_calls_total", "Slack Web API calls, by method.", ["method"])
SLACK_ERRORS = Counter(
    "askbot_slack_api_errors_total", "Failed Slack Web API calls, by method and Slack's error.", ["method", "error"]
)
RUNS_IN_FLIGHT = Gauge("askbot_runs_in_flight", "Runs being driven now.", multiprocess_mode="livesum")

_LABEL_VALUE = re.compile(r"[A-Za-z0-9_.]{1,64}")
OTHER = "other"
ERROR_LABELS_MAX = 100  # distinct error label values a process reports (Slack's error strings come from outside)
_error_labels: set[str] = set()


def label_value(value: str) -> str:
    """``value`` when it looks like a Slack method or error code (``[A-Za-z0-9_.]``, at most 64), else ``"other"``: a
    label never carries arbitrary text (nor an unbounded set of values)."""
    return value if _LABEL_VALUE.fullmatch(value) else OTHER


def error_label(value: str) -> str:
    """:func:`label_value` of an error string from outside, from a bounded set: once :data:`ERROR_LABELS_MAX`
    distinct values were seen, a new one is ``"other"`` (each value is a series every scrape carries)."""
    value = label_value(value)
    if value not in _error_labels:
        if len(_error_labels) >= ERROR_LABELS_MAX:
            return OTHER
        _error_labels.add(value)
    return value


class QueueGauges(Collector):
    """Split mode's queue gauges, read from Redis at scrape time (:meth:`bot.store.work_queue.WorkQueue.stats`, one
    pipeline): call :meth:`refresh` (async) before collecting. A Redis that does not answer within ``within``
    seconds leaves the gauges out of that scrape (no stale figure is reported)."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self._stats: QueueStats | None = None

    async def refresh(self, *, within: float = 1.0) -> None:
        try:
            self._stats = await asyncio.wait_for(self.queue.stats(), within)
        except (StoreUnavailable, TimeoutError):
            self._stats = None

    def collect(self) -> Iterable[GaugeMetricFamily]:
        stats = self._stats
        if stats is None:
            return []
        return [
            GaugeMetricFamily("askbot_queue_jobs", "Jobs in the work stream not yet handled.", value=stats.jobs),
            GaugeMetricFamily(
                "askbot_queue_oldest_job_age_seconds",
                "Age of the oldest job not yet handled (0 when none).",
                value=stats.oldest_age_s or 0.0,
            ),
            GaugeMetricFamily(
                "askbot_queue_pending_jobs",
                "Jobs delivered to a worker, not yet acknowledged.",
                value=stats.in_progress,
            ),
        ]


class _Default(Collector):
    """This process's own metrics (the default registry), for a per-scrape registry."""

    def collect(self) -> Iterable[object]:  # type: ignore[override]
        return REGISTRY.collect()


def exposition(extra: Sequence[Collector] = ()) -> bytes:
    """The Prometheus text exposition of this process's metrics (or, with ``PROMETHEUS_MULTIPROC_DIR``, of every
    process writing to that directory) plus ``extra`` collectors (e.g. :class:`QueueGauges`)."""
    registry = CollectorRegistry()
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Default())
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry)


def process_exiting() -> None:
    """In multiprocess mode, drop this process's live gauge files (``mark_process_dead``), as the library's docs
    ask of a process that stops; a no-op otherwise."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        multiprocess.mark_process_dead(os.getpid(), path)  # type: ignore[no-untyped-call]


def monotonic() -> float:
    """The clock durations are measured with (seconds)."""
    return time.perf_counter()
