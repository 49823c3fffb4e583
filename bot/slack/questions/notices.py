"""What people are told about their answers: the fixed notices, and :func:`explain` for a question that can't take
an answer (answered, expired, closed)."""

from __future__ import annotations

from bot.agent.answers import AnswerCheck, Answered, Closed, Expired, Open

STORE_DOWN = "I couldn't reach my storage, so nothing was recorded. Please try again in a moment."
STARTED_UNKNOWN = (
    "I couldn't reach my storage, so I can't tell yet whether I took your message. If nothing comes in a minute,"
    " mention me again."
)
STORE_UNKNOWN = (
    "I couldn't reach my storage, so I can't tell yet whether that was recorded. Look at the question again in a"
    " minute: it shows your answer once it is; if it still waits, answer it again."
)
UNREADABLE = (
    "I can't read the saved state of this conversation, so I can't take answers for it. Mention me to start again."
)
GONE = "This question has expired and its record is gone, so your answer wasn't used. Mention me to start again."
EXPIRED = "This question has expired, so your answer wasn't used. Mention me to start again."
NOT_HERE = "This answer doesn't belong to this conversation, so I ignored it."
NOT_OPEN = "This question is no longer open."
REQUEST_NOT_OPEN = "This approval request is no longer open."  # an approval's buttons and forms say so of theirs
UNKNOWN_BUTTON = "That control doesn't belong to a question I know, so I ignored it."
MULTI_HINT = "Tick the options and press Submit, or reply with the options' names (or numbers) separated by commas."
EXPIRED_OUTCOME = ":hourglass: This question expired without an answer."


def explain(
    check: AnswerCheck, user: str, *, recorded: str | None = None, tried: str | None = None, approval: bool = False
) -> str:
    """What a person trying to answer is told for an outcome other than :class:`~bot.agent.answers.Open`.

    For an answered question it says what was recorded and by whom, and whether what ``user`` tried now was
    recorded (issue 20: a late click on another option was told "Your answer was recorded." though it was
    ignored): ``recorded`` is the recorded answer and ``tried`` this attempt, both mrkdwn the caller made safe
    (e.g. ``*web*``; None: unknown). For an approval (``approval``) both are ``"approved"`` or ``"declined"``:

    - the same answer by ``user``: ``"Your answer *web* was recorded."`` / ``"Your approval was recorded."``;
    - anything else: ``"<@U2> had already answered *api*; your choice *web* was not recorded."`` (``"You had
      already ..."`` for ``user``'s own earlier answer) / ``"<@U2> had already approved this; your decline was not
      recorded."``.
    """
    match check:
        case Answered(answer=answer) if answer.outcome == "cancelled":
            who = (
                "you"
                if answer.answered_by == user
                else f"<@{answer.answered_by}>"
                if answer.answered_by
                else "its asker"
            )
            return f"This {'approval request' if approval else 'question'} was withdrawn by {who}."
        case Answered(answer=answer) if recorded is None:
            if answer.answered_by == user:
                return "Your answer was recorded."
            by = f" by <@{answer.answered_by}>" if answer.answered_by else ""
            return f"This question was already answered{by}."
        case Answered(answer=answer):
            mine = answer.answered_by == user
            if mine and tried in (None, recorded):
                if approval:
                    return f"Your {_NOUNS.get(recorded or '', 'decision')} was recorded."
                return f"Your answer {recorded} was recorded."
            who = "You" if mine else f"<@{answer.answered_by}>" if answer.answered_by else "Someone"
            done = f"{who} had already {recorded} this" if approval else f"{who} had already answered {recorded}"
            if tried is None:
                return f"{done}."
            mine_now = f"your {_NOUNS.get(tried, 'decision')}" if approval else f"your choice {tried}"
            return f"{done}; {mine_now} was not recorded."
        case Expired():
            return EXPIRED
        case Closed():
            return NOT_OPEN
        case Open():
            return ""
    raise AssertionError("unreachable")


_NOUNS = {"approved": "approval", "declined": "decline"}
