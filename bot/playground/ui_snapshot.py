"""What a freshly opened playground page needs: the whole fake workspace as one JSON object (``GET /api/state``, and
the first event of ``GET /api/events``). Shapes are the fake Slack's own (bot.fakeslack.state)::

    {"info": {"model": "demo" | "openai", "model_label", "redis": "memory" | "redis", "redis_label",
              "answerers"},
     "bot": {"id": "U_BOT", "name": "askbot"},
     "users": [{"id": "U_ALICE", "name": "alice", "real_name": "Alice"}],
     "usergroups": [{"id": "S_FINANCE", "handle": "finance"}],   # what <!subteam^S_FINANCE> shows: @finance
     "channels": [{"id": "C_GENERAL", "name": "general", "is_im": false, "user": null}],
     "messages": {"C_GENERAL": [message, ...]},          # history incl. thread replies, oldest first
     "ephemerals": [{"channel", "user", "message"}],
     "views": {"U_ALICE": [view, ...]},                  # each user's modal stack, top last
     "view_errors": {"V123": {"block_id": "message"}},
     "values": [{"channel", "ts", "user", "values"}],    # what each user ticked/selected per message
     "home": {"U_ALICE": view},                          # each user's App Home tab as last published
     "home_values": {"U_ALICE": values},                 # what each user ticked/selected on their Home
     "assistant": {"threads": [{"user_id", "channel_id", "thread_ts", "context"}],   # assistant panes opened
                   "statuses": [{"channel_id", "thread_ts", "status"}],            # current ones only
                   "prompts": [{"channel_id", "thread_ts", "title", "prompts"}],   # the latest per thread
                   "titles": [{"channel_id", "thread_ts", "title"}]},              # the latest per thread
     "sessions": [{"channel_id", "thread_ts", "status", "title", "initiator_user_id", "statuses"}],  # agent sessions
     "timing": {...} | null,                             # the bot's waiting settings (POST /api/timing)
     "log": [LogEntry]}
"""

from __future__ import annotations

from typing import Any

from bot.fakeslack.state import BOT_NAME, BOT_USER_ID, JSON, SlackState
from bot.fakeslack.workspace import Workspace


def snapshot(workspace: Workspace, *, info: JSON, timing: JSON | None, log: list[JSON]) -> JSON:
    """The page's starting state (see the module docstring)."""
    state = workspace.state
    directory = state.directory
    return {
        "info": info,
        "bot": {"id": BOT_USER_ID, "name": BOT_NAME},
        "users": [
            {"id": u["id"], "name": u["name"], "real_name": u.get("real_name", u["name"])}
            for u in directory.users.values()
            if not u.get("is_bot")
        ],
        "usergroups": [{"id": g, "handle": h} for g, h in directory.usergroup_handles.items()],
        "channels": [
            {
                "id": c["id"],
                "name": c.get("name") or directory.user_name(str(c.get("user"))),
                "is_im": bool(c.get("is_im")),
                "user": c.get("user"),
            }
            for c in directory.channels.values()
        ],
        "messages": {cid: list(conv.messages.values()) for cid, conv in state.conversations.items()},
        "ephemerals": [
            {"channel": e.channel, "user": e.user, "message": e.message}
            for conv in state.conversations.values()
            for e in conv.ephemerals
        ],
        "views": {
            user: [state.views[v].data for v in stack if v in state.views]
            for user, stack in state.view_stacks.items()
            if stack
        },
        "view_errors": dict(workspace.view_errors),
        "values": [
            {"channel": c, "ts": t, "user": u, "values": s.values} for (c, t, u), s in state.interactions.items()
        ],
        "home": dict(state.home_views),
        "home_values": {user: values for user, values in state.home_values.items() if user in state.home_views},
        "assistant": assistant_snapshot(state),
        "sessions": list(state.sessions.values()),
        "timing": timing,
        "log": log,
    }


def assistant_snapshot(state: SlackState) -> JSON:
    """The AI app surfaces: panes opened, current statuses, the latest prompts and title of each thread."""
    return {
        "threads": list(state.assistant_threads),
        "statuses": state.current_statuses(),
        "prompts": _latest(state.suggested_prompts),
        "titles": _latest(state.titles),
    }


def _latest(records: list[JSON]) -> list[JSON]:
    """The last record per ``(channel_id, thread_ts)``, in the order their threads first appear."""
    latest: dict[tuple[Any, Any], JSON] = {}
    for record in records:
        latest[(record["channel_id"], record["thread_ts"])] = record
    return list(latest.values())
