// The app's Messages tab (Slack's agent messaging experience, agent_view): the person's DM with the app, opened
// from the sidebar's "Messages". Opening it tells the app (POST /api/messages_tab: app_home_opened with tab
// "messages"), which greets there once and offers its suggested prompts on the greeting
// (assistant.threads.setSuggestedPrompts). The tab lists the conversations (each top-level message; the bot answers
// in its thread, whose agent session shows under it: status, title and Slack's Stop while it is processing, as in
// channels), shows the latest prompts as chips above the composer, and the composer writes to the app there.
// Slack's docs do not say where a suggested prompt clicked in the Messages tab goes: here it starts a new
// conversation (a top-level message, its thread opened beside), as writing it by hand would.
//
//   MESSAGES (the sidebar entry's id)  openMessagesTab()  tabChannel() -> the DM's id | null
//   renderMessagesTab(handlers)  renderTabPrompts(handlers)

import { el, toast } from "./dom.js";
import { renderMessageList } from "./messages.js";
import { S, api, dmOf, userName } from "./store.js";

export const MESSAGES = "MESSAGES"; // the sidebar's Messages tab entry (not a channel id)
const $ = (id) => document.getElementById(id);

// The channel the Messages tab shows: the acting person's DM with the app (null before it exists).
export function tabChannel() {
  return dmOf(S.me);
}

export async function openMessagesTab() {
  const result = await api("/api/messages_tab", { user: S.me });
  if (!result.ok) toast(result.error || "The app did not acknowledge app_home_opened (see the developer panel)");
}

export function renderMessagesTab(handlers) {
  $("channel-title").textContent = "Messages";
  $("channel-sub").textContent = `${S.bot.name}'s Messages tab, as @${userName(S.me) || S.me}`;
  $("composer").hidden = false;
  const channel = tabChannel();
  renderMessageList($("messages"), { channel, threadTs: null, empty: `Write to ${S.bot.name} to start a conversation.` }, handlers);
  renderTabPrompts(handlers);
}

// The latest suggested prompts the app set in the DM (on its greeting), as chips; hidden when there are none.
export function renderTabPrompts(handlers) {
  const box = $("tab-prompts");
  const channel = tabChannel();
  const records = [...S.prompts.values()].filter((p) => p.channel_id === channel && (p.prompts || []).length);
  const record = records.length ? records[records.length - 1] : null;
  box.hidden = !record;
  if (!record) return box.replaceChildren();
  const chips = record.prompts.map((prompt) =>
    el("button", { type: "button", class: "prompt-chip", title: prompt.message, onclick: () => sendPrompt(prompt, handlers) }, [prompt.title]),
  );
  box.replaceChildren(el("p", { class: "prompts-title" }, [record.title || "Suggested prompts"]), el("div", { class: "prompt-chips" }, chips));
}

export function hideTabPrompts() {
  const box = $("tab-prompts");
  box.hidden = true;
  box.replaceChildren();
}

async function sendPrompt(prompt, handlers) {
  const channel = tabChannel();
  if (!channel) return;
  const result = await api("/api/say", { user: S.me, channel, text: prompt.message });
  if (!result.ok && !result.message) return toast(result.error || "could not send");
  if (!result.ok) toast("The app did not acknowledge the event (see the developer panel).");
  if (result.message) handlers.openThread(channel, result.message.ts);
}
