"""What Slack refused lately, per channel: :class:`FeatureRefusals`, so a feature a workspace or channel lacks
(streaming, the thread status) costs one refused call per :data:`REFUSAL_MEMORY` seconds, not one per reply."""

from __future__ import annotations

import time
from collections import OrderedDict

from bot.slack.context import SlackContext

REFUSAL_MEMORY = 600.0  # seconds a refusal is remembered (a scope or feature may be added meanwhile)


class FeatureRefusals:
    """Channels (``(team_id, channel_id)``) where Slack refused a feature lately, until when (monotonic seconds);
    at most ``size`` remembered (the oldest forgotten first). One process's memory: nothing is stored."""

    def __init__(self, *, memory: float = REFUSAL_MEMORY, size: int = 10_000) -> None:
        self.memory, self.size = memory, size
        self._refused: OrderedDict[tuple[str, str], float] = OrderedDict()

    def allowed(self, ctx: SlackContext) -> bool:
        """Whether to try the feature in ``ctx``'s channel (not refused there in the last ``memory`` seconds)."""
        until = self._refused.get((ctx.team_id, ctx.channel_id))
        return until is None or until < time.monotonic()

    def refused(self, ctx: SlackContext) -> None:
        """Slack refused the feature in ``ctx``'s channel just now."""
        key = (ctx.team_id, ctx.channel_id)
        self._refused[key] = time.monotonic() + self.memory
        self._refused.move_to_end(key)
        while len(self._refused) > self.size:
            self._refused.popitem(last=False)
