// Message lists: the channel (top-level messages, "N replies" links) and the open thread (parent + replies),
// each with the ephemeral messages the acting user sees there ("Only visible to you").
//
//   renderMessageList(container, {channel, threadTs|null, hideRoot?, empty?}, handlers)
// handlers: { openThread(channel, ts), act(target, kind, detail) } where target = {channel, ts, ephemeral}.
// hideRoot leaves the thread's parent out (the assistant pane: its root only names the thread); empty is the
// text shown when there is nothing. A streamed message (chat.startStream, `streaming: true` until stopped) shows a
// blinking caret; a thread's assistant status (setStatus) shows as "<bot> <status>" under its root in the channel,
// and statusLine(channel, ts) renders it for a thread pane.

import { renderBlocks } from "./blocks.js";
import { el, formatTime, syncList } from "./dom.js";
import { emojiFor, mrkdwn } from "./text.js";
import { S, api, sessionOf, statusOf, textCtx, userName, valuesKey } from "./store.js";

const COLORS = ["#7c3aed", "#0891b2", "#c2410c", "#15803d", "#be185d", "#4338ca"];

function colorFor(id) {
  let h = 0;
  for (const ch of id) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return COLORS[h % COLORS.length];
}

const isTopLevel = (m) => !m.thread_ts || m.thread_ts === m.ts;
const isBot = (m) => Boolean(m.bot_id) || m.user === S.bot.id;

export function replies(channel, ts) {
  const map = S.messages.get(channel) || new Map();
  return [...map.values()].filter((m) => m.thread_ts === ts && m.ts !== ts);
}

function reactions(message) {
  if (!message.reactions || !message.reactions.length) return null;
  return el(
    "div",
    { class: "reactions" },
    message.reactions.map((r) =>
      el("span", { class: "reaction", title: `:${r.name}: by ${(r.users || []).map((u) => userName(u) || u).join(", ")}` }, [
        `${emojiFor(r.name) || `:${r.name}:`} ${r.count || (r.users || []).length}`,
      ]),
    ),
  );
}

function content(item, handlers) {
  const { message, channel, ephemeral } = item;
  const blocks = message.blocks || [];
  if (!isBot(message) || !blocks.length || (message.text && blocks.every((b) => b.type === "rich_text"))) {
    // People's messages and text-only bot posts: their text (mrkdwn); their rich_text blocks say the same thing.
    return el("div", { class: "text" }, [mrkdwn(message.text || "", textCtx())]);
  }
  const target = { channel, ts: message.ts, ephemeral };
  const ctx = {
    ...textCtx(),
    surface: "message",
    values: S.values.get(valuesKey(channel, message.ts, S.me)) || {},
    act: (kind, detail) => handlers.act(target, kind, detail),
  };
  return el("div", { class: "blocks" }, [renderBlocks(message.blocks, ctx)]);
}

function renderMessage(item, handlers, inThread) {
  const { message, ephemeral } = item;
  const author = message.user || message.bot_id || "?";
  const name = userName(author) || message.username || author;
  const bot = isBot(message);
  const head = el("div", { class: "meta" }, [
    el("span", { class: "author" }, [name]),
    bot ? el("span", { class: "app-tag" }, ["APP"]) : null,
    el("time", { datetime: new Date(parseFloat(message.ts) * 1000).toISOString() }, [formatTime(message.ts)]),
    message.edited ? el("span", { class: "edited" }, ["(edited)"]) : null,
  ]);
  const body = el("div", { class: "msg-body" }, [head]);
  if (ephemeral) {
    body.append(
      el("div", { class: "eph-note" }, [
        el("span", { "aria-hidden": "true" }, ["👁 "]),
        "Only visible to you",
        el("button", { type: "button", class: "linkish", onclick: () => handlers.dismiss(item) }, ["Dismiss"]),
      ]),
    );
  }
  const shown = content(item, handlers);
  if (message.streaming) caretHost(shown).append(el("span", { class: "stream-caret", title: "still writing (streaming)" }, []));
  body.append(shown);
  const reacts = reactions(message);
  if (reacts) body.append(reacts);
  if (!inThread && !ephemeral && isTopLevel(message)) {
    const count = replies(item.channel, message.ts).length;
    const label = count ? `${count} ${count === 1 ? "reply" : "replies"}` : "Reply in thread";
    body.append(
      el("button", { type: "button", class: count ? "thread-link" : "thread-link quiet", onclick: () => handlers.openThread(item.channel, message.ts) }, [label]),
    );
    const status = statusLine(item.channel, message.ts);
    if (status) body.append(status);
  }
  const avatar = bot
    ? el("img", { class: "avatar", src: "/static/favicon.svg", alt: "" })
    : el("div", { class: "avatar", "aria-hidden": "true", style: `background:${colorFor(author)}` }, [name.slice(0, 1).toUpperCase()]);
  return el(
    "article",
    {
      class: `msg${bot ? " bot" : ""}${ephemeral ? " ephemeral" : ""}${message.streaming ? " streaming" : ""}`,
      dataset: { ts: message.ts, channel: item.channel },
      "aria-busy": message.streaming ? "true" : null,
      "aria-label": `${name}${ephemeral ? " (only visible to you)" : ""}`,
    },
    [avatar, body],
  );
}

// Where a streamed message's caret goes: right after its last piece of text (the deepest last element).
function caretHost(node) {
  while (node.lastElementChild && node.lastChild === node.lastElementChild) node = node.lastElementChild;
  return node;
}

// What a thread shows of the app's work: its agent session (title, status, and Slack's Stop while it is
// processing), then "<bot> <status>" while it has an assistant status; null when it has neither.
export function statusLine(channel, ts) {
  const status = statusOf(channel, ts);
  const session = sessionOf(channel, ts);
  if (!status && !session) return null;
  const parts = [];
  if (session) parts.push(sessionLine(channel, ts, session));
  if (status) parts.push(el("p", { class: "status-line", role: "status" }, [el("span", { class: "status-dots", "aria-hidden": "true" }, []), `${S.bot.name} ${status}`]));
  return parts.length === 1 ? parts[0] : el("div", { class: "status-lines" }, parts);
}

// Slack's session statuses in words; "suspended" waits for whoever must answer or decide, who may not be the one looking.
const SESSION_WORDS = { processing: "working", suspended: "waiting for a person", active: "ready", closed: "closed" };

// One agent session: "<title> · <status>", and a Stop button while it is processing (agent_session_stopped).
function sessionLine(channel, ts, session) {
  const children = [
    el("span", { class: `session-status ${session.status}`, title: `agent session: ${session.status}` }, [SESSION_WORDS[session.status] || session.status]),
    el("span", { class: "session-title" }, [session.title || "(untitled)"]),
  ];
  if (session.status === "processing") {
    children.push(
      el("button", { type: "button", class: "session-stop", title: "Stop (agent_session_stopped)", onclick: () => api("/api/stop_session", { user: S.me, channel, thread_ts: ts }) }, ["Stop"]),
    );
  }
  return el("p", { class: "session-line", role: "status", dataset: { session: session.status } }, children);
}

function itemsFor(channel, threadTs, hideRoot) {
  const map = S.messages.get(channel) || new Map();
  const items = [];
  for (const m of map.values()) {
    if (hideRoot && m.ts === threadTs) continue;
    const inView = threadTs ? m.ts === threadTs || m.thread_ts === threadTs : isTopLevel(m);
    if (inView) items.push({ channel, message: m, ephemeral: false });
  }
  for (const [key, e] of S.ephemerals) {
    if (e.channel !== channel || e.user !== S.me || S.dismissed.has(key)) continue;
    const where = e.message.thread_ts || null;
    if ((threadTs && where === threadTs) || (!threadTs && !where)) items.push({ channel, message: e.message, ephemeral: true, key });
  }
  items.sort((a, b) => parseFloat(a.message.ts) - parseFloat(b.message.ts));
  return items;
}

export function renderMessageList(container, { channel, threadTs, hideRoot, empty }, handlers) {
  const nearBottom = container.scrollHeight - container.scrollTop - container.clientHeight < 80;
  const items = itemsFor(channel, threadTs, hideRoot);
  syncList(
    container,
    items.map((item) => {
      const count = threadTs ? 0 : replies(channel, item.message.ts).length;
      const values = S.values.get(valuesKey(channel, item.message.ts, S.me)) || null;
      return {
        key: `${item.ephemeral ? "e" : "m"}|${item.message.ts}`,
        sig: JSON.stringify([item.message, values, S.me, count, S.users.length, threadTs ? "" : [statusOf(channel, item.message.ts), sessionOf(channel, item.message.ts)]]),
        build: () => renderMessage(item, handlers, Boolean(threadTs)),
      };
    }),
  );
  if (!items.length) {
    container.append(el("p", { class: "empty" }, [empty || (threadTs ? "No messages in this thread." : emptyHint())]));
  }
  if (nearBottom) container.scrollTop = container.scrollHeight;
}

function emptyHint() {
  const bot = S.bot.name;
  if (S.info.model === "demo") {
    return `Nothing here yet. Mention @${bot} with "deploy", "plan" or "name" (or "help") to try a question.`;
  }
  return `Nothing here yet. Mention @${bot} to start a conversation.`;
}
