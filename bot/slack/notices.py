"""What people are told about their answers: the fixed notices, and :func:`explain` for a question that can't take
an answer (answered, expired, closed)."""

from __future__ import annotations

from bot.agent.answers import AnswerCheck, Answered, Closed, Expired, Open

STORE_DOWN = "I couldn't reach my storage, so nothing was recorded. Please try again in a moment."
UNREADABLE = (
    "I can't read the saved state of this conversation, so I can't take answers for it. Mention me to start again."
)
GONE = "This question has expired and its record is gone, so your answer wasn't used. Mention me to start again."
EXPIRED = "This question has expired, so your answer wasn't used. Mention me to start again."
NOT_HERE = "This answer doesn't belong to this conversation, so I ignored it."
NOT_OPEN = "This question is no longer open."
UNKNOWN_BUTTON = "That control doesn't belong to a question I know, so I ignored it."
MULTI_HINT = "Tick the options and press Submit, or reply with the options' names (or numbers) separated by commas."
EXPIRED_OUTCOME = ":hourglass: This question expired without an answer."


def explain(check: AnswerCheck, user: str) -> str:
    """What a person trying to answer is told for an outcome other than :class:`~bot.agent.answers.Open`."""
    match check:
        case Answered(answer=answer) if answer.outcome == "cancelled":
            who = (
                "you"
                if answer.answered_by == user
                else f"<@{answer.answered_by}>"
                if answer.answered_by
                else "its asker"
            )
            return f"This question was withdrawn by {who}."
        case Answered(answer=answer) if answer.answered_by == user:
            return "Your answer was recorded."
        case Answered(answer=answer):
            who = f" by <@{answer.answered_by}>" if answer.answered_by else ""
            return f"This question was already answered{who}."
        case Expired():
            return EXPIRED
        case Closed():
            return NOT_OPEN
        case Open():
            return ""
    raise AssertionError("unreachable")
