"""The approval policy as data (``APPROVAL_POLICY``, docs/approvals.md): which tool calls need a person's OK, who
may give it, how many, where, until when, and how the call is shown. Slack-aware only through ids: nothing here
imports Bolt or talks to Slack, so the runtime, the Slack layer, the MCP server and the CLI
(:mod:`bot.approval_policy.cli`) all read the same file the same way.

A file (YAML ``.yaml``/``.yml`` or TOML ``.toml``) is ``version`` (optional, ``1``) and ``rules``, a list of
:class:`Rule`. Rules match in order on the tool's name (``tool``, globs), on its arguments (``when``, a declarative
:class:`Condition` per argument path: equals, ``in``, ``gt`` / ``gte`` / ``lt`` / ``lte``, ``glob``, ``regex``,
``present``; no ``eval``), and on who asked (``requester``: users, user groups, channels). The first match decides;
the last rule must match every call (``tool: "*"``, no ``when``, no ``requester``).

:func:`load_policy` reads and validates a file, raising :class:`PolicyError` whose ``problems`` are one line per
problem naming the rule and the field (``rule 2 ('big refunds'): when.amount.gt: must be a number``).
:meth:`Policy.decide` gives the :class:`Decision` for one call, with the conditions it checked (``why``).
:meth:`Policy.from_approvers` is the one-rule policy ``APPROVERS`` stands for when no file is set.

Carried out in Slack (:mod:`bot.slack.questions.approvers`, :mod:`bot.slack.approvals`): ``require``,
``approvers`` (user groups and channels' members looked up), ``requester.groups``, the decline at once of a call
nobody may approve, quorum (``required``, ``requester_counts``), ``edit``, ``where``, ``arguments`` and
``deadline``; ``on_deadline: escalate`` and ``grants`` beyond ``once`` are parsed and validated, not carried out
yet (docs/approvals.md says which are in effect).

The package, by concept: :mod:`~bot.approval_policy.conditions` (what one argument must be),
:mod:`~bot.approval_policy.rules` (a rule and the file's schema), :mod:`~bot.approval_policy.decisions` (the
decision for one call, and why), :mod:`~bot.approval_policy.loading` (reading a file, its errors) and
:mod:`~bot.approval_policy.cli` (``python -m bot policy``). Their public names are importable from here.
"""

from bot.approval_policy.conditions import MAX_REGEX, Condition, lookup
from bot.approval_policy.decisions import Check, Decision, Policy, Tried, rule_name, unsatisfiable
from bot.approval_policy.loading import MAX_FILE_BYTES, PolicyError, from_data, load_policy, parse_text
from bot.approval_policy.rules import (
    CHANNEL_ID,
    CHANNEL_PREFIX,
    DEFAULT_GRANT_FOR,
    GRANTS,
    GROUP_HANDLE,
    GROUP_ID,
    MAX_GRANT_FOR,
    MAX_REQUIRED,
    MAX_RULES,
    REQUESTER,
    RUN_CHANNEL,
    USER_ID,
    Arguments,
    Escalation,
    Grant,
    PolicyFile,
    RequesterMatch,
    Require,
    Rule,
)

__all__ = [
    "CHANNEL_ID",
    "CHANNEL_PREFIX",
    "DEFAULT_GRANT_FOR",
    "GRANTS",
    "GROUP_HANDLE",
    "GROUP_ID",
    "MAX_FILE_BYTES",
    "MAX_GRANT_FOR",
    "MAX_REGEX",
    "MAX_REQUIRED",
    "MAX_RULES",
    "REQUESTER",
    "RUN_CHANNEL",
    "USER_ID",
    "Arguments",
    "Check",
    "Condition",
    "Decision",
    "Escalation",
    "Grant",
    "Policy",
    "PolicyError",
    "PolicyFile",
    "RequesterMatch",
    "Require",
    "Rule",
    "Tried",
    "from_data",
    "load_policy",
    "lookup",
    "parse_text",
    "rule_name",
    "unsatisfiable",
]
