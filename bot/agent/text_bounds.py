"""The longest text an outside caller may send in each free-text field: one place for every bound.

An outside caller is an agent asking through ``python -m bot mcp`` (``ask_user`` / ``request_approval``). What it
sends is stored with the question's run in Redis (kept ``RUN_RETENTION_SECONDS`` after it ends) and shown in Slack,
so every field has a bound, checked before anything is posted or stored; a call over it is refused with the
field's name and its bound (the SDK's argument validation, also advertised as ``maxLength`` in the tools' input
schemas). The bounds follow what Slack can show (docs.slack.dev reference/block-kit):

- ``question``: :data:`MAX_QUESTION` (the longest question :mod:`bot.slack.render.blocks` shows whole, its first
  budget);
- an option's ``label`` :data:`MAX_OPTION_LABEL`, ``description`` :data:`MAX_OPTION_DESCRIPTION` (shown shortened on
  buttons and menus, whole in the list under the question);
- ``action`` :data:`MAX_ACTION` (one line), ``details`` :data:`MAX_DETAILS` (as text, or its keys and values
  together as key/values) of an approval request;
- ``context`` :data:`MAX_CONTEXT` (quoted above the question); ``request_key`` :data:`MAX_REQUEST_KEY`;
  ``channel`` / ``user`` :data:`MAX_SLACK_ID` (Slack ids, or ``<#C…|name>`` / ``<@U…>`` mentions).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

MAX_QUESTION = 6000
MAX_OPTION_LABEL = 300
MAX_OPTION_DESCRIPTION = 1000
MAX_ACTION = 300
MAX_DETAILS = 3000
MAX_CONTEXT = 2000
MAX_REQUEST_KEY = 200
MAX_SLACK_ID = 200


def _details_size(value: str | dict[str, str] | None) -> str | dict[str, str] | None:
    """Key/value ``details`` count their keys and values together against :data:`MAX_DETAILS`."""
    if isinstance(value, dict):
        size = sum(len(k) + len(v) for k, v in value.items())
        if size > MAX_DETAILS:
            raise ValueError(f"details must have at most {MAX_DETAILS} characters in its keys and values (got {size})")
    return value


Question = Annotated[str, Field(max_length=MAX_QUESTION)]
OptionLabel = Annotated[str, Field(min_length=1, max_length=MAX_OPTION_LABEL)]
OptionDescription = Annotated[str, Field(max_length=MAX_OPTION_DESCRIPTION)]
Action = Annotated[str, Field(min_length=1, max_length=MAX_ACTION, pattern=r"^[^\n]*$")]
Details = Annotated[Annotated[str, Field(max_length=MAX_DETAILS)] | dict[str, str], AfterValidator(_details_size)]
AskContext = Annotated[str, Field(max_length=MAX_CONTEXT)]
RequestKey = Annotated[str, Field(max_length=MAX_REQUEST_KEY)]
SlackTarget = Annotated[str, Field(max_length=MAX_SLACK_ID)]
