"""The audit trail: every decision on a question or approval is one log line on the ``bot.audit`` logger, and its
metrics (:mod:`bot.ops.metrics`) move in the same call, at the one place the decision is taken:

- asked: the run's suspension was saved (:meth:`bot.agent.Agent` drive loop);
- answered / approved / declined / withdrawn / expired (went on without an answer): the claim's compare-and-set
  won (``Claims.claim``), so a redelivered job or a second click, whose claim loses, logs nothing here;
- expired (closed without going on): the save that marked the run ``expired`` succeeded;
- refused (who may answer: ``not_allowed``; a late answer: ``expired``; a run no longer waiting: ``closed``) and
  duplicate (answered already): where the Slack layer tells the person (at least once: a redelivered job may
  repeat a refusal, never a decision; one that finds its own person's answer, made by its first delivery, logs
  no duplicate: :data:`bot.slack.context.REDELIVERED`).

Line shape: the message is ``"<kind> <outcome>"`` followed by the fields as ``key=value``; with
``LOG_FORMAT=json`` the fields are top-level keys of the line's object (:class:`bot.logs.JsonFormatter`)::

    {"time": "...", "level": "INFO", "logger": "bot.audit", "message": "question answered run_id=... ...",
     "event": "question.answered", "kind": "question", "outcome": "answered", "run_id": "run_...",
     "tool_call_id": "c1", "tool": "ask_user", "mode": "single_select", "user_id": "U1",
     "at": "2026-12-01T09:00:00.000+00:00", "asked_at": "...", "waited_seconds": 12.5,
     "team_id": "T1", "channel_id": "C1", "answer_labels": ["web"]}

What of the answer is kept (privacy): option labels for choices (the bot's own options, not a person's words),
the length (``answer_chars``) of a free-form answer, the field names of a filled form, and only the length
(``reason_chars``) of a person's decline reason; fixed reasons (``no answer``, ``cancelled``) are kept as they are;
of an approval whose arguments were edited, who edited it, the names of the arguments changed and digests of the
arguments before and after (``edited_by``, ``edited_args``, ``args_before_sha256``, ``args_sha256``).
A question or approval asked through ``python -m bot mcp`` by a named caller (``MCP_CALLERS``) has the caller's
name on each of its lines (``mcp_caller``), the standing grant's use by Claude Code's permission prompt included
(``grant used ... granted_by=U… mcp_caller=build-42``).
The audit lines outlive the run's retention in Redis wherever the logs are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime
from typing import Any, Literal

from bot.agent.approvals import edited_of
from bot.agent.asking import ASKER
from bot.agent.decisions import args_hash
from bot.agent.state import Answer, PendingCall, RunState, utcnow
from bot.ops import metrics as m

audit_log = logging.getLogger("bot.audit")

Kind = Literal["question", "approval", "grant"]
RefusalReason = Literal["not_allowed", "expired", "closed"]
MODES = ("free_form", "single_select", "multi_select", "form")
MCP_CALLER = "mcp_caller"  # run metadata: the MCP caller that asked (bot.mcp_server.asker.CALLER; absent: none)


def question_mode(pending: PendingCall) -> str:
    """``approval``, or the question's selection mode: ``single_select`` / ``multi_select`` (it has options),
    ``form`` (an MCP server's form) or ``free_form``."""
    if pending.kind == "approval":
        return "approval"
    payload = pending.suspend_payload
    if payload.get("options"):
        return "multi_select" if payload.get("selection_mode") == "multi_select" else "single_select"
    return "form" if "form" in payload else "free_form"


def _base(
    state: RunState, pending: PendingCall | None, call: str, *, outcome: str, kind: Kind | None = None
) -> dict[str, Any]:
    """The fields every line has; ``tool``, ``mode`` and ``asked_at`` while ``call`` is pending (``pending``), else
    the tool's name from the run's messages."""
    kind = kind or (pending.kind if pending is not None else "question")
    fields: dict[str, Any] = {
        "event": f"{kind}.{outcome}",
        "kind": kind,
        "outcome": outcome,
        "run_id": state.run_id,
        "tool_call_id": call,
    }
    if pending is not None:
        fields["tool"] = pending.tool_name
        fields["mode"] = question_mode(pending)
        fields["asked_at"] = _iso(pending.suspended_at)
    elif (tool := _tool_of(state, call)) is not None:
        fields["tool"] = tool
    slack = state.metadata.get("slack")
    if isinstance(slack, dict):
        for name in ("team_id", "channel_id"):
            if isinstance(slack.get(name), str) and slack[name]:
                fields[name] = slack[name]
    caller = state.metadata.get(MCP_CALLER)
    if isinstance(caller, str) and caller:
        fields["mcp_caller"] = caller
    return fields


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


def _emit(fields: dict[str, Any]) -> None:
    shown = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
        for k, v in fields.items()
        if k not in ("event", "kind", "outcome")
    )
    audit_log.info("%s %s %s", fields["kind"], fields["outcome"], shown, extra={"audit": fields})


def _answer_fields(answer: Answer, pending: PendingCall) -> dict[str, Any]:
    """What of the answer the trail keeps (see the module docstring)."""
    data = answer.resume_data
    if pending.kind == "approval":
        if answer.reason is None:
            return {}
        if answer.outcome != "answer":
            return {"reason": answer.reason}
        return {"reason_chars": len(answer.reason)}
    mode = question_mode(pending)
    if isinstance(data, list):
        return {"answer_labels": [str(x) for x in data]}
    if mode == "single_select":
        labels = {str(o.get("label")) for o in pending.suspend_payload.get("options") or [] if isinstance(o, dict)}
        if isinstance(data, str) and data in labels:
            return {"answer_labels": [data]}
    if mode == "form" and isinstance(data, str):
        try:
            reply = json.loads(data)
        except ValueError:
            reply = None
        if isinstance(reply, dict):
            content = reply.get("content")
            fields = sorted(content) if isinstance(content, dict) else []
            return {"form_action": str(reply.get("action", "")), "answer_fields": fields}
    return {"answer_chars": len(data) if isinstance(data, str) else len(json.dumps(data))}


def asked(state: RunState, pending: PendingCall) -> None:
    """A question or approval request was asked (its suspension saved)."""
    if pending.kind == "approval":
        m.APPROVALS_REQUESTED.inc()
    else:
        m.QUESTIONS_ASKED.labels(question_mode(pending)).inc()
    fields = _base(state, pending, pending.tool_call_id, outcome="asked")
    if pending.expires_at is not None:
        fields["expires_at"] = _iso(pending.expires_at)
    _emit(fields)


def claimed(state: RunState, pending: PendingCall, answer: Answer) -> None:
    """``answer`` to ``pending`` of ``state`` (as loaded before the claim) won its claim: answered, approved /
    declined, withdrawn, or (``no_answer``) expired with the run going on (not again for a run already marked
    ``expired``: :func:`expired` recorded that)."""
    kind: Kind = pending.kind
    if answer.outcome == "no_answer" and state.status == "expired":  # audited and counted when it was marked
        m.RESUMES.labels("no_answer").inc()
        return
    if answer.outcome == "no_answer":
        outcome, trigger = "expired", "no_answer"
        m.QUESTIONS_EXPIRED.labels(kind).inc()
    elif answer.outcome == "cancelled":
        outcome, trigger = "withdrawn", "cancelled"
        m.QUESTIONS_WITHDRAWN.labels(kind).inc()
    elif kind == "approval":
        outcome, trigger = str(answer.resume_data), "approval"  # approved | declined
        m.APPROVALS.labels(outcome).inc()
    else:
        outcome, trigger = "answered", "answer"
        m.QUESTIONS_ANSWERED.labels(question_mode(pending)).inc()
    waited = max(0.0, (answer.answered_at - pending.suspended_at).total_seconds())
    if answer.outcome == "answer":
        m.TIME_TO_ANSWER.labels(kind).observe(waited)
    m.RESUMES.labels(trigger).inc()
    fields = _base(state, pending, pending.tool_call_id, outcome=outcome)
    if answer.answered_by == ASKER:  # an outside agent withdrew its own question: no Slack user
        fields["by"] = "asker"
    elif answer.answered_by:
        fields["user_id"] = answer.answered_by
    fields["at"] = _iso(answer.answered_at)
    fields["waited_seconds"] = round(waited, 3)
    if answer.outcome != "cancelled":
        fields.update(_answer_fields(answer, pending))
    fields.update(_edit_fields(pending))
    if kind == "approval":
        fields.update(_approval_fields(answer, pending))
        m.APPROVALS_BY_RULE.labels(fields["rule"], outcome).inc()
    _emit(fields)


def _approval_fields(answer: Answer, pending: PendingCall) -> dict[str, Any]:
    """What the trail keeps of an approval decision: the rule that asked (``none`` without a policy), the call's
    argument hash (:func:`bot.agent.decisions.args_hash`; never the arguments), whether the approver edited them
    (then the edited arguments' hash too), and the scope given (``once`` or a standing grant's)."""
    rule = pending.suspend_payload.get("rule")
    out: dict[str, Any] = {
        "rule": rule if isinstance(rule, str) and rule else "none",
        "args_hash": args_hash(pending.args),
        "edited": answer.arguments is not None,
        "scope": answer.scope or "once",
    }
    if answer.arguments is not None:
        out["edited_args_hash"] = args_hash(answer.arguments)
    return out


def grant_given(grant: dict[str, Any]) -> None:
    """A standing grant was recorded (``grant``: :class:`bot.store.grants.Grant` as JSON; its arguments are not
    logged, their hash is)."""
    m.GRANTS_GIVEN.labels(str(grant.get("rule")), str(grant.get("scope"))).inc()
    fields = {
        "event": "grant.given",
        "kind": "grant",
        "outcome": "given",
        **{k: v for k, v in grant.items() if k not in ("args", "schema_version") and v not in ("", None)},
    }
    _emit(fields)


def grant_used(state: RunState, tool: str, hashed: str, grant: dict[str, Any]) -> None:
    """A standing grant approved a call of ``tool`` (arguments hashing to ``hashed``) of ``state`` unasked."""
    m.GRANTS_USED.labels(str(grant.get("rule")), str(grant.get("scope"))).inc()
    fields = _base(state, None, "", outcome="used", kind="approval")
    fields.update(
        event="grant.used",
        kind="grant",
        tool=tool,
        args_hash=hashed,
        grant_id=grant.get("grant_id"),
        granted_by=grant.get("granted_by"),
        scope=grant.get("scope"),
        rule=grant.get("rule"),
        expires_at=grant.get("expires_at"),
    )
    fields.pop("tool_call_id", None)
    _emit(fields)


def grant_revoked(*, team_id: str, user: str, grant_id: str, uses: int) -> None:
    """``user`` revoked standing grant ``grant_id``, which had approved ``uses`` calls."""
    _emit(
        {
            "event": "grant.revoked",
            "kind": "grant",
            "outcome": "revoked",
            "team_id": team_id,
            "user_id": user,
            "grant_id": grant_id,
            "uses": uses,
        }
    )


def _edit_fields(pending: PendingCall) -> dict[str, Any]:
    """An approval whose arguments a person changed before it was decided (issue 23 part 3): who, which arguments,
    and a digest of the arguments before and after (SHA-256 of their canonical JSON, 16 hex characters: the values
    themselves stay out of the logs)."""
    edited = edited_of(pending) if pending.kind == "approval" else None
    if edited is None:
        return {}
    changed = sorted(k for k in {*edited.before, *pending.args} if edited.before.get(k) != pending.args.get(k))
    return {
        "edited_by": edited.by,
        "edited_args": changed,
        "args_before_sha256": _digest(edited.before),
        "args_sha256": _digest(pending.args),
    }


def _digest(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def retried(state: RunState) -> None:
    """A failed or orphaned run was continued (no decision: counted, not audited)."""
    m.RESUMES.labels("retry").inc()


def expired(state: RunState, pending: PendingCall | None) -> None:
    """The run's question was closed as expired (the save marking it ``expired`` succeeded)."""
    kind: Kind = pending.kind if pending is not None else "question"
    m.QUESTIONS_EXPIRED.labels(kind).inc()
    call = pending.tool_call_id if pending is not None else ""
    fields = _base(state, pending, call, outcome="expired")
    fields["at"] = _iso(utcnow())
    _emit(fields)


def refused(state: RunState, call: str, *, user: str, reason: RefusalReason, kind: Kind | None = None) -> None:
    """``user``'s answer or decision on ``call`` was refused for ``reason`` (``kind``: what the request was, when
    the call is no longer pending to tell it)."""
    pending = _pending_of(state, call)
    kind = kind or (pending.kind if pending is not None else "question")
    m.ANSWERS_REFUSED.labels(kind, reason).inc()
    fields = _base(state, pending, call, outcome="refused", kind=kind)
    fields.update(user_id=user, at=_iso(utcnow()), reason=reason)
    _emit(fields)


def duplicate(state: RunState, call: str, *, user: str, kind: Kind | None = None) -> None:
    """``user`` answered (or decided) ``call`` after it was answered: refused, told who answered (``kind`` as for
    :func:`refused`)."""
    pending = _pending_of(state, call)
    kind = kind or (pending.kind if pending is not None else "question")
    m.ANSWERS_DUPLICATE.labels(kind).inc()
    fields = _base(state, pending, call, outcome="duplicate", kind=kind)
    fields.update(user_id=user, at=_iso(utcnow()))
    first = state.answer_for(call)
    if first is not None and first.answered_by:
        fields["answered_by"] = first.answered_by
    _emit(fields)


def _pending_of(state: RunState, call: str) -> PendingCall | None:
    pending = state.pending
    return pending if pending is not None and pending.tool_call_id == call else None


def _tool_of(state: RunState, call: str) -> str | None:
    """The name of the tool call ``call`` in the run's messages (newest first), if there."""
    for message in reversed(state.messages):
        for part in message.get("tool_calls") or []:
            if isinstance(part, dict) and part.get("id") == call:
                name = (part.get("function") or {}).get("name")
                return str(name) if name else None
    return None
