"""Every Redis key this project uses, built in one place.

All keys share a configurable prefix (default ``askbot:``) so several deployments, or tests, can share
one Redis without seeing each other's data. Keys that one Lua script or ``MULTI`` touches together share a hash tag
(the part in ``{...}``), so they live in one Redis Cluster slot: a run's keys are tagged ``{<run_id>}``, the work
queue's ``{work}``, an MCP caller's limits ``{mcp_caller:<caller>}``; every other script or ``MULTI`` touches one
key (``due``, ``due:tries``, ``active:``, ``event:``, ``thread:``, ``esc:``). Multi-key writes that need no
atomicity (a question's message and inbox entries) are plain pipelines (:mod:`bot.store.batch`; a cluster client
splits them per node). ``tests/store/test_cluster_slots.py`` checks every script and ``MULTI``.
With a cluster the prefix must hold no ``{``/``}`` (checked in :mod:`bot.config`); the key names are the same on
one Redis and on a cluster.

- ``{prefix}run:{<run_id>}`` - hash ``{rev, state, wid}``: one run (see :mod:`bot.store.redis_store`).
- ``{prefix}lease:{<run_id>}`` - string with a TTL: the process driving the run (owner id); absent when no
  live process is driving it.
- ``{prefix}msgs:{<run_id>}`` - hash whose fields are ``[key, channel_id, ts]`` (JSON): the messages the bot
  posted for each of the run's questions (``key``: its tool_call_id) and notices (see
  :mod:`bot.store.conversations`).
- ``{prefix}stop:{<run_id>}`` - string with a TTL: a person asked the working run to stop (their id).
- ``{prefix}esc:{<run_id>}:{tool_call_id}`` - set: who else may answer a question once it was escalated (user ids,
  and channel ids of channels it was posted to).
- ``{prefix}escalationq:{team_id}:{target}`` / ``reminderq:...`` - set: ``[run_id, tool_call_id, n]`` (JSON) of the
  questions due to be escalated to (reminded to) ``target`` (a channel or user id) in one message (see
  :mod:`bot.slack.questions.follow_ups`).
- ``{prefix}quorum:{<run_id>}:{tool_call_id}:{asking}`` - hash: the approvals gathered so far for one asking of an
  approval request that needs several (user id -> order; ``#seq``, ``#done``: who completed it), see
  :mod:`bot.store.quorum`; ``asking`` names the asking and the arguments approved (an edit starts a new one).
- ``{prefix}event:{event_id}`` - string: a Slack event already taken (retry dedupe).
- ``{prefix}thread:{team_id}:{channel_id}:{thread_ts}`` - hash: the run of a Slack thread.
- ``{prefix}pane:{channel_id}:{thread_ts}`` - string (JSON): what an assistant-pane thread's person is looking at
  (``{channel_id, team_id, enterprise_id}``), see :mod:`bot.store.pane_contexts`.
- ``{prefix}told:{<run_id>}:{tool_call_id}:{user}:{topic}`` - string: a person was told ``topic`` once.
- ``{prefix}active:{person}`` - sorted set: the person's working runs (slot -> when it lapses, ms), see
  :mod:`bot.store.limits`.
- ``{prefix}inbox:{team_id}:{user}`` / ``inbox_done:...`` / ``inbox_of:{<run_id>}:{tool_call_id}``: each person's
  waiting and recently closed questions (:mod:`bot.store.inbox`).
- ``{prefix}home_watched:{team_id}:{user}`` - string with a TTL: the person opened the app's Home tab lately, so
  changes to their inbox are published to it (see :mod:`bot.slack.home`).
- ``{prefix}home_render:{team_id}:{user}`` - string (a counter, with a TTL): renders of the person's Home begun; only
  the latest begun is published (see :mod:`bot.slack.home`).
- ``{prefix}due`` - sorted set: things due later (deadlines, reminders, escalations, Home refreshes), scored by
  when (ms, Redis's clock), see :mod:`bot.store.schedule`.
- ``{prefix}{work}`` - stream: jobs from ``web`` processes for ``worker`` processes; ``{prefix}{work}:job:{id}``
  marks a job id already queued (a resent XADD queues nothing); ``{prefix}{work}:alive:{consumer}`` - string with a
  TTL: the lease of a live worker (consumer name ``host:pid``), see :mod:`bot.store.work_queue`.
- ``{prefix}mcp_rate:{mcp_caller:<caller>}`` - string with a 60 s TTL: the questions an MCP caller asked in its
  current minute; ``{prefix}mcp_waiting:{mcp_caller:<caller>}`` - sorted set: the run ids of its questions asked and
  maybe still waiting (score: when asked, ms); tagged by caller (one script admits a question: both keys), see
  :mod:`bot.mcp_server.limits`.
- ``{prefix}grant:{<team_id>}:{scope_key}`` - hash ``{grant_id: grant JSON}``: the standing grants covering one
  scope (``thread:C..:ts:tool``, ``channel:C..:tool``, ``always:tool:args_hash``), with a TTL of the longest;
  ``{prefix}grants:{<team_id>}:{user}`` - hash ``{grant_id: scope_key}``: the grants a person gave (App Home's list,
  Revoke); ``{prefix}grant_uses:{<team_id>}`` - hash ``{grant_id: uses}``. Tagged by team: the use and the revoke
  scripts touch them together (:mod:`bot.store.grants`).
- ``{prefix}lg:{<thread_id>}:cp:{ns}`` - hash ``{checkpoint_id: [checkpoint, metadata, parent_id]}`` (JSON, typed
  values base64): a LangGraph thread's checkpoints in namespace ``ns``; ``{prefix}lg:{<thread_id>}:blobs:{ns}`` - hash
  ``{channel NUL version: value}``; ``{prefix}lg:{<thread_id>}:writes:{ns}:{checkpoint_id}`` - hash ``{task_id NUL idx:
  [task_id, channel, value, task_path]}``; ``{prefix}lg:{<thread_id>}:keys`` - set: every key above written for the
  thread (any namespace); all with the run store's retention, renewed while the run waits, see
  :mod:`bot.frameworks.langgraph_checkpoint`.
- ``{prefix}playground:workspace`` - string (JSON, ``schema_version``): the playground's fake Slack workspace
  (messages, threads, open views, Home tabs), kept only when the playground runs on a real Redis, see
  :mod:`bot.playground.saved`; ``{prefix}playground:workspace:unreadable`` - string: a saved workspace that could
  not be read, set aside.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "askbot:"


@dataclass(frozen=True)
class Keys:
    """Key builder; ``prefix`` is prepended verbatim (include a separator, e.g. ``"myapp:"``)."""

    prefix: str = DEFAULT_PREFIX

    def run(self, run_id: str) -> str:
        """The hash holding run ``run_id``."""
        return f"{self.prefix}run:{{{run_id}}}"

    def lease(self, run_id: str) -> str:
        """Who drives run ``run_id`` now (same slot as :meth:`run`)."""
        return f"{self.prefix}lease:{{{run_id}}}"

    def run_messages(self, run_id: str) -> str:
        """The messages posted for the run's questions and notices (same slot as :meth:`run`)."""
        return f"{self.prefix}msgs:{{{run_id}}}"

    def stop(self, run_id: str) -> str:
        """Who asked run ``run_id`` to stop (same slot as :meth:`run`)."""
        return f"{self.prefix}stop:{{{run_id}}}"

    def escalated(self, run_id: str, tool_call_id: str) -> str:
        """Who else may answer question ``tool_call_id`` of run ``run_id`` (same slot as :meth:`run`)."""
        return f"{self.prefix}esc:{{{run_id}}}:{tool_call_id}"

    def notice_queue(self, kind: str, team_id: str, target: str) -> str:
        """The questions waiting to be sent to ``target`` together in one ``kind`` message (escalation, reminder)."""
        return f"{self.prefix}{kind}q:{team_id}:{target}"

    def quorum(self, run_id: str, tool_call_id: str, asking: str) -> str:
        """The approvals gathered for one asking (``asking``: its id and the arguments' digest) of approval request
        ``tool_call_id`` of run ``run_id`` (same slot as :meth:`run`)."""
        return f"{self.prefix}quorum:{{{run_id}}}:{tool_call_id}:{asking}"

    def event(self, event_id: str) -> str:
        """The marker of a Slack ``event_id`` already processed."""
        return f"{self.prefix}event:{event_id}"

    def thread(self, team_id: str, *, channel_id: str, thread_ts: str) -> str:
        """The pointer from a Slack thread to its latest run."""
        return f"{self.prefix}thread:{team_id}:{channel_id}:{thread_ts}"

    def pane_context(self, channel_id: str, thread_ts: str) -> str:
        """The context (the channel being viewed) of the assistant-pane thread ``thread_ts`` in DM ``channel_id``."""
        return f"{self.prefix}pane:{channel_id}:{thread_ts}"

    def app_context(self, team_id: str, user: str) -> str:
        """The channel ``user`` looks at with the app open (``app_context_changed``, agent_view)."""
        return f"{self.prefix}appctx:{team_id}:{user}"

    def greeted(self, team_id: str, user: str) -> str:
        """Marks that ``user`` was greeted in the app's Messages tab lately (agent_view)."""
        return f"{self.prefix}greeted:{team_id}:{user}"

    def told(self, run_id: str, *, tool_call_id: str, user: str, topic: str) -> str:
        """Marks that ``user`` was told ``topic`` once about this question."""
        return f"{self.prefix}told:{{{run_id}}}:{tool_call_id}:{user}:{topic}"

    def active_runs(self, person: str) -> str:
        """The slots of ``person``'s working runs (``person``: e.g. ``team:user``)."""
        return f"{self.prefix}active:{person}"

    def inbox(self, team_id: str, user: str) -> str:
        """The questions waiting for ``user`` (sorted set by when asked)."""
        return f"{self.prefix}inbox:{team_id}:{user}"

    def inbox_done(self, team_id: str, user: str) -> str:
        """The questions of ``user`` closed lately (list, newest first)."""
        return f"{self.prefix}inbox_done:{team_id}:{user}"

    def home_watched(self, team_id: str, user: str) -> str:
        """Set while ``user`` opened the app's Home tab lately (a string with a TTL)."""
        return f"{self.prefix}home_watched:{team_id}:{user}"

    def home_render(self, team_id: str, user: str) -> str:
        """How many renders of ``user``'s Home began (a counter with a TTL): a render overtaken by a later one is not
        published."""
        return f"{self.prefix}home_render:{team_id}:{user}"

    def inbox_of(self, run_id: str, tool_call_id: str) -> str:
        """Whose inboxes hold question ``tool_call_id`` of run ``run_id`` (same slot as :meth:`run`)."""
        return f"{self.prefix}inbox_of:{{{run_id}}}:{tool_call_id}"

    def graph_checkpoints(self, thread_id: str, ns: str) -> str:
        """A LangGraph thread's checkpoints in namespace ``ns`` (hash by checkpoint id; one slot per thread)."""
        return f"{self.prefix}lg:{{{thread_id}}}:cp:{ns}"

    def graph_blobs(self, thread_id: str, ns: str) -> str:
        """A LangGraph thread's channel values by ``channel NUL version`` in namespace ``ns``."""
        return f"{self.prefix}lg:{{{thread_id}}}:blobs:{ns}"

    def graph_writes(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        """The pending writes of one LangGraph checkpoint."""
        return f"{self.prefix}lg:{{{thread_id}}}:writes:{ns}:{checkpoint_id}"

    def graph_keys(self, thread_id: str) -> str:
        """Every key written for a LangGraph thread, in any namespace (set): renewed and deleted together."""
        return f"{self.prefix}lg:{{{thread_id}}}:keys"

    def inbox_line(self, run_id: str, tool_call_id: str) -> str:
        """The "recently closed" line last pushed for question ``tool_call_id`` of run ``run_id`` while it still
        moves on (an approved call running), so its next close replaces it (same slot as :meth:`run`)."""
        return f"{self.prefix}inbox_line:{{{run_id}}}:{tool_call_id}"

    def due(self) -> str:
        """The sorted set of scheduled items (:mod:`bot.store.schedule`)."""
        return f"{self.prefix}due"

    def due_tries(self) -> str:
        """Failed attempts per scheduled item (hash, member -> count)."""
        return f"{self.prefix}due:tries"

    def work(self) -> str:
        """The stream of jobs from web processes to workers (consumer group ``workers``)."""
        return f"{self.prefix}{{work}}"

    def work_job(self, job_id: str) -> str:
        """Marks job ``job_id`` as queued (same slot as :meth:`work`)."""
        return f"{self.prefix}{{work}}:job:{job_id}"

    def work_lease(self, consumer: str) -> str:
        """The liveness lease of worker ``consumer`` (same slot as :meth:`work`)."""
        return f"{self.prefix}{{work}}:alive:{consumer}"

    def mcp_rate(self, caller: str) -> str:
        """The count of questions MCP caller ``caller`` asked this minute (``""``: the implicit caller); same slot
        as :meth:`mcp_waiting` (one script admits a question)."""
        return f"{self.prefix}mcp_rate:{{mcp_caller:{caller}}}"

    def mcp_waiting(self, caller: str) -> str:
        """The run ids of MCP caller ``caller``'s questions that may still wait (``""``: the implicit caller)."""
        return f"{self.prefix}mcp_waiting:{{mcp_caller:{caller}}}"

    def grant(self, team_id: str, scope_key: str) -> str:
        """The standing grants covering ``scope_key`` in workspace ``team_id``."""
        return f"{self.prefix}grant:{{{team_id}}}:{scope_key}"

    def grants_of(self, team_id: str, user: str) -> str:
        """The standing grants ``user`` gave in workspace ``team_id``."""
        return f"{self.prefix}grants:{{{team_id}}}:{user}"

    def grant_uses(self, team_id: str) -> str:
        """How many calls each standing grant of workspace ``team_id`` approved."""
        return f"{self.prefix}grant_uses:{{{team_id}}}"

    def playground_workspace(self) -> str:
        """The playground's saved fake workspace (one JSON string; see :mod:`bot.playground.saved`)."""
        return f"{self.prefix}playground:workspace"

    def playground_workspace_unreadable(self) -> str:
        """Where a saved playground workspace that could not be read is set aside (kept, not overwritten)."""
        return f"{self.prefix}playground:workspace:unreadable"
