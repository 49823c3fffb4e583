"""Edit before approving: an approval rule's ``editable`` fields (:mod:`bot.approval_policy`) let its approvers
change a call's arguments. Edit opens a form of them (:func:`bot.slack.render.edit_modal.edit_modal`; a loading
modal first, the trigger lives 3 s); a submitted form is checked against the tool's schema (an error under each
field that doesn't fit, in the modal), then saved on the pending call (``Agent.edit_tool_call``, one
compare-and-set) and approved as the editor's decision (:meth:`Approving.decide
<bot.slack.approvals.deciding.Approving.decide>`: under a quorum the approvals given to the old arguments no longer
count). Who may edit, and whether the call still waits, are decided as for Approve and Decline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bot.agent.answers import Open
from bot.agent.approvals import approval_payload
from bot.agent.state import PendingCall
from bot.agent.tools import ToolInputError
from bot.errors import NotAwaitingThisKind, RunConflict, RunNotFound, StoreUnavailable
from bot.slack.approvals.deciding import Ack, Approving
from bot.slack.approvals.rules import call_decision, editable_call, with_edited
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.answering import LOST_CLAIM
from bot.slack.questions.approvers import RULE_NOTE
from bot.slack.questions.lookup import Found
from bot.slack.questions.notices import GONE, REQUEST_NOT_OPEN, STORE_DOWN
from bot.slack.refs import QuestionRef
from bot.slack.render.approvals import QuorumProgress
from bot.slack.render.edit_modal import edit_modal, editable_fields, edited_arguments

log = logging.getLogger(__name__)


class Editing:
    """Edit's listeners for ``approving``'s approval requests (the modal, who may decide and the decision are
    ``approving``'s)."""

    def __init__(self, approving: Approving) -> None:
        self.approving = approving
        self.answering = approving.answering
        self.modal = approving.modal

    async def on_open_edit(self, body: dict[str, Any], context: Any) -> None:
        """Edit (lazy): the loading modal becomes the form of the arguments the call's rule lets approvers change
        (:func:`bot.slack.render.edit_modal.edit_modal`), or a notice (not allowed, no longer open, nothing to
        edit)."""
        opened = self.modal.loading_view(context)
        if opened is None:
            return
        view_id, notice = opened
        web = self.answering.web

        where = Origin.of_action(body)
        found = await self.approving.found_for(body, where, notice)
        if found is None:
            return
        state, ctx, call = found
        check = await self.answering.agent.check(state, call)
        if not isinstance(check, Open) or check.pending.kind != "approval":
            await notice(REQUEST_NOT_OPEN)
            return
        pending = check.pending
        approvers = self.answering.permissions.approvers.for_approval(ctx, approval_payload(pending))
        schema, args = self._editing(pending)
        if not approvers.editable or schema is None or not editable_fields(schema, approvers.editable):
            await notice("Nothing of this call can be edited.")
            return
        ref = QuestionRef.of(state.run_id, call)
        meta = self.modal.metadata(
            run_id=state.run_id, call=ref.call, user=where.user, view_id=view_id, asked=pending.suspended_at
        )
        view = edit_modal(
            tool_name=pending.tool_name,
            schema=schema,
            args=args,
            editable=approvers.editable,
            quorum=approvers.quorum,
            private_metadata=meta,
        )
        await web.update_view(view_id, view)

    def _editing(self, pending: PendingCall) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """What the Edit modal edits of ``pending``: the JSON schema of its arguments (``Agent.argument_schema``:
        the tool's, or the one a framework's request carried; None for a call that takes no edits) and the
        arguments; of Claude Code's permission prompt, its input's key/values
        (:func:`~bot.slack.approvals.rules.editable_call`)."""
        prompt = editable_call(pending.tool_name, pending.args)
        if prompt is not None:
            return prompt
        return self.answering.agent.argument_schema(pending), pending.args

    async def ack_edit(self, ack: Ack, body: dict[str, Any], context: Any) -> None:
        """A submitted Edit form (ack side): errors under each field that doesn't fit the tool's schema, or a form
        not opened for this person / a call no longer waiting (an error in the form); otherwise it closes and
        :meth:`on_edit` saves the edit and approves."""
        found = await self._edit_form(body)
        if isinstance(found, str):
            await ack(response_action="errors", errors={self._first_block(body): found})
            return
        if found.errors:
            await ack(response_action="errors", errors=found.errors)
            return
        context[ACCEPTED_EDIT] = True
        await ack()

    @staticmethod
    def _first_block(body: dict[str, Any]) -> str:
        blocks = (body.get("view") or {}).get("blocks") or []
        return next((str(b.get("block_id")) for b in blocks if b.get("type") == "input"), "")

    async def on_edit(self, body: dict[str, Any], context: Any) -> None:
        """A submitted Edit form (lazy): save the edited arguments on the pending call (``Agent.edit_tool_call``),
        then approve it with them as the editor: under a quorum the approvals gathered for the old arguments no
        longer count (:func:`bot.store.quorum.asking_of`), the editor's is the first for the new ones."""
        if not (context and context.get(ACCEPTED_EDIT)):
            return
        user = str((body.get("user") or {}).get("id") or "")
        found = await self._edit_form(body)
        if isinstance(found, str) or found.errors:
            await self.answering.web.tell(user, found if isinstance(found, str) else REQUEST_NOT_OPEN)
            return
        state, ctx, call = found.found
        where = Origin(user=user, surface="modal", team_id=ctx.team_id)
        say = self.answering.say_to(where, ctx)
        agent = self.answering.agent
        try:
            saved = await agent.edit_tool_call(
                run_id=state.run_id, tool_call_id=call, arguments=found.arguments, edited_by=user
            )
        except ToolInputError as exc:
            await say(f"Those arguments don't fit the tool, so nothing changed: {exc}")
            return
        except (*LOST_CLAIM, NotAwaitingThisKind, RunConflict):
            await say("This changed while you were editing it, so your edit wasn't saved; look at it again.")
            return
        except RunNotFound:
            await say(GONE)
            return
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        assert saved.pending is not None
        payload = approval_payload(saved.pending)
        approvers = self.answering.permissions.approvers.for_approval(ctx, payload)
        progress = QuorumProgress(approvers.required) if approvers.quorum else None
        await self.answering.messages.show_quorum(saved.run_id, payload, ctx, progress=progress)
        await self.approving.decide(saved, ctx, call, where=where, approved=True, reason=None)

    async def _edit_form(self, body: dict[str, Any]) -> EditForm | str:
        """The call a submitted Edit form is about and the arguments it gives (with errors by block), if this
        person may still edit it; or what to tell them."""
        opened = await self.approving.open_form(body)
        if isinstance(opened, str):
            return opened
        found, pending = opened
        ctx = found[1]
        approvers = self.answering.permissions.approvers.for_approval(ctx, approval_payload(pending))
        schema, args = self._editing(pending)
        if not approvers.editable or schema is None:
            return "Nothing of this call can be edited."
        view = body.get("view") or {}
        arguments, errors = edited_arguments(view, schema=schema, args=args, editable=approvers.editable)
        arguments = with_edited(pending.tool_name, pending.args, arguments)
        if not errors and (moved := await self._moved_rule(ctx, pending, arguments)) is not None:
            errors = {self._first_block(body): moved}
        return EditForm(found=found, arguments=arguments, errors=errors)

    async def _moved_rule(self, ctx: SlackContext, pending: PendingCall, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` can't be saved on ``pending``: with them the call would fall under another rule of the
        approval policy than the one deciding its request (another rule's ``when`` matches first, or its own no
        longer does: an approver of one rule must not edit a call into another's, e.g. past an amount's limit);
        None when the same rule decides it (or there is no policy)."""
        approvers = self.answering.permissions.approvers
        asked_under = approval_payload(pending).policy.get(RULE_NOTE)
        if approvers.policy is None or not isinstance(asked_under, str) or not asked_under:
            return None
        try:
            decision = await call_decision(
                approvers.policy,
                pending.tool_name,
                arguments,
                requester=ctx.requester,
                channel=ctx.channel_id,
                tool_requires=True,
                people=approvers.people,
            )
        except Exception:  # a user-group look-up Slack refused: don't guess
            log.exception("an edit's rule could not be checked")
            return "I couldn't check these arguments against the approval policy; try again in a moment."
        if decision.name == asked_under:
            return None
        return (
            f"With these arguments the call falls under the approval policy's rule {decision.name!r}, not"
            f" {asked_under!r}, which decides this request: an edit can't move it to another rule."
        )


@dataclass(frozen=True)
class EditForm:
    """A submitted Edit form read back: the call it is about (``found``), the ``arguments`` it gives, and the
    ``errors`` by input block id (empty: they fit the tool's schema)."""

    found: Found
    arguments: dict[str, Any]
    errors: dict[str, str]


ACCEPTED_EDIT = "edit_accepted"
