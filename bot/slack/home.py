"""The App Home tab as an inbox: what waits for the person who opens it, across channels, each with its controls.

- Who: a question is in the inbox of the person who started its run; an approval request also in those of the
  people who may decide it (``APPROVERS``, or its policy rule's approvers: users, user groups' members, named
  channels' members); an escalated question also in its escalation targets' when they may answer it
  (``ASK_ESCALATE_ANSWERS=true``; never an approval: :mod:`bot.slack.questions.permissions`), not every
  ``channel``-mode question of every channel a person is in. Who may act on an item is decided again when they
  click, by the same rule as everywhere.
- What: oldest first, each question or approval as in its thread (an approval's card from
  :class:`~bot.slack.approvals.cards.OpenCards`: its quorum's progress, Edit, the standing grants its rule allows;
  answering here goes through the same exactly-once path and updates the thread's message too), with where it was
  asked, by whom, how long it has waited and a link to its thread; then the last few closed.
- When: on ``app_home_opened``, and whenever a question in the person's inbox is asked or closed: a refresh is
  scheduled :data:`DEBOUNCE` seconds later (one per person at a time, :mod:`bot.store.schedule`), within Slack's
  rate limits for ``views.publish``. A refresh is published only to a person who opened the tab within
  :data:`WATCHED` seconds: a Home nobody looks at shows nothing, and Slack sends ``app_home_opened`` each time the
  tab is opened again, which publishes it fresh (a person who never opens it costs no ``views.publish`` nor the
  ``chat.getPermalink`` of each of its links).

Slack: a Home view holds at most 100 blocks (docs.slack.dev reference/views): it shows as many questions as fit
(:data:`MAX_BLOCKS`) and says how many more wait.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from bot.agent import Agent
from bot.agent.answers import Open
from bot.agent.approvals import approval_payload
from bot.agent.ask_user import AskUserPayload
from bot.agent.stream import ApprovalPayload
from bot.config import Answerers
from bot.errors import RunNotFound, SlackRefused, StoreCorrupt, StoreUnavailable
from bot.ops import audit
from bot.slack.approvals.cards import OpenCards
from bot.slack.approvals.rules import policy_call
from bot.slack.context import Origin, SlackContext, asker_of
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.refs import QuestionRef
from bot.slack.render import blocks as bk
from bot.slack.render.mrkdwn import clip, escape, how_long
from bot.slack.render.safe_text import one_line, safe_mrkdwn
from bot.slack.transport.web_api import SlackWeb
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex
from bot.store.grants import Grant, GrantStore
from bot.store.inbox import Inbox
from bot.store.schedule import Due, DueItem, Schedule

log = logging.getLogger(__name__)

HOME = "home"  # the scheduled refresh's kind: DueItem(HOME, run_id=team_id, key=user)
DEBOUNCE = 2.0  # seconds between a change and the person's Home refresh
MAX_BLOCKS = 95  # of Slack's 100, leaving room for "and N more"
SHOWN = 30  # questions read per refresh at most
WATCHED = 8 * 3600  # seconds after opening the Home tab during which changes are published to it (a working day)
LINKS_KEPT = 2000  # thread links remembered per process


class Home:
    """Inboxes on the Home tab for ``agent``'s runs."""

    def __init__(
        self,
        *,
        agent: Agent,
        web: SlackWeb,
        index: ConversationIndex,
        inbox: Inbox,
        schedule: Schedule,
        approvers: ApproverPolicy,
        answerers: Answerers,
        grants: GrantStore | None = None,
        cards: OpenCards | None = None,
    ) -> None:
        self.cards = cards or OpenCards(approvers=approvers, grants=None)  # an open request's card, as in its thread
        self.grants = grants  # standing grants (APPROVAL_POLICY): each person's, listed with Revoke
        self.agent = agent
        self.web = web
        self.index = index
        self.inbox = inbox
        self.schedule = schedule
        self.approvers = approvers
        self.answerers: Answerers = answerers
        self._links: OrderedDict[tuple[str, str], str] = OrderedDict()  # the last LINKS_KEPT permalinks

    # --- keeping inboxes ---------------------------------------------------------------------------------------

    async def people(self, ctx: SlackContext, *, approval: ApprovalPayload | None, also: list[str]) -> list[str]:
        """Whose inboxes a question just asked goes in: the requester; for an approval request (``approval``) also
        each person who may decide it (its rule's approvers: users, user groups' members, named channels' members,
        :meth:`~bot.slack.questions.approvers.ApproverPolicy.deciders`); ``also``: e.g. escalation targets. In
        order, each once."""
        people = [ctx.requester, *also]
        if approval is not None:
            people += await self.cards.approvers_of(approval, ctx).deciders(ctx)
        return list(dict.fromkeys(p for p in people if p))

    @staticmethod
    def refreshes(people: list[tuple[str, str]]) -> list[Due]:
        """The Home refreshes to schedule after a change to the inboxes of ``people`` (``(team_id, user)``): each
        :data:`DEBOUNCE` s later, an earlier one kept (one per person at a time)."""
        return [Due(DueItem(HOME, team_id, user), after=DEBOUNCE, keep_earlier=True) for team_id, user in people]

    async def asked(
        self,
        ctx: SlackContext,
        run_id: str,
        call: str,
        *,
        asked_at: datetime | None,
        approval: ApprovalPayload | None,
        also: list[str],
    ) -> None:
        """Put a question in its :meth:`people`'s inboxes and refresh their Home tabs (an escalation adds its targets
        this way; a question just posted is recorded by :mod:`bot.slack.questions.records`, in fewer round trips).
        Sent again, it changes nothing more. Raises ``StoreUnavailable`` (its caller, scheduled work, is tried
        again: an escalation's targets are never left without it in their Home)."""
        people = await self.people(ctx, approval=approval, also=also)
        when = int((asked_at or datetime.now(UTC)).timestamp() * 1000)
        await self.inbox.add(ctx.team_id, people, run_id=run_id, call=call, asked_ms=when)
        await self.schedule.change(add=self.refreshes([(ctx.team_id, p) for p in people]))

    # --- publishing --------------------------------------------------------------------------------------------

    async def on_home_opened(self, body: dict[str, Any]) -> None:
        """Lazy listener of ``app_home_opened``: publish the person's inbox (the Home tab only, not Messages)."""
        event = body.get("event") or {}
        if event.get("tab", "home") != "home" or not event.get("user"):
            return
        team_id, user = str(body.get("team_id") or event.get("team") or ""), str(event["user"])
        try:
            await self.publish(team_id, user, watch=True)
        except (StoreUnavailable, SlackRefused) as exc:  # the Home stays as it was; their next opening publishes it
            log.warning("could not show %s's Home: %s", user, exc)

    def queue_seen(self, batch: Batch, team_id: str, user: str) -> None:
        """A click in ``user``'s Home (an answer, a decision, a withdrawal): they are looking at it, so its changes
        are published for :data:`WATCHED` seconds from now, and it is refreshed :data:`DEBOUNCE` s from now (what
        they clicked may have closed meanwhile, or their Home gone stale: a click on it repairs it; an answer's close
        asks for the same refresh, one per person at a time); queued in ``batch`` (the click's own round trip).
        Slack sends no ``app_home_opened`` while the tab stays open, so a Home kept open all day is renewed this
        way."""
        self.inbox.queue_watch(batch, team_id, user, seconds=WATCHED)
        self.schedule.queue_change(batch, add=self.refreshes([(team_id, user)]))

    async def on_refresh(self, item: DueItem) -> None:
        """The scheduled refresh of ``item.key``'s Home (team ``item.run_id``): published when they opened it within
        :data:`WATCHED` seconds, else nothing (their next ``app_home_opened`` publishes it). Raises
        ``StoreUnavailable``, :class:`~bot.errors.SlackRefused` (Slack's transient errors outlasted the retries):
        the scheduler tries it again."""
        if await self.inbox.watched(item.run_id, item.key):
            await self.publish(item.run_id, item.key)

    async def publish(self, team_id: str, user: str, *, watch: bool = False) -> None:
        """Render and publish ``user``'s inbox; ``watch``: they are looking at it (they opened it, or clicked in
        it), so its changes are published for :data:`WATCHED` seconds from now, marked with the inbox's read (one
        round trip, never a Home published but left unmarked). Raises ``StoreUnavailable``,
        :class:`~bot.errors.SlackRefused` (:meth:`SlackWeb.publish_home`)."""
        view, render = await self._render(team_id, user, watch=watch)
        # Two renders of one Home can be in flight at once (a change during a slow render schedules the next): the
        # one begun last is published, never an older one after it (the Home would keep the older view)
        if await self.inbox.latest_render(team_id, user) > render:
            log.info("%s's Home: a later render publishes it", user)
            return
        await self.web.publish_home(user, view)

    async def _render(self, team_id: str, user: str, *, watch: bool) -> tuple[dict[str, Any], int]:
        """The Home view of ``user``: what waits for them (oldest first), then what closed lately; ``watch``: as
        :meth:`publish`; and the render's number (:meth:`Inbox.latest_render`). Raises ``StoreUnavailable``."""
        blocks: list[dict[str, Any]] = [_header("Waiting for you")]
        inbox = await self.inbox.snapshot(team_id, user, limit=SHOWN, watch=WATCHED if watch else None, render=True)
        shown = stale = 0
        for run_id, call, asked_ms in inbox.waiting:
            item = await self._item(team_id, user, run_id=run_id, call=call, asked_ms=asked_ms)
            if item is None:  # no longer waits: taken out of the inbox
                stale += 1
                continue
            if len(blocks) + len(item) + 1 > MAX_BLOCKS:
                break
            blocks += [*item, {"type": "divider"}]
            shown += 1
        total = inbox.total - stale
        if shown == 0:
            blocks.append(_context("Nothing is waiting for you."))
        elif total > shown:
            blocks.append(
                _context(f"…and {total - shown} more waiting; answer these first, or find them in their threads.")
            )
        recent = inbox.recent
        if recent and len(blocks) + 2 <= 100:
            lines = [f"• {clip(str(r.get('summary') or ''), 300)}" for r in recent]
            blocks += [_header("Recently closed"), _context(clip("\n".join(lines), 2900))]
        blocks += await self._grant_blocks(team_id, user, room=100 - len(blocks))
        return {"type": "home", "blocks": blocks}, inbox.render

    async def _grant_blocks(self, team_id: str, user: str, *, room: int) -> list[dict[str, Any]]:
        """The standing grants ``user`` gave, each with Revoke, in at most ``room`` blocks (Slack: a Home view holds
        at most 100): what each covers, when it expires."""
        if self.grants is None or room < 3:
            return []
        mine = await self.grants.of_person(team_id, user)
        if not mine:
            return []
        blocks = [_header("Your standing grants")]
        for grant in mine[: room - 2]:
            blocks.append(
                {
                    "type": "section",
                    "block_id": f"grant-{grant.grant_id}",
                    "text": {"type": "mrkdwn", "text": grant_line(grant)},
                    "accessory": {
                        "type": "button",
                        "action_id": ACT_REVOKE_GRANT,
                        "text": {"type": "plain_text", "text": "Revoke"},
                        "value": grant.grant_id,
                        "style": "danger",
                    },
                }
            )
        if len(mine) > room - 2:
            blocks.append(_context(f"…and {len(mine) - (room - 2)} more."))
        return blocks

    async def on_revoke_grant(self, body: dict[str, Any]) -> None:
        """Lazy listener of a standing grant's Revoke (Home): only the person who gave it can revoke it (the grant is
        looked up among theirs); the Home is published again and the person told how many calls it had approved."""
        where = Origin.of_action(body)
        user, team_id = where.user, where.team_id or ""
        grant_id = str(((body.get("actions") or [{}])[0]).get("value") or "")
        if self.grants is None or not user or not grant_id:
            return
        try:
            uses = await self.grants.revoke(team_id, user, grant_id)
        except StoreUnavailable:
            await self.web.tell(user, "I couldn't revoke it: storage is unavailable. Try again in a moment.")
            return
        if uses is None:
            await self.web.tell(user, "That standing grant is no longer there (revoked or expired already).")
        else:
            audit.grant_revoked(team_id=team_id, user=user, grant_id=grant_id, uses=uses)
            calls = "call" if uses == 1 else "calls"
            await self.web.tell(user, f"Standing grant revoked; it had approved {uses} {calls}.")
        await self.publish(team_id, user, watch=True)  # a click in the Home: they are looking at it

    async def _item(
        self, team_id: str, user: str, *, run_id: str, call: str, asked_ms: int
    ) -> list[dict[str, Any]] | None:
        """One waiting question's blocks, or None (and taken out of the inbox) when it no longer waits."""
        try:
            state = await self.agent.get_run(run_id)
            ctx = SlackContext.of(state)
            check = await self.agent.check(state, call)
        except (RunNotFound, StoreCorrupt):
            check = None
        if not isinstance(check, Open):
            await self.inbox.drop(team_id, user, run_id=run_id, call=call)
            return None
        pending = check.pending
        ref = QuestionRef.of(run_id, call)
        if pending.kind == "approval":  # as in its thread (its quorum's progress, Edit, the grants it allows) to
            approval = approval_payload(pending)  # whoever may decide; to the others, what waits and on whom
            progress = await self.cards.progress(run_id, approval, ctx)
            decides = await self.cards.approvers_of(approval, ctx).may_approve(ctx, user)
            gives = decides and await self.cards.gives_grants(approval, ctx, user)
            blocks = self.cards.blocks(
                approval, ctx, ref=ref, progress=progress, decides=decides, viewer=user, gives_grants=gives
            )
        else:
            payload = AskUserPayload.model_validate(pending.suspend_payload)
            blocks = bk.question_blocks(
                payload, ref=ref, requester=ctx.requester, answerers=self.answerers, in_thread=False
            )
        waited = _ago(asked_ms)
        link = await self.thread_link(run_id, call, ctx)
        place = "In a DM with the app" if ctx.channel_id.startswith("D") else f"In <#{ctx.channel_id}>"
        asker = asker_of(state)  # an outside agent's question: the agent asked, the requester is the person asked
        who = safe_mrkdwn(asker) if asker else f"<@{ctx.requester}>" if ctx.requester else "someone"
        where = f"{place} · asked by {who} · waiting {waited}"
        where += f" · <{link}|Open the thread>" if link else ""
        return [_context(where), *blocks]

    async def thread_link(self, run_id: str, call: str, ctx: SlackContext) -> str | None:
        """The link to the question's message in its thread (``chat.getPermalink``, remembered)."""
        cached = self._links.get((run_id, call))
        if cached is not None:
            return cached
        messages = [m for m in await self.index.messages(run_id, call) if m.channel_id == ctx.channel_id]
        link = await self.web.permalink(ctx.channel_id, messages[0].ts) if messages else None
        if link:
            self._links[(run_id, call)] = link
            while len(self._links) > LINKS_KEPT:
                self._links.popitem(last=False)
        return link


ACT_REVOKE_GRANT = "grant_revoke"


def grant_line(grant: Grant) -> str:
    """A standing grant on the Home list (mrkdwn): the tool, what it covers, the rule, the expiry."""
    name, args = policy_call(grant.tool_name, grant.args)  # Claude Code's permission prompt: its tool and input
    tool = safe_mrkdwn(clip(name, 100))
    if grant.scope == "thread":
        where = f"in a thread of <#{grant.channel_id}>"
    elif grant.scope == "channel":
        where = f"in <#{grant.channel_id}>"
    else:
        shown = ", ".join(
            f"{safe_mrkdwn(one_line(str(k)))}={safe_mrkdwn(clip(one_line(str(v)), 60))}" for k, v in args.items()
        )
        where = f"with these arguments ({clip(shown, 500)}) anywhere"
    expires = int(grant.expires_at.timestamp())
    return clip(
        f"`{tool}` runs without asking {where} · rule {safe_mrkdwn(grant.rule)} ·"
        f" expires <!date^{expires}^{{date_short_pretty}} {{time}}|{grant.expires_at:%Y-%m-%d %H:%M} UTC>",
        2900,
    )


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": clip(text, 150)}}


def _context(mrkdwn: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(mrkdwn, 3000)}]}


def _ago(asked_ms: int) -> str:
    return how_long(datetime.now(UTC).timestamp() - asked_ms / 1000)


def closed_summary(question: str, outcome: str) -> str:
    """How a closed question is listed under "Recently closed": the question, shortened, and its outcome."""
    return f"{escape(clip(question, 150))} · {outcome}"
