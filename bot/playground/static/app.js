// The playground page: header (model, Redis, answer policy, acting user), sidebar, channel, thread or assistant
// pane (they share the side column: opening one closes the other), modal and developer panel, kept live by
// /api/events (server-sent events).

import { closeAssistant, contextChanged, initAssistant, openAssistant, renderAssistant } from "./assistant.js";
import { makeComposer } from "./composer.js";
import { initDevPanel, renderLog, renderTiming } from "./devpanel.js";
import { renderBlocks } from "./blocks.js";
import { el, replaceKeepingFocus, toast } from "./dom.js";
import { renderMessageList, statusLine } from "./messages.js";
import { MESSAGES, hideTabPrompts, openMessagesTab, renderMessagesTab, tabChannel } from "./messagestab.js";
import { renderModal } from "./modal.js";
import { S, STATUS_TTL_MS, api, applyEvent, applySnapshot, dmOf, textCtx, threadKey, userName, valuesKey } from "./store.js";
import { onWorkspaceLink } from "./text.js";

const HOME = "HOME"; // the sidebar's App Home entry (not a channel); MESSAGES: its Messages tab (messagestab.js)
const inApp = (where) => where === HOME || where === MESSAGES; // one of the app's tabs, not a channel

const $ = (id) => document.getElementById(id);
const layout = $("layout");
const pending = new Set();
let frame = 0;
let channelComposer = null;
let threadComposer = null;

// --- rendering ----------------------------------------------------------------------------------------

function schedule(...parts) {
  for (const p of parts) pending.add(p);
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  const parts = new Set(pending);
  pending.clear();
  const all = parts.has("all");
  if (all || parts.has("header")) renderHeader();
  if (all || parts.has("sidebar") || parts.has("messages")) renderSidebar();
  if (all || parts.has("messages") || parts.has("values")) {
    renderChannel();
    renderThread();
    renderAssistant();
    layout.classList.toggle("thread-open", Boolean(S.thread || S.pane));
    layout.classList.toggle("assistant-open", Boolean(S.pane));
  }
  if (all || parts.has("views")) renderModal($("modal-root"));
  if (all || parts.has("log")) renderLog();
  if (all || parts.has("timing")) renderTiming();
}

function renderHeader() {
  const info = S.info;
  const model = $("model-badge");
  model.textContent = info.model === "demo" ? "Demo model (offline)" : `Model: ${info.model_label || "?"}`;
  model.className = `badge ${info.model === "demo" ? "demo" : "live"}`;
  model.title = info.model === "demo" ? "No OPENAI_API_KEY: a scripted offline model. Mention the bot with “help”." : "An OpenAI-compatible model";
  const redis = $("redis-badge");
  redis.textContent = info.redis === "memory" ? "In-process Redis" : info.redis_label || "Redis";
  redis.className = `badge ${info.redis === "memory" ? "demo" : "live"}`;
  redis.title = info.redis === "memory" ? "REDIS_URL is unset: runs live in this process and vanish on restart" : "REDIS_URL: the runs and this workspace (its messages, threads and open modals) outlast a restart";
  const policy = $("policy-badge");
  policy.textContent = info.answerers === "channel" ? "Anyone may answer" : "Only the asker may answer";
  policy.className = "badge";
  policy.title = "ASK_ANSWERERS: switch “Acting as” to try the policy";
  const select = $("user-select");
  if (select.options.length !== S.users.length) {
    select.replaceChildren(...S.users.map((u) => el("option", { value: u.id }, [`${u.real_name || u.name} (@${u.name})`])));
  }
  select.value = S.me;
  $("sidebar-hint").textContent =
    info.model === "demo" ? `Try: “@${S.bot.name} deploy”, “plan”, “name” or “help”.` : `Mention @${S.bot.name} to start.`;
}

function navItem(channel, label, prefix) {
  const unread = S.unread.get(channel) || 0;
  const current = S.current === channel;
  return el("li", {}, [
    el(
      "button",
      {
        type: "button",
        class: `nav-item${current ? " current" : ""}${unread ? " unread" : ""}`,
        "aria-current": current ? "page" : null,
        dataset: { channel },
        onclick: () => openChannel(channel),
      },
      [el("span", { class: "prefix", "aria-hidden": "true" }, [prefix]), label, unread ? el("span", { class: "count" }, [String(unread)]) : null],
    ),
  ]);
}

function renderSidebar() {
  $("app-list").replaceChildren(navItem(HOME, "Home", "⌂"), navItem(MESSAGES, "Messages", "✉"));
  $("channel-list").replaceChildren(...S.channels.filter((c) => !c.is_im).map((c) => navItem(c.id, c.name, "#")));
  const dm = dmOf(S.me);
  $("dm-list").replaceChildren(...(dm ? [navItem(dm, S.bot.name, "@")] : []));
}

const handlers = {
  openThread,
  act,
  dismiss(item) {
    S.dismissed.add(item.key);
    schedule("messages");
  },
};

function renderHome() {
  $("channel-title").textContent = "Home";
  $("channel-sub").textContent = `${S.bot.name}'s App Home, as @${userName(S.me) || S.me}`; // a name, not U_ALICE
  $("composer").hidden = true;
  const view = S.home.get(S.me);
  const values = S.homeValues.get(S.me) || {}; // what this person ticked and chose on their Home (the view's state)
  const ctx = { ...textCtx(), surface: "message", values, act: (kind, detail) => homeAct(kind, detail) };
  const body = view ? renderBlocks(view.blocks || [], ctx) : el("p", { class: "muted" }, ["The app has not published a Home tab for you yet."]);
  $("messages").replaceChildren(el("div", { class: "home blocks" }, [body]));
}

function renderChannel() {
  if (S.current !== MESSAGES) hideTabPrompts();
  if (S.current === HOME) return renderHome();
  if (S.current === MESSAGES) {
    renderMessagesTab(handlers);
    if (channelComposer) channelComposer.refresh();
    return;
  }
  $("composer").hidden = false;
  const channel = S.channels.find((c) => c.id === S.current);
  $("channel-title").textContent = channel ? (channel.is_im ? `@${S.bot.name}` : `# ${channel.name}`) : S.current;
  $("channel-sub").textContent = channel && channel.is_im ? "direct message" : "";
  renderMessageList($("messages"), { channel: S.current, threadTs: null }, handlers);
  if (channelComposer) channelComposer.refresh();
}

function renderThread() {
  const pane = $("thread-pane");
  const open = Boolean(S.thread);
  pane.hidden = !open;
  if (!open) return;
  const where = S.channels.find((c) => c.id === S.thread.channel);
  $("thread-sub").textContent = where ? (where.is_im ? `with @${S.bot.name}` : `in #${where.name}`) : "";
  renderMessageList($("thread-messages"), { channel: S.thread.channel, threadTs: S.thread.ts }, handlers);
  const status = [statusLine(S.thread.channel, S.thread.ts)].filter(Boolean);
  replaceKeepingFocus($("thread-status"), status, () => threadComposer && threadComposer.focus());
  if (threadComposer) threadComposer.refresh();
}

// --- actions ------------------------------------------------------------------------------------------

function openChannel(channel) {
  if (S.current !== channel) {
    S.thread = null;
    if (S.pane && !inApp(channel)) contextChanged(channel); // the person moved: the app hears of it
  }
  if (channel === HOME) api("/api/open_home", { user: S.me });
  if (channel === MESSAGES) openMessagesTab();
  S.current = channel;
  S.unread.delete(channel);
  document.body.classList.remove("nav-open");
  $("nav-toggle").setAttribute("aria-expanded", "false");
  schedule("sidebar", "messages");
  requestAnimationFrame(() => channelComposer && channelComposer.focus());
}

// A link to a message of this workspace (a permalink: an approval request's DM "the thread", the Home's "Open the
// thread") opens that thread here, as Slack's clients do, not a browser tab on a slack.com that isn't there. A
// channel this person can't see (another person's DM) is left to the browser.
function openLinkedThread({ channel, thread }) {
  const known = S.channels.find((c) => c.id === channel);
  if (!known || (known.is_im && known.user !== S.me)) return false;
  openChannel(channel);
  openThread(channel, thread);
  return true;
}

function openThread(channel, ts) {
  S.thread = { channel, ts };
  S.pane = null; // the thread takes the side column
  sideOpened();
  schedule("messages");
  requestAnimationFrame(() => threadComposer && threadComposer.focus());
}

// Actions on one message, or on one person's Home tab, reach the app one at a time, in the order they were made: two
// ticks and a Submit made fast must not race (a Submit handled before the last tick sent without it; an older
// tick's state drawn last).
const acting = new Map(); // values key (a message's, or "home|user") -> the promise of its last action

function inOrder(key, send) {
  const run = (acting.get(key) || Promise.resolve()).catch(() => {}).then(send);
  acting.set(key, run);
  run.finally(() => {
    if (acting.get(key) === run) acting.delete(key);
  });
  return run;
}

function refused(result) {
  if (result.ok) return;
  const ack = result.ack;
  toast(result.error || (ack ? `The app answered ${ack.error || ack.status} (see the developer panel)` : "failed"));
}

// On the Home tab a click, a tick or a choice is a block_actions from the person's Home view, with the view's state
// (what they ticked and chose there) as the fake Slack keeps it.
const HOME_ROUTES = { click: "home_click", toggle: "home_toggle", select: "home_select" };

function homeAct(kind, detail) {
  const user = S.me;
  return inOrder(`home|${user}`, () => sendHomeAction(user, kind, detail));
}

async function sendHomeAction(user, kind, detail) {
  const result = await api(`/api/${HOME_ROUTES[kind]}`, { user, ...detail, block_id: detail.block_id || "" });
  if (result.values) {
    S.homeValues.set(user, result.values);
    schedule("values");
  }
  refused(result);
}

function act(target, kind, detail) {
  return inOrder(valuesKey(target.channel, target.ts, S.me), () => sendAction(target, kind, detail));
}

async function sendAction(target, kind, detail) {
  const result = await api(`/api/${kind}`, { user: S.me, channel: target.channel, ts: target.ts, ephemeral: target.ephemeral, ...detail });
  if (result.values) {
    S.values.set(valuesKey(target.channel, target.ts, S.me), result.values);
    schedule("values");
  }
  refused(result);
}

function switchUser(user) {
  const wasDm = S.channels.find((c) => c.id === S.current)?.is_im;
  S.me = user;
  S.pane = null; // the assistant pane was the previous person's
  localStorage.setItem("playground.me", user);
  if (wasDm) {
    S.current = dmOf(user) || "C_GENERAL";
    S.thread = null;
  }
  if (S.current === HOME) api("/api/open_home", { user });
  if (S.current === MESSAGES) openMessagesTab();
  schedule("all");
}

function setDevOpen(open, { remember = true } = {}) {
  layout.classList.toggle("dev-open", open);
  $("dev-toggle").setAttribute("aria-pressed", String(open));
  if (remember) localStorage.setItem("playground.dev", open ? "1" : "0");
}

// Where the developer panel floats over the right side (app.css: max-width 1180px), a thread or the assistant
// pane opened there would open behind it: the panel makes way (not remembered; "Developer" brings it back).
const devFloats = window.matchMedia("(max-width: 1180px)");
function sideOpened() {
  if (devFloats.matches && layout.classList.contains("dev-open")) setDevOpen(false, { remember: false });
}

// --- live updates -------------------------------------------------------------------------------------

function trackUnread(ev) {
  if (ev.type !== "message" || ev.channel === S.current || ev.message.user === S.me) return;
  if (S.current === MESSAGES && ev.channel === tabChannel()) return; // read in the Messages tab
  const pane = S.panes.get(threadKey(ev.channel, ev.message.thread_ts || ev.message.ts));
  if (pane && pane.user_id === S.me) return; // the person's own assistant pane thread: read there
  // A DM is counted for its person whoever acts now (their badge shows once they act: a DM approval asked while
  // someone else acted), except what that person wrote in it themselves.
  const dm = S.channels.find((c) => c.id === ev.channel);
  if (dm && dm.is_im && ev.message.user === dm.user) return;
  S.unread.set(ev.channel, (S.unread.get(ev.channel) || 0) + 1);
}

function connect() {
  const source = new EventSource("/api/events");
  const conn = $("conn");
  source.onopen = () => {
    conn.textContent = "";
    conn.className = "conn ok";
  };
  source.onerror = () => {
    conn.textContent = "reconnecting…";
    conn.className = "conn bad";
  };
  source.onmessage = (message) => {
    const ev = JSON.parse(message.data);
    if (ev.type === "snapshot") {
      applySnapshot(ev.state);
      if (!S.users.some((u) => u.id === S.me) && S.users.length) S.me = S.users[0].id;
      document.body.dataset.ready = "1";
      schedule("all");
      return;
    }
    trackUnread(ev);
    if (ev.type === "assistant_status" && ev.status) setTimeout(() => schedule("messages"), STATUS_TTL_MS + 100);
    const touched = applyEvent(ev);
    if (touched) schedule(touched);
  };
}

// --- start --------------------------------------------------------------------------------------------

function init() {
  S.me = localStorage.getItem("playground.me") || S.me;
  onWorkspaceLink(openLinkedThread);
  channelComposer = makeComposer($("composer"), {
    target: () => ({ channel: S.current === MESSAGES ? tabChannel() : S.current, thread_ts: null }),
    placeholder: () => {
      if (S.current === MESSAGES) return `Message ${S.bot.name}`;
      const channel = S.channels.find((c) => c.id === S.current);
      const where = channel && channel.is_im ? S.bot.name : `#${channel ? channel.name : ""}`;
      return `Message ${where}`;
    },
    sent: (result) => {
      const message = result.message;
      if (message && S.current === MESSAGES) return openThread(tabChannel(), message.ts); // the reply is in its thread
      const channel = S.channels.find((c) => c.id === S.current);
      if (message && (message.text.includes(`<@${S.bot.id}>`) || (channel && channel.is_im))) openThread(S.current, message.ts);
    },
  });
  threadComposer = makeComposer($("thread-composer"), {
    target: () => ({ channel: S.thread.channel, thread_ts: S.thread.ts }),
    placeholder: () => "Reply…",
  });
  initAssistant({
    handlers,
    schedule,
    opened: () => {
      S.thread = null; // the pane takes the side column
      sideOpened();
    },
  });
  $("assistant-toggle").addEventListener("click", () => (S.pane ? closeAssistant() : openAssistant(inApp(S.current) ? null : S.current)));
  initDevPanel($("devpanel"), (errors) => {
    const badge = $("dev-errors");
    badge.hidden = !errors;
    badge.textContent = String(errors);
    badge.title = `${errors} failed call${errors === 1 ? "" : "s"}`;
  });
  $("user-select").addEventListener("change", (e) => switchUser(e.target.value));
  $("dev-toggle").addEventListener("click", () => setDevOpen(!layout.classList.contains("dev-open")));
  $("dev-close").addEventListener("click", () => setDevOpen(false));
  $("thread-close").addEventListener("click", () => {
    S.thread = null;
    schedule("messages");
    channelComposer.focus();
  });
  $("nav-toggle").addEventListener("click", () => {
    const open = !document.body.classList.contains("nav-open");
    document.body.classList.toggle("nav-open", open);
    $("nav-toggle").setAttribute("aria-expanded", String(open));
  });
  const saved = localStorage.getItem("playground.dev");
  setDevOpen(saved === null ? window.innerWidth >= 1200 : saved === "1");
  connect();
}

init();
