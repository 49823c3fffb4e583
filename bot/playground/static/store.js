// The page's model of the fake workspace, fed by /api/events (a snapshot, then change events).
//
// S.messages: Map channel -> Map ts -> message        S.ephemerals: Map key -> {channel, user, message}
// S.views: Map user -> [view] (top last)              S.viewErrors: Map view_id -> {block_id: message}
// S.values: Map "channel|ts|user" -> state.values     S.log: Map seq -> LogEntry (bot.playground.ui_events)
// S.home: Map user -> their App Home view             S.timing: the bot's deadline and reminder times
// S.homeValues: Map user -> their Home view's state.values (what they ticked and chose there)
// S.statuses: Map "channel|thread_ts" -> {status, at}  (assistant.threads.setStatus; gone after STATUS_TTL_MS)
// S.prompts / S.titles: Map "channel|thread_ts" -> the latest setSuggestedPrompts / setTitle record
// S.panes: Map "channel|thread_ts" -> assistant pane thread {user_id, channel_id, thread_ts, context}
// S.pane: the acting person's open assistant pane {channel, ts} | null
// S.sessions: Map "channel|thread_ts" -> agent session {channel_id, thread_ts, status, title, initiator_user_id}
// Every event is applied idempotently (upserts keyed by ts/seq), so replays after a snapshot are harmless.

export const S = {
  info: {},
  bot: { id: "U_BOT", name: "askbot" },
  users: [],
  usergroups: [],
  channels: [],
  messages: new Map(),
  ephemerals: new Map(),
  views: new Map(),
  viewErrors: new Map(),
  values: new Map(),
  log: new Map(),
  home: new Map(), // user -> the App Home view the app published for them
  homeValues: new Map(), // user -> that view's state.values: what they ticked and chose on it
  timing: null, // the bot's deadlines and reminder times (developer panel)
  dismissed: new Set(),
  unread: new Map(),
  me: "U_ALICE",
  current: "C_GENERAL",
  thread: null, // {channel, ts}
  statuses: new Map(),
  prompts: new Map(),
  titles: new Map(),
  panes: new Map(),
  pane: null, // {channel, ts}: the assistant pane the acting person has open
  sessions: new Map(), // agents.sessions.setStatus / rename, per thread
};

export const STATUS_TTL_MS = 120_000; // Slack drops a status after two minutes without a message
export const threadKey = (channel, ts) => `${channel}|${ts}`;

const LOG_LIMIT = 1000; // as the server keeps

const ephKey = (channel, user, ts) => `${channel}|${user}|${ts}`;
export const valuesKey = (channel, ts, user) => `${channel}|${ts}|${user}`;

function channelMap(channel) {
  if (!S.messages.has(channel)) S.messages.set(channel, new Map());
  return S.messages.get(channel);
}

export function applySnapshot(state) {
  S.info = state.info || {};
  S.bot = state.bot || S.bot;
  S.users = state.users || [];
  S.usergroups = state.usergroups || [];
  S.channels = state.channels || [];
  S.messages = new Map();
  for (const [channel, list] of Object.entries(state.messages || {})) {
    const map = channelMap(channel);
    for (const m of list) map.set(m.ts, m);
  }
  S.ephemerals = new Map();
  for (const e of state.ephemerals || []) S.ephemerals.set(ephKey(e.channel, e.user, e.message.ts), e);
  S.views = new Map(Object.entries(state.views || {}));
  S.viewErrors = new Map(Object.entries(state.view_errors || {}));
  S.values = new Map();
  for (const v of state.values || []) S.values.set(valuesKey(v.channel, v.ts, v.user), v.values);
  S.log = new Map();
  for (const entry of state.log || []) S.log.set(entry.seq, entry);
  S.home = new Map(Object.entries(state.home || {}));
  S.homeValues = new Map(Object.entries(state.home_values || {}));
  S.timing = state.timing || null;
  const assistant = state.assistant || {};
  S.statuses = new Map();
  for (const s of assistant.statuses || []) S.statuses.set(threadKey(s.channel_id, s.thread_ts), { status: s.status, at: Date.now() });
  S.prompts = new Map((assistant.prompts || []).map((p) => [threadKey(p.channel_id, p.thread_ts), p]));
  S.titles = new Map((assistant.titles || []).map((t) => [threadKey(t.channel_id, t.thread_ts), t]));
  S.panes = new Map((assistant.threads || []).map((t) => [threadKey(t.channel_id, t.thread_ts), t]));
  S.sessions = new Map((state.sessions || []).map((s) => [threadKey(s.channel_id, s.thread_ts), s]));
}

// The thread's agent session (null when it has none).
export function sessionOf(channel, ts) {
  return S.sessions.get(threadKey(channel, ts)) || null;
}

// The status a thread shows now ("" when none or expired).
export function statusOf(channel, ts) {
  const found = S.statuses.get(threadKey(channel, ts));
  return found && Date.now() - found.at < STATUS_TTL_MS ? found.status : "";
}

function forgetValues(channel, ts) {
  for (const key of [...S.values.keys()]) if (key.startsWith(`${channel}|${ts}|`)) S.values.delete(key);
}

// Applies one change event; returns what it touched: "messages" | "views" | "log" | "values" | null.
export function applyEvent(ev) {
  switch (ev.type) {
    case "message": {
      channelMap(ev.channel).set(ev.message.ts, ev.message);
      return "messages";
    }
    case "message_changed": {
      const map = channelMap(ev.channel);
      const before = map.get(ev.message.ts);
      if (!before || JSON.stringify(before.blocks) !== JSON.stringify(ev.message.blocks)) forgetValues(ev.channel, ev.message.ts);
      map.set(ev.message.ts, ev.message);
      return "messages";
    }
    case "message_deleted":
      channelMap(ev.channel).delete(ev.ts);
      return "messages";
    case "ephemeral":
      S.ephemerals.set(ephKey(ev.channel, ev.user, ev.message.ts), { channel: ev.channel, user: ev.user, message: ev.message });
      return "messages";
    case "ephemeral_deleted":
      for (const [key, e] of S.ephemerals) if (e.channel === ev.channel && e.message.ts === ev.ts) S.ephemerals.delete(key);
      return "messages";
    case "view_opened":
      S.views.set(ev.user, [ev.view]);
      return "views";
    case "view_pushed": {
      const stack = (S.views.get(ev.user) || []).filter((v) => v.id !== ev.view.id);
      S.views.set(ev.user, [...stack, ev.view]);
      return "views";
    }
    case "view_updated": {
      const stack = S.views.get(ev.user) || [];
      S.views.set(ev.user, stack.map((v) => (v.id === ev.view.id ? ev.view : v)));
      S.viewErrors.delete(ev.view.id);
      return "views";
    }
    case "view_closed":
      S.views.set(ev.user, (S.views.get(ev.user) || []).filter((v) => v.id !== ev.view_id));
      S.viewErrors.delete(ev.view_id);
      return "views";
    case "view_errors":
      S.viewErrors.set(ev.view_id, ev.errors || {});
      return "views";
    case "values":
      S.values.set(valuesKey(ev.channel, ev.ts, ev.user), ev.values || {});
      return "values";
    case "home_published":
      S.home.set(ev.user, ev.view);
      S.homeValues.set(ev.user, ev.values || {}); // what the fake kept of the state (same ids) with the new view
      return "messages";
    case "home_values":
      S.homeValues.set(ev.user, ev.values || {});
      return "values";
    case "timing":
      S.timing = ev.timing;
      return "timing";
    case "assistant_status": {
      const key = threadKey(ev.channel_id, ev.thread_ts);
      if (ev.status) S.statuses.set(key, { status: ev.status, at: Date.now() });
      else S.statuses.delete(key);
      return "messages";
    }
    case "assistant_prompts":
      S.prompts.set(threadKey(ev.channel_id, ev.thread_ts), ev);
      return "messages";
    case "assistant_title":
      S.titles.set(threadKey(ev.channel_id, ev.thread_ts), ev);
      return "messages";
    case "agent_session":
      S.sessions.set(threadKey(ev.session.channel_id, ev.session.thread_ts), ev.session);
      return "messages";
    case "assistant_thread":
      S.panes.set(threadKey(ev.thread.channel_id, ev.thread.thread_ts), ev.thread);
      return "messages";
    case "log":
      S.log.set(ev.entry.seq, ev.entry);
      if (S.log.size > LOG_LIMIT) S.log.delete(S.log.keys().next().value); // oldest first (insertion order)
      return "log";
    default:
      return null;
  }
}

export function userName(id) {
  if (id === S.bot.id) return S.bot.name;
  const user = S.users.find((u) => u.id === id);
  return user ? user.name : null;
}

export function channelName(id) {
  const channel = S.channels.find((c) => c.id === id);
  if (!channel) return null;
  return channel.is_im ? S.bot.name : channel.name;
}

export function groupName(id) {
  const group = S.usergroups.find((g) => g.id === id);
  return group ? group.handle : null;
}

export function textCtx() {
  return { userName, channelName, groupName, me: S.me };
}

export function dmOf(user) {
  const channel = S.channels.find((c) => c.is_im && c.user === user);
  return channel ? channel.id : null;
}

// POST JSON to the playground server; resolves to its answer ({ok, error?, ...}), never throws.
export async function api(path, body) {
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({ ok: false, error: `HTTP ${response.status}` }));
    return data;
  } catch (err) {
    return { ok: false, error: `the playground server did not answer (${err})` };
  }
}
