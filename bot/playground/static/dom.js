// Small DOM helpers: el() builds nodes from text (never HTML); syncList() reconciles keyed children.

export function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") node.style.cssText = value; // CSSOM: allowed by the page's CSP, unlike the attribute
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  for (const child of children || []) if (child !== null && child !== undefined) node.append(child);
  return node;
}

// items: [{key, sig, build() -> Element}]. Children whose key and sig are unchanged are kept as they are
// (so focus and open menus survive live updates); changed ones are rebuilt; order follows items. Focus in an item
// that goes away (a dismissed ephemeral, a deleted message) moves to the item now in its place (else the last one).
export function syncList(container, items) {
  const existing = new Map();
  const before = [...container.children];
  const focusedAt = before.findIndex((child) => child.contains(document.activeElement));
  for (const child of before) {
    if (child.dataset.key) existing.set(child.dataset.key, child);
    else child.remove();
  }
  let prev = null;
  for (const item of items) {
    let node = existing.get(item.key);
    if (!node || node.dataset.sig !== item.sig) {
      const fresh = item.build();
      fresh.dataset.key = item.key;
      fresh.dataset.sig = item.sig;
      if (node) {
        keepUiState(node, fresh);
        const hadFocus = node.contains(document.activeElement);
        const focusAt = focusIndex(node);
        node.replaceWith(fresh);
        if (hadFocus) refocus(fresh, focusAt);
      }
      node = fresh;
    }
    existing.delete(item.key);
    const want = prev ? prev.nextElementSibling : container.firstElementChild;
    if (node !== want) container.insertBefore(node, want);
    prev = node;
  }
  const lost = focusedAt >= 0 && [...existing.values()].includes(before[focusedAt]);
  for (const node of existing.values()) node.remove();
  if (lost) {
    const kept = [...container.children].filter((child) => child.dataset.key);
    const place = kept[Math.min(focusedAt, kept.length - 1)];
    if (place) refocus(place);
  }
}

// Replace container's children (a live status line), keeping a keyboard user's place: focus on a control inside
// (the session's Stop button) moves to the control at the same index in the new children, else to fallback() (the
// pane's composer) once that control is gone, never to the page.
export function replaceKeepingFocus(container, children, fallback) {
  const hadFocus = container.contains(document.activeElement);
  const focusAt = hadFocus ? focusIndex(container) : -1;
  container.replaceChildren(...children);
  if (!hadFocus) return;
  const control = focusAt >= 0 ? [...container.querySelectorAll(FOCUSABLE)][focusAt] : null;
  if (control) control.focus();
  else if (fallback) fallback();
}

export function formatTime(ts) {
  const date = new Date(parseFloat(ts) * 1000);
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

export function toast(message, kind = "error") {
  const root = document.getElementById("toasts");
  const node = el("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, [message]);
  root.append(node);
  setTimeout(() => node.remove(), 6000);
}

const FOCUSABLE = "button, input, select, textarea, summary, a[href]";

// Open disclosures (multi-select menus, overflow menus) stay open when a message is re-rendered.
function keepUiState(old, fresh) {
  const before = [...old.querySelectorAll("details")];
  const after = [...fresh.querySelectorAll("details")];
  before.forEach((d, i) => {
    if (d.open && after[i]) after[i].open = true;
  });
}

// Focus inside a re-rendered item stays there: on the control at the same index, else (the control went away:
// the question was answered and its buttons replaced) on the item itself, so the page never takes it and the next
// Tab goes on from the answered message.
export function refocus(item, focusAt = -1) {
  const control = focusAt >= 0 ? [...item.querySelectorAll(FOCUSABLE)][focusAt] : null;
  if (control) return control.focus();
  if (!item.hasAttribute("tabindex")) item.tabIndex = -1;
  item.focus({ preventScroll: true });
}

// Keyboard users keep their place: the index of the focused control, to focus the same one after a re-render.
function focusIndex(node) {
  const active = document.activeElement;
  if (!active || !node.contains(active)) return -1;
  return [...node.querySelectorAll(FOCUSABLE)].indexOf(active);
}
