"""How bookkeeping owed to Redis since an outage is retried (one rule for every kind): a run slot whose release
failed (:mod:`bot.slack.limits`), a question's records not written after its post (:mod:`bot.slack.question_records`),
a run's save (:mod:`bot.agent.saving`). Each is retried in the background after :data:`RETRY_FIRST` seconds,
doubling to :data:`RETRY_MAX`, so it lands within about a second of Redis answering again: never left to an
expiry (a slot's 2 minutes, a lease's 30 s) during which people would be told something untrue ("still working").
"""

from __future__ import annotations

from collections.abc import Iterator

RETRY_FIRST = 0.05  # seconds before the first retry
RETRY_MAX = 1.0  # seconds between retries at most, however long the outage


def pauses() -> Iterator[float]:
    """The pauses (seconds) before each retry: :data:`RETRY_FIRST`, doubling, then :data:`RETRY_MAX` forever."""
    pause = RETRY_FIRST
    while True:
        yield pause
        pause = min(pause * 2, RETRY_MAX)
