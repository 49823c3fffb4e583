"""Who may approve tool calls (``APPROVERS``): the person who started the run (``requester``, the default), anyone in
the run's channel (``channel``), or a list of user ids and user-group ids, because the person who asked is often not
the person who may approve. User groups are resolved with ``usergroups.users.list`` (scope ``usergroups:read``) and
cached for :data:`GROUP_CACHE_SECONDS`.
"""

from __future__ import annotations

import logging
import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.context import SlackContext

log = logging.getLogger(__name__)

GROUP_CACHE_SECONDS = 60.0


class ApproverPolicy:
    """``spec``: ``requester``, ``channel`` or ``"U1,S2,..."`` (validated by :mod:`bot.config`)."""

    def __init__(self, spec: str, *, client: AsyncWebClient) -> None:
        self.spec = spec
        self.client = client
        ids = [] if spec in ("requester", "channel") else spec.split(",")
        self.users = {i for i in ids if not i.startswith("S")}
        self.groups = [i for i in ids if i.startswith("S")]
        self._members: dict[str, tuple[float, set[str]]] = {}

    async def may_approve(self, ctx: SlackContext, user: str) -> bool:
        """Whether ``user`` may decide on tool calls of the run in ``ctx``."""
        if self.spec == "channel":
            return True
        if self.spec == "requester":  # a run asked for nobody in particular: anyone in its channel
            return user == ctx.requester or not ctx.requester
        if user in self.users:
            return True
        for group in self.groups:
            if user in await self.group_members(group):
                return True
        return False

    def describe(self, ctx: SlackContext, *, elsewhere: bool = False) -> str:
        """Who may decide, as mrkdwn for the approval message (it mentions them); ``elsewhere``: for a copy posted
        outside the run's channel (an escalation), which names that channel."""
        here = f"<#{ctx.channel_id}>" if elsewhere else "this channel"
        if self.spec == "channel":
            return f"Anyone in {here} can approve or decline"
        if self.spec == "requester":
            if not ctx.requester:
                return f"Anyone in {here} can approve or decline"
            return f"Waiting for <@{ctx.requester}> to approve or decline"
        names = [f"<@{u}>" for u in sorted(self.users)] + [f"<!subteam^{g}>" for g in self.groups]
        return "Waiting for " + ", ".join(names) + " to approve or decline"

    def refusal(self, ctx: SlackContext) -> str:
        """What someone not allowed to decide is told."""
        if self.spec == "channel" or (self.spec == "requester" and not ctx.requester):
            return f"Only people in <#{ctx.channel_id}> can approve or decline this."
        if self.spec == "requester":
            return f"Only <@{ctx.requester}> can approve or decline this."
        return "Only the configured approvers can approve or decline this."

    def named(self) -> list[str]:
        """The user ids and user-group ids named in ``APPROVERS`` (empty for ``requester`` / ``channel``)."""
        return sorted(self.users) + self.groups

    async def group_members(self, group: str) -> set[str]:
        """The members of user group ``group`` (``usergroups.users.list``, cached a minute; the last known
        members, or none, when Slack refuses)."""
        cached = self._members.get(group)
        if cached is not None and time.monotonic() - cached[0] < GROUP_CACHE_SECONDS:
            return cached[1]
        try:
            resp = await self.client.usergroups_users_list(usergroup=group)
            members = {str(u) for u in resp.get("users") or []}
        except SlackApiError as exc:
            log.warning("usergroups.users.list failed for %s: %s", group, exc.response.get("error"))
            members = cached[1] if cached is not None else set()
        self._members[group] = (time.monotonic(), members)
        return members
