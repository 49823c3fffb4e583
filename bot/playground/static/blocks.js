// Block Kit → DOM, for messages and modals.
//
//   renderBlocks(blocks, ctx) -> DocumentFragment
//
// ctx: text ctx (userName, channelName, me) plus
//   surface: "message" | "modal"
//   values: state.values of this user for this message/view: {block_id: {action_id: {selected_options...}}}
//   act(kind, detail): message (and App Home) interactions; kind "click" {label} | "toggle" {label} |
//     "select" {labels}, each with the element's block_id (a Home shows many questions, whose labels may repeat)
//   inputs: [] (modal only): each input registers {blockId, actionId, label, optional, get() -> value}
//   errors: {block_id: message} (modal only): shown under the input, like Slack
// Block types: section (text, fields, accessory), header, context, divider, actions, image (as a link),
// markdown, rich_text, input; unknown ones show a placeholder. Elements: button (styles, url, confirm),
// static_select, multi_static_select, checkboxes, radio_buttons, overflow, image, plain_text_input.

import { followLink, markdown, plainText, richText, safeUrl, textObject } from "./text.js";

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

function el(tag, className, children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children || []) node.append(child);
  return node;
}

const textOf = (obj) => String((obj && obj.text) ?? "");

function allOptions(element) {
  const options = [...(element.options || [])];
  for (const group of element.option_groups || []) options.push(...(group.options || []));
  return options;
}

function current(ctx, block, element) {
  const byBlock = (ctx.values || {})[block.block_id] || {};
  return byBlock[element.action_id] || null;
}

function selectedValues(ctx, block, element) {
  const entry = current(ctx, block, element);
  if (entry) {
    const picked = entry.selected_options || (entry.selected_option ? [entry.selected_option] : []);
    return new Set(picked.map((o) => o.value));
  }
  const initial = element.initial_options || (element.initial_option ? [element.initial_option] : []);
  return new Set(initial.map((o) => o.value));
}

function imageLink(url, alt, title) {
  const label = `🖼 ${title || alt || "image"}`;
  const href = safeUrl(String(url || ""));
  if (!href) return el("span", "image-link", [label]);
  const a = el("a", "image-link", [label]);
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  a.title = alt || "";
  return a;
}

function confirmed(element) {
  const c = element.confirm;
  if (!c) return true;
  const message = [textOf(c.title), textOf(c.text)].filter(Boolean).join("\n\n");
  return window.confirm(message || "Are you sure?");
}

// --- elements ---------------------------------------------------------------------------------------

function button(element, ctx, block) {
  const b = el("button", "bk-btn", [plainText(element.text)]);
  b.type = "button";
  if (element.style === "primary" || element.style === "danger") b.classList.add(element.style);
  if (element.accessibility_label) b.setAttribute("aria-label", element.accessibility_label);
  if (ctx.surface === "modal") {
    b.disabled = true;
    b.title = "Buttons inside modals are not supported by the playground";
    return b;
  }
  b.addEventListener("click", () => {
    if (!confirmed(element)) return;
    const url = safeUrl(String(element.url || ""));
    if (url) followLink(url);
    ctx.act("click", { label: textOf(element.text), block_id: (block && block.block_id) || "" });
  });
  return b;
}

function staticSelect(block, element, ctx) {
  const select = el("select", "bk-select");
  const placeholder = el("option", "", [textOf(element.placeholder) || "Select an item"]);
  placeholder.value = "";
  placeholder.disabled = true;
  select.append(placeholder);
  const chosen = selectedValues(ctx, block, element);
  const addOption = (parent, o) => {
    const opt = el("option", "", [textOf(o.text)]);
    opt.value = o.value;
    opt.selected = chosen.has(o.value);
    parent.append(opt);
  };
  (element.options || []).forEach((o) => addOption(select, o));
  for (const group of element.option_groups || []) {
    const og = el("optgroup");
    og.label = textOf(group.label);
    (group.options || []).forEach((o) => addOption(og, o));
    select.append(og);
  }
  if (!chosen.size) placeholder.selected = true;
  select.setAttribute("aria-label", textOf(element.placeholder) || "Select an item");
  if (ctx.surface === "modal") {
    registerInput(ctx, block, element, () => {
      const o = allOptions(element).find((x) => x.value === select.value);
      return o ? textOf(o.text) : null;
    });
  } else {
    select.addEventListener("change", () => {
      const o = allOptions(element).find((x) => x.value === select.value);
      if (o && confirmed(element)) ctx.act("select", { labels: [textOf(o.text)], block_id: block.block_id || "" });
    });
  }
  return select;
}

// A list of check boxes: checkboxes elements, and multi_static_select shown as a disclosure with boxes.
function checkList(block, element, ctx, onChange) {
  const chosen = selectedValues(ctx, block, element);
  const fieldset = el("fieldset", "bk-checks");
  const boxes = [];
  for (const o of allOptions(element)) {
    const input = el("input");
    input.type = "checkbox";
    input.value = o.value;
    input.checked = chosen.has(o.value);
    const label = el("label", "bk-check", [input, el("span", "bk-check-text", [textObject(o.text, ctx)])]);
    if (o.description) label.append(el("span", "bk-desc", [textObject(o.description, ctx)]));
    if (onChange) input.addEventListener("change", () => onChange(o, input));
    boxes.push({ option: o, input });
    fieldset.append(label);
  }
  return { fieldset, boxes };
}

function checkboxes(block, element, ctx) {
  if (ctx.surface === "modal") {
    const { fieldset, boxes } = checkList(block, element, ctx, null);
    registerInput(ctx, block, element, () => boxes.filter((b) => b.input.checked).map((b) => textOf(b.option.text)));
    return fieldset;
  }
  const { fieldset } = checkList(block, element, ctx, (o) => ctx.act("toggle", { label: textOf(o.text), block_id: block.block_id || "" }));
  fieldset.setAttribute("aria-label", "Options");
  return fieldset;
}

function multiSelect(block, element, ctx) {
  const details = el("details", "bk-multi");
  const summary = el("summary", "bk-select", []);
  const chosenNow = () => boxes.filter((b) => b.input.checked).map((b) => textOf(b.option.text));
  const refresh = () => {
    const picked = chosenNow();
    summary.textContent = picked.length ? picked.join(", ") : textOf(element.placeholder) || "Select items";
    summary.classList.toggle("placeholder", !picked.length);
  };
  const onChange = ctx.surface === "modal" ? refresh : () => {
    refresh();
    const picked = chosenNow();
    if (picked.length) ctx.act("select", { labels: picked, block_id: block.block_id || "" });
  };
  const { fieldset, boxes } = checkList(block, element, ctx, onChange);
  details.append(summary, fieldset);
  refresh();
  if (ctx.surface === "modal") registerInput(ctx, block, element, chosenNow);
  return details;
}

function radios(block, element, ctx) {
  const chosen = selectedValues(ctx, block, element);
  const fieldset = el("fieldset", "bk-checks");
  const name = nextId("radio");
  const inputs = [];
  for (const o of element.options || []) {
    const input = el("input");
    input.type = "radio";
    input.name = name;
    input.value = o.value;
    input.checked = chosen.has(o.value);
    const label = el("label", "bk-check", [input, el("span", "bk-check-text", [textObject(o.text, ctx)])]);
    if (o.description) label.append(el("span", "bk-desc", [textObject(o.description, ctx)]));
    if (ctx.surface !== "modal") input.addEventListener("change", () => ctx.act("select", { labels: [textOf(o.text)], block_id: block.block_id || "" }));
    inputs.push({ option: o, input });
    fieldset.append(label);
  }
  if (ctx.surface === "modal") {
    registerInput(ctx, block, element, () => {
      const hit = inputs.find((x) => x.input.checked);
      return hit ? textOf(hit.option.text) : null;
    });
  }
  return fieldset;
}

function overflow(block, element, ctx) {
  const details = el("details", "bk-overflow");
  const summary = el("summary", "bk-btn", ["⋯"]);
  summary.setAttribute("aria-label", "More actions");
  const menu = el("div", "bk-menu");
  for (const o of element.options || []) {
    const item = el("button", "bk-menu-item", [plainText(o.text)]);
    item.type = "button";
    item.addEventListener("click", () => {
      details.open = false;
      if (confirmed(element)) ctx.act("select", { labels: [textOf(o.text)], block_id: block.block_id || "" });
    });
    menu.append(item);
  }
  details.append(summary, menu);
  return details;
}

function textInput(block, element, ctx) {
  const multiline = Boolean(element.multiline);
  const input = el(multiline ? "textarea" : "input", "bk-input");
  if (!multiline) input.type = element.type === "email_text_input" ? "email" : element.type === "url_text_input" ? "url" : "text";
  if (multiline) input.rows = 4;
  if (element.max_length) input.maxLength = element.max_length;
  if (element.placeholder) input.placeholder = textOf(element.placeholder);
  if (element.initial_value) input.value = element.initial_value;
  registerInput(ctx, block, element, () => input.value);
  return input;
}

function unsupported(kind) {
  return el("span", "bk-unsupported", [`[${kind} is not shown in the playground]`]);
}

function element(block, e, ctx) {
  switch (e.type) {
    case "button":
      return button(e, ctx, block);
    case "static_select":
      return staticSelect(block, e, ctx);
    case "multi_static_select":
      return multiSelect(block, e, ctx);
    case "checkboxes":
      return checkboxes(block, e, ctx);
    case "radio_buttons":
      return radios(block, e, ctx);
    case "overflow":
      return overflow(block, e, ctx);
    case "image":
      return imageLink(e.image_url, e.alt_text);
    case "plain_text_input":
    case "email_text_input":
    case "url_text_input":
    case "number_input":
      return ctx.surface === "modal" ? textInput(block, e, ctx) : unsupported(e.type);
    default:
      return unsupported(e.type || "element");
  }
}

function registerInput(ctx, block, e, get) {
  if (!ctx.inputs || block.type !== "input") return;
  ctx.inputs.push({ blockId: block.block_id, actionId: e.action_id, label: textOf(block.label), optional: Boolean(block.optional), get });
}

// --- blocks -----------------------------------------------------------------------------------------

function section(block, ctx) {
  const node = el("div", "bk-section");
  const main = el("div", "bk-section-main");
  if (block.text) main.append(el("div", "bk-text", [textObject(block.text, ctx)]));
  if (block.fields && block.fields.length) {
    main.append(el("div", "bk-fields", block.fields.map((f) => el("div", "bk-field", [textObject(f, ctx)]))));
  }
  node.append(main);
  if (block.accessory) node.append(el("div", "bk-accessory", [element(block, block.accessory, ctx)]));
  return node;
}

function input(block, ctx) {
  const id = nextId("input");
  const node = el("div", "bk-input-block");
  const label = el("label", "bk-label", [plainText(block.label)]);
  label.htmlFor = id;
  if (block.optional) label.append(el("span", "bk-optional", [" (optional)"]));
  const control = element(block, block.element || {}, ctx);
  control.id = id;
  node.append(label, control);
  if (block.hint) node.append(el("div", "bk-hint", [plainText(block.hint)]));
  const error = (ctx.errors || {})[block.block_id];
  const errorNode = el("div", "bk-error", error ? [error] : []);
  errorNode.id = `${id}-error`;
  errorNode.setAttribute("role", "alert");
  errorNode.dataset.blockId = block.block_id || "";
  if (error) {
    control.setAttribute("aria-invalid", "true");
    node.classList.add("has-error");
  }
  control.setAttribute("aria-describedby", errorNode.id);
  node.append(errorNode);
  return node;
}

export function renderBlock(block, ctx) {
  switch (block.type) {
    case "section":
      return section(block, ctx);
    case "header":
      return el("div", "bk-header", [plainText(block.text)]);
    case "context":
      return el(
        "div",
        "bk-context",
        (block.elements || []).map((e) => (e.type === "image" ? imageLink(e.image_url, e.alt_text) : el("span", "", [textObject(e, ctx)]))),
      );
    case "divider":
      return el("hr", "bk-divider");
    case "actions":
      return el("div", "bk-actions", (block.elements || []).map((e) => element(block, e, ctx)));
    case "image":
      return el("div", "bk-image", [imageLink(block.image_url, block.alt_text, block.title && textOf(block.title))]);
    case "markdown":
      return markdown(block.text, ctx);
    case "rich_text":
      return richText(block, ctx);
    case "input":
      return input(block, ctx);
    default:
      return el("div", "bk-unsupported", [`[${block.type} block is not shown in the playground]`]);
  }
}

export function renderBlocks(blocks, ctx) {
  const frag = document.createDocumentFragment();
  for (const block of blocks || []) {
    const node = renderBlock(block, ctx);
    if (node.dataset) node.dataset.blockType = block.type;
    frag.append(node);
  }
  return frag;
}
