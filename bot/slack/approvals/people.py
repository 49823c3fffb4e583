"""Who is in a user group or a channel, as approvers and rules need it (docs/approvals.md "Approvers"), looked up
in Slack and cached for :data:`CACHE_SECONDS`:

- a user group's members by its id (``S...``): ``usergroups.users.list`` (scope ``usergroups:read``);
- a user group by its handle (``@finance``): ``usergroups.list`` (one call lists every group of the workspace, with
  its users: ``include_users``), the handle matched without its ``@`` (Slack keeps handles lower-case, as a
  policy file must write them);
- a channel's members (``channel:C...``): ``conversations.members``, every page (scopes ``channels:read`` /
  ``groups:read`` / ``im:read`` / ``mpim:read`` by the channel's type).

When Slack refuses (a missing scope, an unknown group, a rate limit), the last known answer is kept, or none: an
unknown group or channel admits nobody, never everybody. Each lookup is logged once per refusal, with Slack's error
code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.approval_policy import GROUP_HANDLE, GROUP_ID

log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
MEMBERS_PAGE = 1000  # conversations.members: limit at most 1000 (Slack)
MAX_PAGES = 50  # a channel of 50,000 people is looked up whole; past that the first 50,000 count


class People:
    """The lookups above through ``client``; ``clock``: seconds (monotonic), injectable for tests. One instance
    is shared by every :class:`~bot.slack.questions.approvers.ApproverPolicy` of a process."""

    def __init__(self, client: AsyncWebClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self.groups: dict[str, tuple[float, set[str]]] = {}  # group id -> (when, member ids)
        self.channels: dict[str, tuple[float, set[str]]] = {}  # channel id -> (when, member ids)
        self._handles: tuple[float, dict[str, str]] | None = None  # (when, handle -> group id)
        self._me: str | None = None  # the app's own bot user id (auth.test), once known

    def _fresh(self, when: float) -> bool:
        return self.clock() - when < CACHE_SECONDS

    async def group_members(self, group: str) -> set[str]:
        """The members of user group ``group`` (an ``S...`` id or ``@handle``); none for a group Slack doesn't
        know (see the module docstring)."""
        group_id = await self.group_id(group)
        if group_id is None:
            return set()
        cached = self.groups.get(group_id)
        if cached is not None and self._fresh(cached[0]):
            return cached[1]
        try:
            resp = await self.client.usergroups_users_list(usergroup=group_id)
            members = {str(u) for u in resp.get("users") or []}
        except SlackApiError as exc:
            log.warning("usergroups.users.list failed for %s: %s", group_id, exc.response.get("error"))
            members = cached[1] if cached is not None else set()
        self.groups[group_id] = (self.clock(), members)
        return members

    async def group_id(self, group: str) -> str | None:
        """The id of user group ``group``: itself for an ``S...`` id; for an ``@handle``, the group of that handle
        (``usergroups.list``, cached), or None when there is none."""
        if GROUP_ID.fullmatch(group):
            return group
        if not GROUP_HANDLE.fullmatch(group):
            return None
        handles = self._handles
        if handles is None or not self._fresh(handles[0]):
            try:
                resp = await self.client.usergroups_list(include_users=True)
                listed = {}
                for item in resp.get("usergroups") or []:
                    if isinstance(item, dict) and item.get("id") and item.get("handle"):
                        listed[str(item["handle"]).lower()] = str(item["id"])
                        if isinstance(item.get("users"), list):
                            self.groups[str(item["id"])] = (self.clock(), {str(u) for u in item["users"]})
                handles = (self.clock(), listed)
            except SlackApiError as exc:
                log.warning("usergroups.list failed: %s", exc.response.get("error"))
                handles = (self.clock(), handles[1] if handles is not None else {})
            self._handles = handles
        return handles[1].get(group[1:].lower())

    async def channel_members(self, channel: str) -> set[str]:
        """The members of channel ``channel`` (``conversations.members``, every page up to :data:`MAX_PAGES`)."""
        cached = self.channels.get(channel)
        if cached is not None and self._fresh(cached[0]):
            return cached[1]
        members: set[str] = set()
        cursor = ""
        try:
            for _ in range(MAX_PAGES):
                resp = await self.client.conversations_members(
                    channel=channel, limit=MEMBERS_PAGE, cursor=cursor or None
                )
                members |= {str(u) for u in resp.get("members") or []}
                cursor = str((resp.get("response_metadata") or {}).get("next_cursor") or "")
                if not cursor:
                    break
        except SlackApiError as exc:
            log.warning("conversations.members failed for %s: %s", channel, exc.response.get("error"))
            members = cached[1] if cached is not None else set()
        self.channels[channel] = (self.clock(), members)
        return members

    async def app_user(self) -> str | None:
        """The app's own bot user id (``auth.test``, asked until it answers, then kept): a channel's members include
        it, and it is nobody to remind or list a request for. None while Slack refuses."""
        if self._me is None:
            try:
                resp = await self.client.auth_test()
                self._me = str(resp.get("user_id") or "") or None
            except SlackApiError as exc:
                log.warning("auth.test failed: %s", exc.response.get("error"))
        return self._me

    def known_group_id(self, handle: str) -> str | None:
        """The id of the group of ``handle`` (``@name``) by what was looked up so far, or None."""
        handles = self._handles[1] if self._handles is not None else {}
        return handles.get(handle[1:].lower())

    def known_groups_of(self, user: str) -> set[str]:
        """The user groups (ids, and handles where known) ``user`` is in, by what was looked up so far (for the
        synchronous reading of a rule's ``requester.groups``; :meth:`groups_of` looks them up first)."""
        ids = {g for g, (_when, members) in self.groups.items() if user in members}
        handles = self._handles[1] if self._handles is not None else {}
        return ids | {"@" + h for h, g in handles.items() if g in ids}

    async def groups_of(self, user: str, *, among: tuple[str, ...]) -> set[str]:
        """Which of the user groups ``among`` (ids or ``@handles``) ``user`` is in, as ids and handles."""
        out: set[str] = set()
        for group in among:
            if user in await self.group_members(group):
                out.add(group)
                group_id = await self.group_id(group)
                if group_id is not None:
                    out.add(group_id)
        return out | self.known_groups_of(user)
