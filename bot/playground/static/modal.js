// The acting user's open modal (top of their view stack): title, blocks with inputs, Close / Submit.
// Submit checks required inputs as Slack's client does ("Please complete this required field."), then
// POSTs /api/submit_view; `response_action: errors` from the app appear under their inputs. Escape closes.
//
//   renderModal(root)   call after any change to S.views / S.viewErrors / S.me

import { renderBlocks } from "./blocks.js";
import { el, refocus, toast } from "./dom.js";
import { plainText } from "./text.js";
import { S, api, textCtx } from "./store.js";

const REQUIRED = "Please complete this required field.";
let shown = null; // {key, root, dialog, inputs, view}

const isEmpty = (v) => v === null || v === undefined || v === "" || (Array.isArray(v) && !v.length);

function setErrors(errors) {
  if (!shown) return;
  for (const node of shown.dialog.querySelectorAll(".bk-error")) {
    const message = errors[node.dataset.blockId] || "";
    node.textContent = message;
    node.parentElement.classList.toggle("has-error", Boolean(message));
    const control = node.parentElement.querySelector("input, textarea, select, fieldset, details");
    if (control) control.toggleAttribute("aria-invalid", Boolean(message));
  }
  const first = shown.dialog.querySelector(".has-error input, .has-error textarea, .has-error select");
  if (first) first.focus();
}

async function submit(view, inputs, submitButton) {
  const values = {};
  const missing = {};
  for (const input of inputs) {
    const value = input.get();
    if (!input.optional && (isEmpty(value) || (typeof value === "string" && !value.length))) missing[input.blockId] = REQUIRED;
    if (!isEmpty(value)) (values[input.blockId] ||= {})[input.actionId] = value;
  }
  if (Object.keys(missing).length) {
    setErrors(missing);
    return;
  }
  submitButton.disabled = true;
  const result = await api("/api/submit_view", { user: S.me, view_id: view.id, values });
  submitButton.disabled = false;
  if (result.errors && Object.keys(result.errors).length) {
    S.viewErrors.set(view.id, result.errors);
    setErrors(result.errors);
  } else if (!result.ok) {
    toast(result.error || (result.ack && result.ack.error) || "the app refused the submission");
  }
}

async function close(view) {
  const result = await api("/api/close_view", { user: S.me, view_id: view.id });
  if (!result.ok) toast(result.error || "could not close the modal");
}

function trapFocus(dialog, e) {
  if (e.key !== "Tab") return;
  const focusable = [...dialog.querySelectorAll("button, input, textarea, select, summary, a[href]")].filter(
    (n) => !n.disabled && n.offsetParent !== null,
  );
  if (!focusable.length) return;
  const first = focusable[0];
  const last = focusable[focusable.length - 1];
  if (e.shiftKey && document.activeElement === first) {
    e.preventDefault();
    last.focus();
  } else if (!e.shiftKey && document.activeElement === last) {
    e.preventDefault();
    first.focus();
  }
}

function build(root, view) {
  const inputs = [];
  const errors = S.viewErrors.get(view.id) || {};
  const titleId = `modal-title-${view.id}`;
  const ctx = { ...textCtx(), surface: "modal", values: (view.state || {}).values || {}, inputs, errors, act: () => {} };
  const submitButton = el("button", { type: "submit", class: "bk-btn primary" }, [plainText(view.submit || { text: "Submit" })]);
  const form = el("form", { class: "modal-body", novalidate: true }, [renderBlocks(view.blocks, ctx)]);
  const footer = el("div", { class: "modal-foot" }, [
    el("button", { type: "button", class: "bk-btn", onclick: () => close(view) }, [plainText(view.close || { text: "Cancel" })]),
    view.submit || inputs.length ? submitButton : null,
  ]);
  form.append(footer);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    submit(view, inputs, submitButton);
  });
  const dialog = el("div", { class: "modal", role: "dialog", "aria-modal": "true", "aria-labelledby": titleId }, [
    el("div", { class: "modal-head" }, [
      el("h2", { id: titleId }, [plainText(view.title || { text: "" })]),
      el("span", { class: "muted" }, [`as ${S.users.find((u) => u.id === S.me)?.name || S.me}`]),
      el("button", { type: "button", class: "icon-btn", "aria-label": "Close", onclick: () => close(view) }, ["✕"]),
    ]),
    form,
  ]);
  dialog.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      close(view);
    } else trapFocus(dialog, e);
  });
  const backdrop = el("div", { class: "modal-backdrop" }, [dialog]);
  root.replaceChildren(backdrop);
  // Focus the first input, else the submit button, else any button (a notice has only Close): keyboard users can
  // always act on, or leave, the modal with Tab / Enter / Escape.
  const first =
    dialog.querySelector("input, textarea, select") ||
    (submitButton && submitButton.isConnected ? submitButton : null) ||
    dialog.querySelector("button");
  if (first) first.focus();
  return { dialog, inputs };
}

// Back to what opened the modal; when that control was re-rendered meanwhile (the question it answered was
// updated), to the same message's new rendering (found by its data-key in the same list), else nothing moves.
function returnFocusTo(back) {
  if (!back || !back.element) return;
  if (back.element.isConnected) return back.element.focus();
  const list = back.list && back.list.isConnected ? back.list : null;
  const item = list && back.key ? [...list.children].find((child) => child.dataset.key === back.key) : null;
  if (item) refocus(item);
}

function focusOrigin(element) {
  const item = element && element.closest ? element.closest("[data-key]") : null;
  return { element, key: item ? item.dataset.key : null, list: item ? item.parentElement : null };
}

export function renderModal(root) {
  const stack = S.views.get(S.me) || [];
  const view = stack[stack.length - 1];
  if (!view) {
    if (shown) {
      root.replaceChildren();
      const back = shown.returnFocus;
      shown = null;
      returnFocusTo(back);
    }
    return;
  }
  const key = `${view.id}|${view.hash}|${S.me}`;
  if (shown && shown.key === key) {
    setErrors(S.viewErrors.get(view.id) || {});
    return;
  }
  const returnFocus = shown ? shown.returnFocus : focusOrigin(document.activeElement);
  const { dialog, inputs } = build(root, view);
  shown = { key, dialog, inputs, view, returnFocus };
}
