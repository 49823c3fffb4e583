"""What the demo model (:mod:`bot.playground.demo_model`) says once its tool calls came back: about the answers to
its questions (:func:`reply`: "Deploying to *production*, as <@U1> chose."), or about its demo tools' results ("Done:
restarted web (demo: nothing really restarted).", "OK, I won't restart it (busy)."), a note when a person edited a
call's arguments before approving it, and what went wrong when a call failed or got no answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bot.agent.approvals import DECLINED_TEXT
from bot.playground.demo_script import (
    CITIES,
    DEPLOY_TOOL,
    FEATURES,
    HELP_HINT,
    LABEL,
    QUESTIONS,
    REFUND_TOOL,
    RESTART_TOOL,
    TICKET_TOOL,
    TOPPING,
    TOPPINGS,
    Question,
)


def reply(asked: dict[str, Any], since_user: list[dict[str, Any]], *, question_tool: str) -> str:
    """The reply after the tool calls of ``asked``: about the tools' results when it asked no question (no
    ``question_tool`` call), else about the answers to its questions."""
    calls = asked.get("tool_calls") or []
    names = {(call.get("function") or {}).get("name") for call in calls}
    if calls and question_tool not in names:
        return _tools_reply(calls, since_user)
    return _answers_reply(asked, since_user)


def _tools_reply(calls: list[dict[str, Any]], since_user: list[dict[str, Any]]) -> str:
    """One sentence per demo tool call, from its ``tool`` message after the last user message."""
    results = {str(m.get("tool_call_id")): m.get("content") for m in since_user if m.get("role") == "tool"}
    sentences: list[str] = []
    for call in calls:
        name = str((call.get("function") or {}).get("name"))
        if call.get("id") not in results:
            sentences.append(f"The `{name}` call got no result.")
            continue
        content, edited_by = _without_edit_note(results[call["id"]])
        sentence = _tool_sentence(name, content, _parse_tool_result(content))
        if edited_by is not None:  # bot.agent.approvals.edit_note: a person changed the arguments before approving
            sentence = f"{_mention(edited_by)} changed the arguments before approving. {sentence}"
        sentences.append(sentence)
    return LABEL + " ".join(sentences)


_EDIT_NOTE = re.compile(
    r"(?:Note: (?P<who>[^\n]+?) changed this call's arguments before approving it;[^\n]*?Its result follows\.\n"
    r"|\[(?P<who2>[^\n]+?) changed this call's arguments before approving it;[^\n]*?\]\n)"
)


def _without_edit_note(content: Any) -> tuple[Any, str | None]:
    """``(the result without the runtime's edit note, who edited)``; ``(content, None)`` when there is no note.
    The runtime puts one line before an edited call's result: an Edit's (:func:`bot.agent.approvals.edit_note`,
    ``"Note: U1 changed this call's arguments ... Its result follows."``) or ``Approve(arguments=...)``'s
    (:func:`bot.agent.approvals.note_edit`, ``"[U1 changed this call's arguments ...]"``)."""
    if not isinstance(content, str):
        return content, None
    found = _EDIT_NOTE.match(content)
    if found is None:
        return content, None
    return content[found.end() :], found.group("who") or found.group("who2")


def _mention(who: str) -> str:
    """``<@U1>`` for a user id, else the text as written (escaped, first letter upper-cased: "The approver")."""
    return f"<@{who}>" if re.fullmatch(r"[UW][A-Z0-9_]+", who) else _esc(who[:1].upper() + who[1:])


def _parse_tool_result(content: Any) -> dict[str, Any] | None:
    """A tool message's content as a dict, or ``None`` when it is not a JSON object (a plain text result)."""
    if not isinstance(content, str):
        return content if isinstance(content, dict) else None
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _tool_sentence(name: str, content: Any, result: dict[str, Any] | None) -> str:
    """e.g. ``"Done: restarted web (demo: nothing really restarted)."`` or ``"OK, I won't restart it (busy)."``."""
    what = {
        RESTART_TOOL: "restart it",
        TICKET_TOOL: "look up the ticket",
        REFUND_TOOL: "refund it",
        DEPLOY_TOOL: "deploy it",
    }.get(name, f"call `{name}`")
    if isinstance(content, str) and content.startswith(DECLINED_TEXT):  # a framework agent's (their rejection text)
        result = {"status": "declined", "reason": content.partition(": ")[2]}
    if result is not None and result.get("status") == "declined":
        reason = result.get("reason")
        because = f" ({_esc(str(reason))})" if isinstance(reason, str) and reason.strip() else ""
        return f"OK, I won't {what}{because}."
    if result is not None and "error" in result:
        return f"I couldn't {what}: {_esc(str(result['error'])).rstrip('.')}."
    if name == TICKET_TOOL and result is not None and "id" in result:
        title = _esc(str(result.get("title") or "(no title)"))
        status = _esc(str(result.get("status") or "unknown"))
        assignee = result.get("assignee")
        owner = f"assigned to {_esc(str(assignee))}" if assignee else "unassigned"
        return f"{_esc(str(result['id']))} “{title}”: *{status}*, {owner}."
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if name not in (RESTART_TOOL, TICKET_TOOL, REFUND_TOOL, DEPLOY_TOOL):
        return f"`{name}` returned: {_esc(text.strip())}"
    return f"Done: {_esc(text.strip()).rstrip('.')}."


def _answers_reply(asked: dict[str, Any], since_user: list[dict[str, Any]]) -> str:
    """The reply for the tool calls of ``asked``, from their ``tool`` messages after the last user message."""
    results = {str(m.get("tool_call_id")): m.get("content") for m in since_user if m.get("role") == "tool"}
    sentences: list[str] = []
    errors: list[str] = []
    for call in asked.get("tool_calls") or []:
        fn = call.get("function") or {}
        question = _question_text(str(fn.get("arguments") or ""))
        what = f"“{question}”" if question else f"the `{fn.get('name')}` call"
        if call.get("id") not in results:
            errors.append(f"{what} got no answer")
            continue
        result = _parse_result(results[call["id"]])
        if "error" in result:
            errors.append(f"I couldn't ask {what}: {result['error']}")
        elif result.get("status") in ("no_answer", "cancelled"):  # the deadline passed, or it was withdrawn
            why = "nobody answered in time" if result["status"] == "no_answer" else "the question was withdrawn"
            sentences.append(f"No answer to {what} ({why}), so I did nothing.")
        else:
            sentences.append(_phrase(QUESTIONS.get(question or ""), question, result))
    if errors:
        got = (" Still, " + " ".join(s[0].lower() + s[1:] for s in sentences)) if sentences else ""
        return f"{LABEL}Something went wrong: {'; '.join(errors)}.{got} {HELP_HINT}"
    return f"{LABEL}{' '.join(sentences) or 'Nothing was asked.'} {HELP_HINT}"


def _question_text(arguments: str) -> str | None:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    question = args.get("question") if isinstance(args, dict) else None
    return question.strip() if isinstance(question, str) and question.strip() else None


def _parse_result(content: Any) -> dict[str, Any]:
    """A tool message's content as a dict; non-JSON or non-object content becomes ``{"answer": text}``."""
    text = content if isinstance(content, str) else json.dumps(content)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"answer": text, "answer_type": "text"}
    return value if isinstance(value, dict) else {"answer": text, "answer_type": "text"}


def _esc(text: str) -> str:
    """Slack's escaping for text the user typed: ``&``, ``<``, ``>`` (so ``<!channel>`` does not ping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _phrase(known: Question | None, question: str | None, result: dict[str, Any]) -> str:
    """One sentence about one answer, e.g. ``"Deploying to *production*, as <@U1> chose."``."""
    who = result.get("answered_by")
    by = f"<@{who}>" if isinstance(who, str) and who else "you"
    kind = result.get("answer_type")
    answers = result.get("answers")
    if answers is None and isinstance(result.get("answer"), list):  # a framework's answer: the labels themselves
        answers = result["answer"]
    if isinstance(answers, list):
        listed = ", ".join(_esc(str(a)) for a in answers) or "nothing"
        if known is FEATURES:
            return f"Planned: {listed}."
        if known is TOPPING:
            return f"Pizza with {listed} ({len(answers)} of {len(TOPPINGS)} toppings), as {by} chose."
        return f"You chose {listed} for “{question}”."
    answer = _esc(str(result.get("answer", "")))
    if kind == "typed_text":
        return f"None of the options, then: going with *{answer}*, which {by} typed in."
    phrases = {
        "project_name": f"The project is called *{answer}*, as {by} said.",
        "environment": f"Deploying to *{answer}*, as {by} chose.",
        "city": f"The next meetup is in *{answer}* (picked from {len(CITIES)} cities by {by}).",
    }
    if known and known.key in phrases:
        return phrases[known.key]
    return f"You answered *{answer}* to “{question}”." if question else f"You answered *{answer}*."
