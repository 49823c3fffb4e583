// Message lists: the channel (top-level messages, "N replies" links) and the open thread (parent + replies),
// each with the ephemeral messages the acting user sees there ("Only visible to you").
//
//   renderMessageList(container, {channel, threadTs|null}, handlers)
// handlers: { openThread(channel, ts), act(target, kind, detail) } where target = {channel, ts, ephemeral}.

import { renderBlocks } from "./blocks.js";
import { el, formatTime, syncList } from "./dom.js";
import { emojiFor, mrkdwn } from "./text.js";
import { S, textCtx, userName, valuesKey } from "./store.js";

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
  if (!isBot(message) || !(message.blocks || []).length) {
    // People's messages: their text (mrkdwn); their rich_text blocks say the same thing.
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
  body.append(content(item, handlers));
  const reacts = reactions(message);
  if (reacts) body.append(reacts);
  if (!inThread && !ephemeral && isTopLevel(message)) {
    const count = replies(item.channel, message.ts).length;
    const label = count ? `${count} ${count === 1 ? "reply" : "replies"}` : "Reply in thread";
    body.append(
      el("button", { type: "button", class: count ? "thread-link" : "thread-link quiet", onclick: () => handlers.openThread(item.channel, message.ts) }, [label]),
    );
  }
  const avatar = bot
    ? el("img", { class: "avatar", src: "/static/favicon.svg", alt: "" })
    : el("div", { class: "avatar", "aria-hidden": "true", style: `background:${colorFor(author)}` }, [name.slice(0, 1).toUpperCase()]);
  return el(
    "article",
    {
      class: `msg${bot ? " bot" : ""}${ephemeral ? " ephemeral" : ""}`,
      dataset: { ts: message.ts, channel: item.channel },
      "aria-label": `${name}${ephemeral ? " (only visible to you)" : ""}`,
    },
    [avatar, body],
  );
}

function itemsFor(channel, threadTs) {
  const map = S.messages.get(channel) || new Map();
  const items = [];
  for (const m of map.values()) {
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

export function renderMessageList(container, { channel, threadTs }, handlers) {
  const nearBottom = container.scrollHeight - container.scrollTop - container.clientHeight < 80;
  const items = itemsFor(channel, threadTs);
  syncList(
    container,
    items.map((item) => {
      const count = threadTs ? 0 : replies(channel, item.message.ts).length;
      const values = S.values.get(valuesKey(channel, item.message.ts, S.me)) || null;
      return {
        key: `${item.ephemeral ? "e" : "m"}|${item.message.ts}`,
        sig: JSON.stringify([item.message, values, S.me, count, S.users.length]),
        build: () => renderMessage(item, handlers, Boolean(threadTs)),
      };
    }),
  );
  if (!items.length) {
    container.append(el("p", { class: "empty" }, [threadTs ? "No messages in this thread." : emptyHint()]));
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
