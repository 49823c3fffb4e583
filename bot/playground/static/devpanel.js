// The developer panel: every Web API call the app made and every request sent to the app (events and
// interaction payloads), newest first, with timing, Slack's error (e.g. invalid_blocks with its
// json-pointer messages) and the JSON both ways. Filter by text; "Errors only" narrows to failures.
//
//   initDevPanel(root, onErrorCount)   renderLog()   call renderLog() after S.log changes
//   renderTiming()   the "Deadlines and reminders" form, from S.timing (POST /api/timing changes the bot's)

import { el, syncList, toast } from "./dom.js";
import { S, api } from "./store.js";

const KIND = { api: "API", event: "event →", interaction: "action →" };
let root = null;
let onErrors = () => {};
let clearedAt = 0;

function json(value) {
  return el("pre", { class: "json" }, [typeof value === "string" ? value : JSON.stringify(value, null, 2)]);
}

function summaryText(entry) {
  if (entry.kind === "api") return entry.ok ? "ok" : entry.error || "error";
  const response = entry.response;
  let text = entry.ok ? `HTTP ${entry.status}` : entry.error;
  if (response && typeof response === "object" && response.response_action) text += ` · response_action: ${response.response_action}`;
  return text;
}

function subject(entry) {
  const req = entry.request || {};
  if (entry.kind === "api") return req.channel ? ` ${req.channel}` : "";
  if (entry.kind === "event") {
    const ev = req.event || {};
    return `${ev.user ? " by " + ev.user : ""}${ev.channel ? " in " + ev.channel : ""}${entry.retry_num ? " (retry " + entry.retry_num + ")" : ""}`;
  }
  const action = (req.actions || [])[0];
  const who = req.user ? ` by ${req.user.id}` : "";
  return action ? ` ${action.action_id}${who}` : who;
}

function renderEntry(entry) {
  const bad = !entry.ok;
  const summary = el("summary", {}, [
    el("span", { class: `kind ${entry.kind}` }, [KIND[entry.kind] || entry.kind]),
    el("code", { class: "name" }, [entry.name]),
    el("span", { class: "subject" }, [subject(entry)]),
    el("span", { class: bad ? "status bad" : "status" }, [summaryText(entry)]),
    el("span", { class: "ms" }, [`${Number(entry.duration_ms).toFixed(1)} ms`]),
  ]);
  const details = el("details", {}, [summary]);
  if (entry.messages && entry.messages.length) {
    details.append(el("ul", { class: "slack-errors" }, entry.messages.map((m) => el("li", {}, [m]))));
  }
  details.append(
    el("h4", {}, [entry.kind === "api" ? "Request (arguments)" : "Payload sent to the app"]),
    json(entry.request),
    el("h4", {}, [entry.kind === "api" ? "Response" : "Ack"]),
    json(entry.response === "" ? "(empty body)" : entry.response),
  );
  const item = el("li", { class: `entry${bad ? " bad" : ""}`, dataset: { seq: String(entry.seq), name: entry.name } }, [details]);
  if (entry.messages && entry.messages.length) {
    item.append(el("ul", { class: "slack-errors inline" }, entry.messages.map((m) => el("li", {}, [m]))));
  }
  return item;
}

export function renderLog() {
  if (!root) return;
  const filter = root.querySelector("#log-filter").value.trim().toLowerCase();
  const errorsOnly = root.querySelector("#log-errors").checked;
  const entries = [...S.log.values()].filter((e) => e.seq > clearedAt).sort((a, b) => b.seq - a.seq);
  const errors = entries.filter((e) => !e.ok).length;
  const shown = entries.filter((e) => {
    if (errorsOnly && e.ok) return false;
    if (!filter) return true;
    return `${e.kind} ${e.name} ${e.error || ""} ${subject(e)}`.toLowerCase().includes(filter);
  });
  syncList(
    root.querySelector("#log"),
    shown.map((e) => ({ key: String(e.seq), sig: "1", build: () => renderEntry(e) })),
  );
  root.querySelector("#log-count").textContent = `${entries.length} · ${errors} error${errors === 1 ? "" : "s"}`;
  onErrors(errors);
}

export function initDevPanel(panel, onErrorCount) {
  root = panel;
  onErrors = onErrorCount || onErrors;
  root.querySelector("#log-filter").addEventListener("input", renderLog);
  root.querySelector("#log-errors").addEventListener("change", renderLog);
  initTiming();
  root.querySelector("#log-clear").addEventListener("click", () => {
    clearedAt = Math.max(0, ...S.log.keys());
    renderLog();
  });
}

export function renderTiming() {
  if (!root) return;
  const box = root.querySelector("#timing");
  box.hidden = !S.timing;
  if (!S.timing) return;
  const form = root.querySelector("#timing-form");
  root.querySelector("#timing-coalesce").textContent = String(S.timing.coalesce_seconds ?? 10);
  for (const [name, value] of Object.entries(S.timing)) {
    const input = form.elements.namedItem(name);
    if (input && document.activeElement !== input) input.value = value === null || value === undefined ? (input.type === "number" ? "0" : "") : String(value);
  }
}

function initTiming() {
  const form = root.querySelector("#timing-form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = {
      ask_ttl_seconds: Number(data.get("ask_ttl_seconds")),
      on_timeout: String(data.get("on_timeout")),
      remind_after: Number(data.get("remind_after")),
      remind_max: Number(data.get("remind_max")),
      escalate_after: Number(data.get("escalate_after")),
      escalate_to: String(data.get("escalate_to") || ""),
    };
    const result = await api("/api/timing", body);
    if (!result.ok) toast(result.error || "not applied");
    else toast("Applied: new questions use these times.", "info");
  });
}
