// The assistant pane: Slack's AI split view, beside the channel. "Assistant" in the header opens a new assistant
// thread for the acting person (POST /api/open_assistant: a thread in their DM with the bot, and the app gets
// assistant_thread_started with the channel they are viewing as context). The pane shows the thread's messages
// with the same Block Kit renderer as channels, its title (assistant.threads.setTitle), its suggested prompts as
// chips (assistant.threads.setSuggestedPrompts; a click sends the prompt's message as the person's), the status
// line (assistant.threads.setStatus) and a composer. Viewing another channel while it is open tells the app
// (POST /api/assistant_context: assistant_thread_context_changed).
//
//   initAssistant({handlers, schedule, opened()})  renderAssistant()  openAssistant(contextChannel)
//   closeAssistant()  contextChanged(channel)

import { makeComposer } from "./composer.js";
import { el, replaceKeepingFocus, toast } from "./dom.js";
import { renderMessageList, statusLine } from "./messages.js";
import { S, api, threadKey } from "./store.js";

const $ = (id) => document.getElementById(id);
let composer = null;
let options = null;

export function initAssistant(opts) {
  options = opts;
  composer = makeComposer($("assistant-composer"), {
    target: () => ({ channel: S.pane.channel, thread_ts: S.pane.ts }),
    placeholder: () => `Message ${S.bot.name}`,
  });
  $("assistant-close").addEventListener("click", () => closeAssistant());
}

export async function openAssistant(contextChannel) {
  const result = await api("/api/open_assistant", { user: S.me, context_channel: contextChannel || "" });
  if (!result.ok) {
    toast(result.error || "could not open the assistant");
    return;
  }
  S.pane = { channel: result.channel, ts: result.thread_ts };
  options.opened();
  options.schedule("messages");
  requestAnimationFrame(() => composer.focus());
}

export function closeAssistant() {
  S.pane = null;
  options.schedule("messages");
}

export async function contextChanged(channel) {
  if (!S.pane) return;
  const result = await api("/api/assistant_context", { user: S.me, thread_ts: S.pane.ts, channel });
  if (!result.ok) toast(result.error || "could not tell the app where you are");
}

export function renderAssistant() {
  const pane = $("assistant-pane");
  const open = Boolean(S.pane);
  pane.hidden = !open;
  $("assistant-toggle").setAttribute("aria-pressed", String(open));
  if (!open) return;
  const { channel, ts } = S.pane;
  const key = threadKey(channel, ts);
  const title = S.titles.get(key);
  $("assistant-title").textContent = title ? title.title : "New chat";
  const context = (S.panes.get(key) || {}).context || {};
  const where = S.channels.find((c) => c.id === context.channel_id);
  $("assistant-sub").textContent = where ? `viewing ${where.is_im ? "a DM" : `#${where.name}`}` : "";
  renderMessageList($("assistant-messages"), { channel, threadTs: ts, hideRoot: true, empty: `Ask ${S.bot.name} anything.` }, options.handlers);
  replaceKeepingFocus($("assistant-status"), [statusLine(channel, ts)].filter(Boolean), () => composer.focus());
  renderPrompts(S.prompts.get(key));
  composer.refresh();
}

function renderPrompts(record) {
  const box = $("assistant-prompts");
  box.hidden = !record;
  if (!record) return box.replaceChildren();
  const chips = record.prompts.map((prompt) =>
    el("button", { type: "button", class: "prompt-chip", title: prompt.message, onclick: () => sendPrompt(prompt) }, [prompt.title]),
  );
  box.replaceChildren(el("p", { class: "prompts-title" }, [record.title || "Suggested prompts"]), el("div", { class: "prompt-chips" }, chips));
}

async function sendPrompt(prompt) {
  if (!S.pane) return;
  const result = await api("/api/say", { user: S.me, channel: S.pane.channel, text: prompt.message, thread_ts: S.pane.ts });
  if (!result.ok && !result.message) toast(result.error || "could not send");
  else if (!result.ok) toast("The app did not acknowledge the event (see the developer panel).");
}
