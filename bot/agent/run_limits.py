"""The limits of an agent's runs as one value: :class:`RunLimits`, given to ``Agent(limits=...)`` at construction.

A deployment's limits (``ASK_TTL_SECONDS``, ``MODEL_TURN_TIMEOUT``, ``MAX_REPLY_CHARS``, ``HISTORY_TOKEN_BUDGET``,
``TOOL_RESULT_MAX_CHARS``) apply to every agent, the built-in one and one loaded with ``AGENT=``: the bot builds its
own agent with them, passes them to a factory that takes ``limits=``, and applies them once to any other factory's
agent with :meth:`bot.agent.agent.Agent.with_limits` before any run starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent._loop.budget import DEFAULT_HISTORY_BUDGET
from bot.agent.tools import DEFAULT_TOOL_RESULT_MAX_CHARS

DEFAULT_MAX_TURNS = 20
DEFAULT_ASK_TTL = 24 * 3600.0
DEFAULT_TURN_TIMEOUT = 300.0
DEFAULT_MAX_REPLY_CHARS = 40_000


@dataclass(frozen=True, kw_only=True)
class RunLimits:
    """What a deployment bounds each run by (``None``: unbounded). The turn limit (``Agent(max_turns=...)``) is not
    one of them: it is the agent's own (how many steps its work takes), and a deployment leaves it as it is.

    - ``ask_ttl`` (seconds): how long a suspended question waits for its answer (its deadline is stored with it).
    - ``turn_timeout`` (seconds) and ``max_reply_chars`` (characters) bound one model turn; past either the run
      fails, retryable.
    - ``history_budget`` (tokens): what one model request may carry (:mod:`bot.agent._loop.budget`).
    - ``tool_result_max_chars`` (characters): the most of one tool result's text the model gets
      (:func:`bot.agent.tools.bounded_result`).
    - ``max_options``: the most options one question may offer, its frontend's (Slack shows at most 100, a select
      menu's limit): a tool call suspending with more gets a tool error the model reads
      (:func:`bot.agent.ask_user.too_many_options`); a framework's question with more is asked as free text.
    """

    ask_ttl: float | None = DEFAULT_ASK_TTL
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS
    history_budget: int | None = DEFAULT_HISTORY_BUDGET
    tool_result_max_chars: int | None = DEFAULT_TOOL_RESULT_MAX_CHARS
    max_options: int | None = None
