"""Short deadlines and reminder times for the playground: the developer panel changes the running bot's waiting
settings (``ASK_TTL_SECONDS``, ``ASK_ON_TIMEOUT``, ``ASK_REMIND_*``, ``ASK_ESCALATE_*``) so a day-long flow can be
tried in seconds. Questions asked after a change use the new times; those already waiting keep theirs."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Protocol

from bot.fakeslack.state import JSON
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS

MAX_SECONDS = 10 * 365 * 86400


class Timing(Protocol):
    """The bot's waiting settings as the developer panel shows and changes them (seconds); ``coalesce_seconds``
    (shown, not changed): how long a reminder or escalation message waits for others to the same person
    (:data:`~bot.slack.questions.follow_up_plan.COALESCE_SECONDS`), so each arrives up to that much after its time."""

    def get(self) -> JSON:
        """The current settings."""
        ...

    def set(self, values: JSON) -> JSON:
        """Apply ``values`` (a subset); returns them all. Raises ``ValueError`` for a bad value."""
        ...


class BotTiming:
    """:class:`Timing` over a running :class:`bot.slack.app.Bot` (its agent's ``ask_ttl`` and its wait plan)."""

    def __init__(self, bot: Any) -> None:
        self.bot = bot

    def get(self) -> JSON:
        plan = self.bot.plan.settings
        return {
            "coalesce_seconds": COALESCE_SECONDS,  # read only: reminders and escalations arrive up to this late
            "ask_ttl_seconds": self.bot.agent.ask_ttl,
            "on_timeout": plan.on_timeout,
            "remind_after": plan.remind_after,
            "remind_max": plan.remind_max,
            "escalate_after": plan.escalate_after,
            "escalate_to": plan.escalate_to,
        }

    def set(self, values: JSON) -> JSON:
        changes: dict[str, Any] = {}
        if "ask_ttl_seconds" in values:
            ttl = _seconds(values["ask_ttl_seconds"], "ask_ttl_seconds")
            if ttl is None:
                raise ValueError("ask_ttl_seconds: a question needs a deadline")
            agent = self.bot.agent
            agent.with_limits(dataclasses.replace(agent.limits, ask_ttl=ttl))
        for key in ("remind_after", "escalate_after"):
            if key in values:
                changes[key] = _seconds(values[key], key)
        if "remind_max" in values:
            count = values["remind_max"]
            if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100:
                raise ValueError("remind_max: a whole number from 1 to 100")
            changes["remind_max"] = count
        if "on_timeout" in values:
            if values["on_timeout"] not in ("resume", "close"):
                raise ValueError("on_timeout: resume or close")
            changes["on_timeout"] = values["on_timeout"]
        if "escalate_to" in values:
            target = str(values["escalate_to"] or "").strip()
            if target and not re.fullmatch(r"[CGUWS][A-Z0-9_]{1,63}(,[UWS][A-Z0-9_]{1,63})*", target):
                raise ValueError("escalate_to: a channel id, or user and user-group ids separated by commas")
            changes["escalate_to"] = target or None
        self.bot.plan.settings = dataclasses.replace(self.bot.plan.settings, **changes)
        return self.get()


def _seconds(value: Any, name: str) -> float | None:
    if value in (None, "", 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{name}: a number of seconds above 0 (or 0 for off)")
    return float(value)
