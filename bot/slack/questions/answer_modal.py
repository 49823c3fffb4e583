"""The free-form answer modal: open at once, decide from the stored run, check the submission, then claim it.

The "Answer" button's ``trigger_id`` lives 3 s, so its ack function opens a loading modal at once; its lazy
function then turns it into the form, or into a notice decided from the stored run (not allowed, answered,
expired): nobody types an answer that cannot be taken. A submission is checked again against the stored run
before it is acknowledged (problems show under the input, the typed text kept) and claimed after, through
:meth:`bot.slack.questions.answering.Answering.take` like every other answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from bot.agent.answers import Expired, Open
from bot.agent.ask_user import AskUserPayload
from bot.agent.forms import FormReply
from bot.agent.state import PendingCall
from bot.agent.text import is_blank
from bot.errors import StoreUnavailable
from bot.logs import log_context
from bot.slack.context import Origin
from bot.slack.questions.answering import Answering
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.lookup import Found
from bot.slack.questions.notices import NOT_OPEN, STORE_DOWN, explain
from bot.slack.questions.picks import Pick, asked_question, button_ref, said
from bot.slack.refs import QuestionRef
from bot.slack.render import modals
from bot.slack.render.mrkdwn import clip, escape
from bot.store.conversations import MessageRef, asked_id

MODAL_CHECK_SECONDS = 2.0  # a view_submission must be acked within 3 s
# Context keys an ack function leaves for its lazy function (Bolt copies the context to it after the ack).
LOADING_VIEW = "answer_loading_view_id"
ACCEPTED = "answer_accepted"
NOT_OURS = "This form wasn't opened for you by this question; press Answer on the question to get one."


_MENTION = re.compile(r"<@([UW][A-Z0-9_]+)>")
_MENTIONS = re.compile(r"(<@[UW][A-Z0-9_]+>)")  # split on, kept


def _unquoted(quoted: str | None) -> str | None:
    """An answer as the notices quote it (:func:`~bot.slack.questions.picks.said`: ``*web*``), without the bold
    that plain text would show as asterisks; the answer's own characters as they are."""
    if quoted is not None and len(quoted) >= 2 and quoted.startswith("*") and quoted.endswith("*"):
        return quoted[1:-1]
    return quoted


class AnswerModal:
    """The answer modal's listeners; answers are taken by ``answering``. ``key`` signs the forms the bot opens
    (see :meth:`metadata`): derive it from a secret only this deployment has, e.g. with :func:`modal_key`."""

    def __init__(self, answering: Answering, *, key: bytes) -> None:
        self.answering = answering
        self.key = key

    def metadata(
        self,
        *,
        run_id: str,
        call: str,
        user: str,
        view_id: str,
        asked: datetime | None = None,
        message_ts: str = "",
    ) -> dict[str, str]:
        """The form's ``private_metadata``: the question (and which asking of it, ``asked``), the person it was
        opened for, the view, the question's message it was opened from (``message_ts``, in the run's thread; ""
        for none) and a signature of them (HMAC-SHA256), so a submission is tied to a form this bot opened for that
        person and that question."""
        fields = {"r": run_id, "c": call, "u": user, "v": view_id, "a": asked_id(asked), "m": message_ts}
        if not message_ts:
            del fields["m"]
        return {**fields, "s": self._sign(fields)}

    def opened_by_us(self, meta: dict[str, str], *, user: str, view_id: str) -> bool:
        """Whether ``meta`` (a submitted form's metadata) is a form the bot opened for ``user`` as view ``view_id``."""
        fields = {k: meta.get(k, "") for k in ("r", "c", "u", "v", "a", "m")}
        if not all(fields[k] for k in ("r", "c", "u", "v")) or fields["u"] != user or fields["v"] != view_id:
            return False
        return hmac.compare_digest(self._sign(fields), meta.get("s", ""))

    def _sign(self, fields: dict[str, str]) -> str:
        text = "|".join(fields.get(k, "") for k in ("r", "c", "u", "v", "a"))
        if fields.get("m"):  # forms opened before the message was carried verify as they were signed
            text += "|" + fields["m"]
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()[:32]

    # --- the answer modal ------------------------------------------------------------------------

    async def open_modal(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], context: Any) -> None:
        """The free-form "Answer" button (ack side): open a loading modal at once (the ``trigger_id`` lives 3 s)
        and leave its view id in the context for :meth:`on_open_modal`."""
        await ack()
        view_id = await self.answering.web.open_view(str(body.get("trigger_id") or ""), modals.loading_modal())
        if view_id is None:
            where = Origin.of_action(body)
            await self.answering.say_to(where)(
                "Slack didn't let me open the answer form in time; please click Answer again."
            )
            return
        context[LOADING_VIEW] = view_id

    def loading_view(self, context: Any) -> tuple[str, Callable[[str], Awaitable[None]]] | None:
        """The loading modal a click's ack opened (:meth:`open_modal`): its ``view_id`` and how to turn it into a
        notice; None when none was opened (the lazy function then has nothing to fill)."""
        view_id = context.get(LOADING_VIEW) if context else None
        if not view_id:
            return None

        async def notice(text: str) -> None:
            await self.answering.web.update_view(view_id, modals.notice_modal(text))

        return str(view_id), notice

    async def on_open_modal(self, body: dict[str, Any], context: Any) -> None:
        """The free-form "Answer" button (lazy): turn the loading modal into the form, or into a notice decided
        from the stored run (not allowed, already answered, expired)."""
        opened = self.loading_view(context)
        if opened is None:
            return
        view_id, notice = opened
        where = Origin.of_action(body)

        ref = await button_ref(body, notice)
        if ref is None:
            return
        with log_context(run_id=ref.run_id, team_id=where.team_id, channel_id=where.channel_id, user_id=where.user):
            found = await self.answering.vet(ref, where, notice)
            if found is None:
                return
            state, ctx, call = found
            check = await self.answering.agent.check(state, call)
            if not isinstance(check, Open):
                attempt = Attempt(state=state, ctx=ctx, call=call, user=where.user, say=notice)  # no message closed
                await self.answering.not_open(check, attempt)
                return
            payload = AskUserPayload.model_validate(check.pending.suspend_payload)
            asked = check.pending.suspended_at
            shown = where.message_in(ctx)  # closed with the recorded messages once answered, recorded or not
            meta = self.metadata(
                run_id=ref.run_id,
                call=ref.call,
                user=where.user,
                view_id=view_id,
                asked=asked,
                message_ts=shown.ts if shown is not None else "",
            )
            if payload.form is not None and payload.form.fields:  # a server's question: a field each
                form = modals.form_modal(payload.form, payload.question, private_metadata=meta)
            else:
                form = modals.answer_modal(payload.question, private_metadata=meta)
            if not await self.answering.web.update_view(view_id, form):
                await self.answering.say_to(where)("Slack didn't show the answer form; please press Answer again.")

    async def ack_modal(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], context: Any) -> None:
        """A submitted answer modal (ack side): a blank answer, a person not allowed, or a question that can't take
        it any more get an error under the input (the typed text stays); otherwise the modal closes and
        :meth:`on_modal_answer` claims the answer (the context says it was accepted)."""
        try:
            problem = await asyncio.wait_for(self._modal_problem(body), MODAL_CHECK_SECONDS)
            problem = await asyncio.wait_for(self._plain(problem), MODAL_CHECK_SECONDS) if problem else None
        except (TimeoutError, StoreUnavailable):
            problem = "I'm slow to answer right now; please press Send again in a moment."
        if problem:
            await ack(response_action="errors", errors={modals.MODAL_INPUT_BLOCK: problem})
        else:
            context[ACCEPTED] = True
            await ack()

    async def _plain(self, notice: str) -> str:
        """A notice written as mrkdwn (the thread's and ephemerals' wording) as a modal's error shows it, in plain
        text (Slack: ``response_action: errors`` strings are not formatted): a person's mention as their name
        (``users.info``, cached), entities decoded (the quoted answers come without their bold: :func:`_unquoted`)."""
        names = self.answering.writer.names
        shown = []
        for part in _MENTIONS.split(notice):  # a mention the bot wrote (a person's own "<" arrives as "&lt;")
            mention = _MENTION.fullmatch(part)
            shown.append(await names.user(mention.group(1)) if mention else html.unescape(part))
        return "".join(shown)

    async def _modal_problem(self, body: dict[str, Any]) -> str | None:
        view = body.get("view") or {}
        if is_blank(modals.modal_text(view)):
            return "Please write an answer."
        opened = await self._still_open(body)
        return opened if isinstance(opened, str) else None

    async def _still_open(self, body: dict[str, Any]) -> PendingCall | str:
        """The question a submitted modal answers, if its submitter may answer it and it is still open; otherwise
        what to tell them (an expired question is closed on the way)."""
        user = str((body.get("user") or {}).get("id") or "")
        found = await self.form_question(body)
        if isinstance(found, str):
            return found
        state, ctx, call = found
        where = Origin(user=user, surface="modal", team_id=ctx.team_id)
        refused = await self.answering.permissions.refusal(state, ctx, call, user=user, where=where)
        if refused is not None:
            return refused
        check = await self.answering.agent.check(state, call)
        if isinstance(check, Open):
            return check.pending
        if isinstance(check, Expired):
            await self.answering.expire(state, call)
        recorded = self.answering.recorded(check, state, call, approval=False)
        payload = asked_question(state, call)
        typed = modals.modal_text(body.get("view") or {}) if payload is not None and payload.form is None else ""
        tried = said(payload, typed, allow_user_mentions=self.answering.writer.allow_user_mentions) if typed else None
        return explain(check, user, recorded=_unquoted(recorded), tried=_unquoted(tried))  # shown in plain text

    async def on_modal_answer(self, body: dict[str, Any], context: Any) -> None:
        """A submitted answer modal (lazy, after the ack): claim the typed answer, if the ack side accepted it."""
        if not (context and context.get(ACCEPTED)):
            return
        text = modals.modal_text(body.get("view") or {})
        await self._take_submitted(body, lambda _p: text, quoted=text)

    async def ack_form(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], context: Any) -> None:
        """A submitted form (a server's question, ack side): each field's problem under it, or for the whole form
        (not allowed, answered, expired) under its first field; otherwise the modal closes and
        :meth:`on_form_answer` claims it."""
        try:
            problems = await asyncio.wait_for(self._form_problems(body), MODAL_CHECK_SECONDS)
            problems = {block: await self._plain(text) for block, text in problems.items()}
        except (TimeoutError, StoreUnavailable):
            problems = {modals.field_block(0): "I'm slow to answer right now; please press Send again in a moment."}
        if problems:
            await ack(response_action="errors", errors=problems)
        else:
            context[ACCEPTED] = True
            await ack()

    async def _form_problems(self, body: dict[str, Any]) -> dict[str, str]:
        view = body.get("view") or {}
        whole = modals.field_block(0)
        opened = await self._still_open(body)
        if isinstance(opened, str):
            return {whole: opened}
        form = AskUserPayload.model_validate(opened.suspend_payload).form
        if form is None:
            return {whole: "This question is not a form any more; answer it on its message."}
        problems = form.problems(modals.form_values(view, form))
        return {modals.field_block(i): problems[f.name] for i, f in enumerate(form.fields) if f.name in problems}

    async def on_form_answer(self, body: dict[str, Any], context: Any) -> None:
        """A submitted form (lazy, after the ack): claim it, if the ack side accepted it."""
        if not (context and context.get(ACCEPTED)):
            return
        view = body.get("view") or {}

        def pick(payload: AskUserPayload) -> FormReply:
            return FormReply(action="accept", content=modals.form_values(view, payload.form) if payload.form else {})

        await self._take_submitted(body, pick, quoted="")

    async def _take_submitted(self, body: dict[str, Any], pick: Pick, *, quoted: str) -> None:
        """Claim what a submitted modal holds (``pick``); what the person is told afterwards quotes ``quoted``."""
        user = str((body.get("user") or {}).get("id") or "")
        text = quoted
        found = await self.form_question(body)
        if isinstance(found, str):
            await self.answering.web.tell(user, found)
            return
        state, ctx, call = found
        where = Origin(user=user, surface="modal", team_id=ctx.team_id)
        tell = self.answering.say_to(where, ctx)

        async def say(message: str) -> None:  # the modal is closed: quote the typed answer back, nothing is lost
            await tell(f"{message}\nYour answer was:\n>>> {escape(clip(text, 2500))}" if text else message)

        with log_context(run_id=state.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id, user_id=user):
            try:
                refused = await self.answering.permissions.refusal(state, ctx, call, user=user, where=where)
            except StoreUnavailable:
                await say(STORE_DOWN)
                return
            if refused is not None:
                await say(refused)
                return
            meta = modals.modal_metadata(body.get("view") or {})  # signed: checked by form_question above
            opened_from = MessageRef(channel_id=ctx.channel_id, ts=meta["m"]) if meta.get("m") else None
            attempt = Attempt.of((state, ctx, call), where=where, say=say, clicked=opened_from)
            await self.answering.take(attempt, pick=pick)

    async def form_question(self, body: dict[str, Any]) -> Found | str:
        """The run, context and question a submitted form (answer or decline modal) is about, if this bot opened
        it for this person (:meth:`opened_by_us`); or what to tell the person instead."""
        view = body.get("view") or {}
        meta = modals.modal_metadata(view)
        user = str((body.get("user") or {}).get("id") or "")
        if not self.opened_by_us(meta, user=user, view_id=str(view.get("id") or "")):
            return NOT_OURS
        found = await self.answering.find_or_reason(QuestionRef(run_id=meta["r"], call=meta["c"]))
        if isinstance(found, str):
            return found
        pending = found[0].waiting_call(found[2])  # the pending call, or one of its batch
        now = pending is not None and found[0].pending is not None and found[0].pending.resume is None
        if now and pending is not None and meta.get("a") and asked_id(pending.suspended_at) != meta["a"]:
            return NOT_OPEN  # a form of an earlier asking of this call: its question is not the one open now
        return found


def modal_key(secret: str) -> bytes:
    """The form-signing key derived from ``secret`` (the bot token: a forged request signed with a leaked signing
    secret still can't forge a form)."""
    return hmac.new(secret.encode(), b"askbot answer-modal metadata", hashlib.sha256).digest()
