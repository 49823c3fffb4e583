"""The limits of an agent's runs as one value: :class:`RunLimits`, given to ``Agent(limits=...)`` at construction.

A deployment's limits (``ASK_TTL_SECONDS``, ``MODEL_TURN_TIMEOUT``, ``MAX_REPLY_CHARS``, ``HISTORY_TOKEN_BUDGET``,
``TOOL_RESULT_MAX_CHARS``) apply to every agent, the built-in one and one loaded with ``AGENT=``: the bot builds its
own agent with them, passes them to a factory that takes ``limits=``, and applies them once to any other factory's
agent with :meth:`bot.agent.agent.Agent.with_limits` before any run starts.
"""

from __future__ import annotations

import math
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
    - ``longest_wait`` (seconds): the longest any question or approval request of the deployment may wait, when
      some wait longer than ``ask_ttl`` (an approval policy's deadlines; None: ``ask_ttl``). What a waiting run
      needs beside its run record (LangGraph's checkpoints; in Slack, where its questions show, their quorums and
      inboxes) is kept this long past the store's retention: :meth:`kept_waiting`.
    """

    ask_ttl: float | None = DEFAULT_ASK_TTL
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS
    history_budget: int | None = DEFAULT_HISTORY_BUDGET
    tool_result_max_chars: int | None = DEFAULT_TOOL_RESULT_MAX_CHARS
    max_options: int | None = None
    longest_wait: float | None = None

    def kept_waiting(self, retention: int) -> int:
        """Seconds to keep, after each write, a record a waiting run still needs: ``retention`` (seconds: how long
        a finished run's records are kept) plus the longest wait (``longest_wait``, else ``ask_ttl``, else none),
        as the run store keeps a waiting run until its deadline plus its retention
        (:meth:`bot.store.RedisRunStore.ttl_for`)."""
        longest = self.longest_wait if self.longest_wait is not None else self.ask_ttl
        return retention + math.ceil(longest or 0)
