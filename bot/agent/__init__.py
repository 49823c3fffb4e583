"""Slack-agnostic agent runtime: tools that suspend, the ``ask_user`` tool, runs that resume anywhere.

Public API (mirrors the askUserTool reference's TypeScript API)::

    from bot.agent import Agent, ask_user_tool, OpenAIChatModel
    from bot.store import RedisRunStore
"""

from typing import TYPE_CHECKING

from bot.agent.agent import Agent, new_run_id
from bot.agent.ask_user import AskUserInput, AskUserOption, AskUserPayload, ask_user_tool, make_ask_user_tool
from bot.agent.decisions import Approve, CallDecision, Decline, Reply
from bot.agent.forms import Form, FormReply
from bot.agent.function_tool import tool
from bot.agent.hooks import RunHooks
from bot.agent.model import ChatModel, TextDelta, TurnDone
from bot.agent.model.assembler import ToolCallAssembler
from bot.agent.run_limits import RunLimits
from bot.agent.state import RunState
from bot.agent.stream import AgentStream, Chunk
from bot.agent.tools import Tool, ToolContext

if TYPE_CHECKING:
    from bot.agent.model.openai_chat import OpenAIChatModel

__all__ = [
    "Agent",
    "AgentStream",
    "Approve",
    "AskUserInput",
    "AskUserOption",
    "AskUserPayload",
    "CallDecision",
    "ChatModel",
    "Chunk",
    "Decline",
    "Form",
    "FormReply",
    "OpenAIChatModel",
    "Reply",
    "RunHooks",
    "RunLimits",
    "RunState",
    "TextDelta",
    "Tool",
    "ToolCallAssembler",
    "ToolContext",
    "TurnDone",
    "ask_user_tool",
    "make_ask_user_tool",
    "new_run_id",
    "tool",
]


def __getattr__(name: str) -> object:
    """``OpenAIChatModel``, imported at its first use: the openai client's own import (about 0.8 s of CPU) is paid by
    a process that talks to a model, not by one that only asks people (``bot mcp``). Raises ``AttributeError``
    for any other name."""
    if name == "OpenAIChatModel":
        from bot.agent.model.openai_chat import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
