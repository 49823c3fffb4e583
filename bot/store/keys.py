"""Every Redis key this project uses, built in one place.

All keys share a configurable prefix (default ``askbot:``) so several deployments, or tests, can share
one Redis without seeing each other's data:

- ``{prefix}run:{run_id}`` - hash ``{rev, state}``: one run (see :mod:`bot.store.redis_store`).
- ``{prefix}event:{event_id}`` - string: a Slack event already taken (retry dedupe).
- ``{prefix}thread:{team_id}:{channel_id}:{thread_ts}`` - hash: the run of a Slack thread.
- ``{prefix}work`` - stream: Slack payloads acked by a ``web`` process, for ``worker`` processes.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "askbot:"


@dataclass(frozen=True)
class Keys:
    """Key builder; ``prefix`` is prepended verbatim (include a separator, e.g. ``"myapp:"``)."""

    prefix: str = DEFAULT_PREFIX

    def run(self, run_id: str) -> str:
        """The hash holding run ``run_id``."""
        return f"{self.prefix}run:{run_id}"

    def event(self, event_id: str) -> str:
        """The marker of a Slack ``event_id`` already processed."""
        return f"{self.prefix}event:{event_id}"

    def work(self) -> str:
        """The stream of jobs from web processes to workers (consumer group ``workers``)."""
        return f"{self.prefix}work"

    def thread(self, team_id: str, channel_id: str, thread_ts: str) -> str:
        """The pointer from a Slack thread to its latest run."""
        return f"{self.prefix}thread:{team_id}:{channel_id}:{thread_ts}"
