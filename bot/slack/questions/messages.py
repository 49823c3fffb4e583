"""A question's messages in Slack, the one place that posts, redraws and closes them: :class:`QuestionMessages`.

A question is posted with its Block Kit (plain text if Slack refuses the blocks: a reply in the thread still answers
it), an approval request as its card (:class:`bot.slack.approvals.cards.OpenCards`: who may decide, quorum
progress, Edit, the rule's grants), in its thread and where its policy rule asks it too (a DM to each approver, a
named channel), each copy with a link back to the thread. Every message that shows it is recorded
(:meth:`bot.store.conversations.ConversationIndex.add_message`): only those messages are updated for that question,
and the message a person acted on when it was never recorded (a store blip when it was posted), once Slack's copy of
it (``conversations.replies``) shows that question. :meth:`QuestionMessages.close_pending` updates them to the
question's outcome (answered, expired, decided), rendered from the stored question; a close Redis could not say the
messages of is owed and done again once it answers (:class:`bot.outage.Owed`).

The run's thread itself (status, streamed reply, failures) is :class:`bot.slack.replies.thread_writer.ThreadWriter`'s,
which asks here when its run suspends.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace
from datetime import datetime
from typing import Any

from bot import outage
from bot.agent.answers import undecided
from bot.agent.approvals import approval_payload
from bot.agent.ask_user import AskUserPayload, fallback_text
from bot.agent.state import PendingCall, RunState
from bot.agent.stream import ApprovalPayload, SuspendedPayload
from bot.config import Answerers
from bot.errors import StoreUnavailable
from bot.slack.approvals.cards import OpenCards
from bot.slack.approvals.grants import StandingGrants
from bot.slack.context import SlackContext
from bot.slack.home import Home, closed_summary
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.questions.follow_up_plan import FollowUpPlan
from bot.slack.questions.records import QuestionRecords
from bot.slack.refs import QuestionRef
from bot.slack.render import blocks as bk
from bot.slack.render.approvals import (
    QuorumProgress,
    approval_outcome_blocks,
    approval_title,
    away_from_thread,
    batch_header_blocks,
    batch_title,
    closed_what,
    link_back_block,
)
from bot.slack.render.mrkdwn import clip, escape
from bot.slack.transport.web_api import SlackWeb
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, MessageRef, asked_id

log = logging.getLogger(__name__)

LINKS_KEPT = 2000  # permalinks of requests' thread messages remembered per process (their copies' link-back lines)


class QuestionMessages:
    """Posts, redraws and closes the messages showing questions and approval requests, through ``web``; records
    them in ``index`` (and the question's follow-ups in ``plan``, its Home lines in ``home``)."""

    def __init__(
        self,
        *,
        web: SlackWeb,
        index: ConversationIndex,
        answerers: Answerers,
        approvers: ApproverPolicy,
        allow_user_mentions: bool = False,
        plan: FollowUpPlan | None = None,
        home: Home | None = None,
        grants: StandingGrants | None = None,
        cards: OpenCards | None = None,
    ) -> None:
        self.cards = cards or OpenCards(approvers=approvers, grants=grants)  # an open request's card, everywhere
        self.grants = grants  # standing grants (APPROVAL_POLICY's grants:): the scopes a request offers
        self.home = home  # the inboxes on the App Home tab
        self.records = QuestionRecords(index=index, plan=plan, home=home)  # what a shown / closed question writes
        self.closes = outage.Owed("closing a question's messages")  # closes Redis could not tell the messages of
        self.web = web
        self.index = index
        self.answerers: Answerers = answerers
        self.approvers = approvers
        self.allow_user_mentions = allow_user_mentions  # may text from the model or people ping a person
        self._links: OrderedDict[tuple[str, str], str] = OrderedDict()  # the last LINKS_KEPT thread permalinks

    async def ask(self, run_id: str, suspended: SuspendedPayload, ctx: SlackContext, *, tried: int = 0) -> str | None:
        """Post question ``suspended`` of run ``run_id`` in ``ctx``'s thread (its Block Kit; plain text where Slack
        refuses the blocks: a reply in the thread still answers it) and record the message; returns its ``ts`` (None:
        nothing posted, e.g. a suspension Slack cannot show; Slack refusing it, on try ``tried``: posted again later,
        :meth:`ask_again`)."""
        payload = suspended.suspend_payload
        if not isinstance(payload, AskUserPayload):
            log.warning("run %s: suspended on %s, which Slack cannot show", run_id, suspended.tool_name)
            return None
        ref = QuestionRef.of(run_id, suspended.tool_call_id)
        blocks = bk.question_blocks(
            payload,
            ref=ref,
            requester=ctx.requester,
            answerers=self.answerers,
            allow_user_mentions=self.allow_user_mentions,
        )
        text = escape(clip(payload.question, 3000))  # notifications: escaped, so <!channel> pings nobody
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text, blocks=blocks)
        if ts is None:  # Slack refused the blocks: ask in plain text; a reply in the thread still answers
            plain = escape(clip(fallback_text(payload), 39000))
            ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=plain)
        call, asked, expires = suspended.tool_call_id, suspended.asked_at, suspended.expires_at
        await self.records.shown(ctx, run_id, call, ts=ts, approval=None, asked=asked, expires_at=expires, tried=tried)
        return ts

    async def ask_again(self, run_id: str, pending: PendingCall, ctx: SlackContext, *, tried: int) -> str | None:
        """Post again, on try ``tried`` (from 1), the question or approval request ``pending`` of run ``run_id``
        that Slack refused to post (:data:`~bot.slack.questions.follow_up_plan.ASK_AGAIN`); its ``ts``, or None."""
        if pending.kind == "approval":
            return await self._ask_one_approval(run_id, approval_payload(pending), ctx, tried=tried)
        question = AskUserPayload.model_validate(pending.suspend_payload)
        asked = SuspendedPayload(
            pending.tool_call_id, pending.tool_name, pending.args, question, pending.expires_at, pending.suspended_at
        )
        return await self.ask(run_id, asked, ctx, tried=tried)

    async def ask_unshown(self, state: RunState, ctx: SlackContext) -> int:
        """Post what suspended run ``state`` waits on that no message shows (the question, or the calls of its
        approval batch left undecided; a whole batch with its header): what a job
        redelivered finds when its worker died between saving the run and posting its question. Returns how many
        were posted. Raises ``StoreUnavailable``."""
        pending = state.pending
        if state.status != "suspended" or pending is None or pending.resume is not None or pending.live_owner:
            return 0
        asked = asked_id(pending.suspended_at)
        calls = undecided(state) if pending.kind == "approval" else [pending]
        batch = Batch(self.index.client)
        recorded = self.index.queue_run_messages(batch, state.run_id)  # every call's messages, one round trip
        await batch.run("reading a run's question messages")
        unshown = [c for c in calls if not recorded.value.of(c.tool_call_id, asked=asked)]
        if not unshown:
            return 0
        log.info("run %s: posting what it waits on, never shown (%d)", state.run_id, len(unshown))
        if pending.kind == "approval" and pending.batch and len(unshown) == len(pending.calls()):
            await self.ask_approval(state.run_id, approval_payload(pending), ctx)  # the header too
        else:
            for call in unshown:
                await self.ask_again(state.run_id, call, ctx, tried=0)
        return len(unshown)

    async def ask_approval(self, run_id: str, approval: ApprovalPayload, ctx: SlackContext) -> list[str | None]:
        """Post approval request ``approval`` of run ``run_id`` in ``ctx``'s thread (a batch: a header with Approve
        all, then each call's own request), and where its rule asks it too; returns each request's ``ts`` in the
        thread (None: Slack refused it)."""
        if approval.batch:  # several calls of one turn: a header with Approve all, then each call's own request
            head = QuestionRef.of(run_id, approval.tool_call_id)
            blocks = batch_header_blocks(approval, ref=head)
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=batch_title(approval), blocks=blocks)
            return [
                await self._ask_one_approval(run_id, one, ctx) for one in (replace(approval, batch=()), *approval.batch)
            ]
        return [await self._ask_one_approval(run_id, approval, ctx)]

    async def _ask_one_approval(
        self, run_id: str, approval: ApprovalPayload, ctx: SlackContext, *, tried: int = 0
    ) -> str | None:
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        approvers = self.cards.approvers_of(approval, ctx)
        quorum = QuorumProgress(approvers.required) if approvers.quorum else None
        blocks = self.cards.blocks(approval, ctx, ref=ref, progress=quorum)
        text = approval_title(approval)
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text, blocks=blocks)
        call, asked, expires = approval.tool_call_id, approval.asked_at, approval.expires_at
        await self.records.shown(
            ctx, run_id, call, ts=ts, approval=approval, asked=asked, expires_at=expires, tried=tried
        )
        where = str(approval.policy.get("where") or "thread")
        if where != "thread" and ts is not None:
            await self._ask_elsewhere(run_id, approval, ctx, where=where, blocks=blocks, thread_message=ts)
        return ts

    async def _ask_elsewhere(
        self,
        run_id: str,
        approval: ApprovalPayload,
        ctx: SlackContext,
        *,
        where: str,
        blocks: list[dict[str, Any]],
        thread_message: str,
    ) -> None:
        """Post the request where its policy rule asks it too (``where: dm``: a DM to each approver,
        :meth:`ApproverPolicy.people_to_ask`; ``channel:C...``: that channel), each copy with a link back to the
        thread, and record each copy, so a decision on any of them updates them all and the thread's. A copy Slack
        refuses is logged and skipped: the thread's request still stands."""
        copy = [*away_from_thread(blocks), await self._link_back(ctx, thread_message)]
        if where == "dm":
            targets = await self.cards.approvers_of(approval, ctx).people_to_ask(ctx)
        else:
            targets = [where.removeprefix("channel:")]
        asked = asked_id(approval.asked_at)
        for target in targets:
            posted = await self.web.post_to(target, text=approval_title(approval), blocks=copy)
            if posted is None:
                log.warning("run %s: could not ask %s for its approval", run_id, target)
                continue
            ref = MessageRef(channel_id=posted[0], ts=posted[1], asked=asked)
            try:
                await self.index.add_message(run_id, key=approval.tool_call_id, ref=ref)
            except StoreUnavailable:
                log.warning("run %s: could not record the approval request sent to %s", run_id, target)

    async def show_quorum(
        self,
        run_id: str,
        approval: ApprovalPayload,
        ctx: SlackContext,
        *,
        progress: QuorumProgress | None,
        clicked: MessageRef | None = None,
    ) -> None:
        """Update every message showing ``approval`` (and ``clicked``, the one acted on) to its quorum ``progress``
        (None: not a quorum; e.g. after an edit), controls kept: the request still waits (issue 23 parts 2, 3); the
        Home tabs listing it are refreshed too (they show the same card). When Redis can't say which messages show
        it, only ``clicked`` is updated (the next change updates them all)."""
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        blocks = self.cards.blocks(approval, ctx, ref=ref, progress=progress)
        batch = Batch(self.index.client)
        shown = self.index.queue_messages(batch, run_id, approval.tool_call_id, asked=asked_id(approval.asked_at))
        owners = self.home.inbox.queue_owners(batch, run_id, approval.tool_call_id) if self.home is not None else None
        try:
            await batch.run("reading where an approval request is shown")
            refs: list[MessageRef] | None = shown.value
        except StoreUnavailable:
            refs, owners = None, None
        messages = await self._with_clicked(refs, clicked, ref)
        for message, shown_blocks in await self._with_link_back(messages, ctx, blocks):
            await self.web.update(message.channel_id, message.ts, text=approval_title(approval), blocks=shown_blocks)
        if self.home is not None and owners is not None and owners.value:
            try:
                await self.home.schedule.change(add=Home.refreshes(owners.value))
            except StoreUnavailable as exc:  # those Homes show it as it was until their next change or opening
                log.warning("run %s: could not refresh the Home tabs listing its approval request: %s", run_id, exc)

    async def _link_back(self, ctx: SlackContext, thread_message: str | None) -> dict[str, Any]:
        """The line a copy of a request away from its thread (a DM, another channel) ends with, on its first post
        and on every update: who asked, and a link to the request's message ``thread_message`` in ``ctx``'s thread
        (the thread itself when unknown; ``chat.getPermalink``, remembered)."""
        ts = thread_message or ctx.thread_ts
        link = self._links.get((ctx.channel_id, ts))
        if link is None:
            link = await self.web.permalink(ctx.channel_id, ts)
            if link:
                self._links[(ctx.channel_id, ts)] = link
                while len(self._links) > LINKS_KEPT:
                    self._links.popitem(last=False)
        # Slack: a link's label is plain text (a <#C…> inside it ends the link at its ">")
        back = f"<{link}|the thread> in <#{ctx.channel_id}>" if link else f"a thread in <#{ctx.channel_id}>"
        who = f" by <@{ctx.requester}>" if ctx.requester else ""
        return link_back_block(f":link: Asked{who} in {back}")

    async def _with_link_back(
        self, messages: list[MessageRef], ctx: SlackContext | None, blocks: list[dict[str, Any]]
    ) -> list[tuple[MessageRef, list[dict[str, Any]]]]:
        """Each of ``messages`` with the blocks it is updated to: ``blocks``, and for a copy outside ``ctx``'s
        channel (``where: dm`` / ``channel:C...``, an escalation's DM) its link-back line after them (None: no
        context, as they are)."""
        if ctx is None:
            return [(m, blocks) for m in messages]
        copies = [m for m in messages if m.channel_id != ctx.channel_id]
        if not copies:
            return [(m, blocks) for m in messages]
        in_thread = next((m.ts for m in messages if m.channel_id == ctx.channel_id), None)
        copy = [*away_from_thread(blocks), await self._link_back(ctx, in_thread)]
        return [(m, copy if m.channel_id != ctx.channel_id else blocks) for m in messages]

    async def close_approval(
        self,
        run_id: str,
        approval: ApprovalPayload,
        *,
        ctx: SlackContext | None,
        outcome: str,
        clicked: MessageRef | None = None,
        ongoing: bool = False,
    ) -> None:
        """Update every message showing the approval request (and ``clicked``, the one acted on, recorded or not) to
        ``outcome`` (mrkdwn), without controls, its copies outside ``ctx``'s channel keeping their link back to the
        thread (None: a caller without the run's context; they are updated without it); ``ongoing``: the approved
        call runs now, and its end closes the request again (the Home line too: :meth:`QuestionRecords.closed`)."""
        what = closed_what(approval)
        summary = f"{what} · {outcome}"
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        blocks = approval_outcome_blocks(approval, ref=ref, outcome=outcome)
        text = f"{what}: {outcome}"
        call, asked = approval.tool_call_id, approval.asked_at
        await self._close(
            ref,
            call,
            summary=summary,
            asked=asked,
            clicked=clicked,
            text=text,
            blocks=blocks,
            ongoing=ongoing,
            ctx=ctx,
        )

    async def _close(
        self,
        ref: QuestionRef,
        call: str,
        *,
        summary: str,
        asked: datetime | None,
        clicked: MessageRef | None,
        text: str,
        blocks: list[dict[str, Any]],
        ongoing: bool = False,
        ctx: SlackContext | None = None,
    ) -> None:
        """Close question ``ref``'s (tool call ``call``) records and update the messages showing it (and
        ``clicked``) to ``text`` / ``blocks`` (``ongoing``, ``ctx``: see :meth:`close_approval`). When Redis can't
        say which messages show it (an outage), ``clicked`` is updated now and the whole close is owed: done again as
        soon as Redis answers (:class:`bot.outage.Owed`)."""

        async def close(*, first: bool) -> bool:
            refs = await self.records.closed(ref.run_id, call, summary=summary, asked=asked, ongoing=ongoing)
            if refs is not None or first:  # the first try closes the message acted on, whatever Redis says
                messages = await self._with_clicked(refs, clicked, ref)
                for message, shown in await self._with_link_back(messages, ctx, blocks):
                    await self.web.update(message.channel_id, message.ts, text=text, blocks=shown)
            return refs is not None

        if not await close(first=True):
            self.closes.add(lambda: close(first=False))

    async def _with_clicked(
        self, refs: list[MessageRef] | None, clicked: MessageRef | None, ref: QuestionRef
    ) -> list[MessageRef]:
        """The messages to close: ``refs`` (those recorded; None: unreadable) and ``clicked`` (the one acted on)
        once. A clicked message not among them (a store blip when it was posted) is read back from Slack first and
        closed only if it shows question ``ref``: a click's ``container`` is the payload's word, and a forged one
        must not make the bot rewrite another message."""
        refs = list(refs or [])
        if clicked is None or any(r.channel_id == clicked.channel_id and r.ts == clicked.ts for r in refs):
            return refs
        message = await self.web.message(clicked.channel_id, clicked.ts)
        if message is not None and ref.shown_in(message):
            return [*refs, clicked]
        log.warning(
            "run %s: the message acted on (%s) does not show its question; left as it is", ref.run_id, clicked.ts
        )
        return refs

    async def close_pending(
        self,
        run_id: str,
        pending: PendingCall,
        *,
        outcome: str,
        summary: str,
        clicked: MessageRef | None = None,
        state: RunState | None = None,
        ctx: SlackContext | None = None,
    ) -> None:
        """Close the messages of ``pending`` (a stored question or approval request, this asking of it) with
        ``outcome`` (mrkdwn); ``summary``: a question's notification suffix (e.g. ``"expired"``); ``clicked``: the
        message acted on, closed too even if it was never recorded (a store blip when it was posted); ``state``: the
        run as it was before (an approval of a batch: every call of it undecided there is closed the same way);
        ``ctx``: the run's, so that an approval's copies away from its thread keep their link back (else
        ``state``'s)."""
        if pending.kind == "approval":
            calls = [pending]
            if state is not None and state.pending is not None and state.pending.batch:
                calls = undecided(state) or calls  # a batch: every call still undecided ends the same way
            if ctx is None and state is not None:
                ctx = SlackContext.of(state)
            for call in calls:
                mine = clicked if call.tool_call_id == pending.tool_call_id else None
                await self.close_approval(run_id, approval_payload(call), ctx=ctx, outcome=outcome, clicked=mine)
            return
        await self.close_question(
            run_id,
            tool_call_id=pending.tool_call_id,
            payload=AskUserPayload.model_validate(pending.suspend_payload),
            outcome=outcome,
            summary=summary,
            asked=pending.suspended_at,
            clicked=clicked,
        )

    async def close_question(
        self,
        run_id: str,
        *,
        tool_call_id: str,
        payload: AskUserPayload,
        outcome: str,
        summary: str,
        asked: datetime | None = None,
        clicked: MessageRef | None = None,
    ) -> None:
        """Update every message showing the question (``asked``: that asking of it, when the call asked more than
        once) to its outcome: the question without controls and ``outcome`` (mrkdwn) below it; ``summary`` is the
        notification text's suffix (e.g. ``"answered"``)."""
        summary_text = closed_summary(payload.question, outcome)
        ref = QuestionRef.of(run_id, tool_call_id)
        text = f"{escape(clip(payload.question, 3000))} ({summary})"
        blocks = bk.outcome_blocks(payload, ref=ref, outcome=outcome, allow_user_mentions=self.allow_user_mentions)
        await self._close(
            ref, tool_call_id, summary=summary_text, asked=asked, clicked=clicked, text=text, blocks=blocks
        )
