// Slack text → DOM nodes. Never uses innerHTML: every piece of text becomes a text node.
//
//   mrkdwn(text, ctx)    Slack mrkdwn: *bold* _italic_ ~strike~ `code` ```pre``` > quote, <@U>, <#C|name>,
//                        <!here>, <url|label>, :emoji:; &amp; &lt; &gt; unescaped (once, safely).
//   markdown(text, ctx)  the `markdown` block's standard Markdown: # headings, **bold**, *italic*, lists,
//                        [label](url), `code`, ``` fences, > quotes (plus Slack's <@U> mentions).
//   richText(block, ctx) a rich_text block (what people's messages carry).
//   plainText(obj)       a plain_text object (:emoji: converted when emoji is not false).
// ctx: { userName(id) -> string, channelName(id) -> string, groupName(id) -> string (a user group's handle), me: "U_ALICE" }

// Slack's emoji shortcodes -> characters: every one the bot itself writes (tests/ui/test_ui_emoji.py checks that
// against bot/), plus the common ones people and apps use. Unknown names stay as typed, as Slack shows them.
const EMOJI = {
  // the bot's own
  question: "❓", grey_question: "❔", white_check_mark: "✅", heavy_check_mark: "✔️", x: "❌",
  heavy_multiplication_x: "✖️", warning: "⚠️", hourglass: "⌛", hourglass_flowing_sand: "⏳", repeat: "🔁",
  raised_hand: "✋", hand: "✋", bell: "🔔", no_bell: "🔕", arrow_up: "⬆️", octagonal_sign: "🛑",
  double_vertical_bar: "⏸️", no_entry: "⛔", no_entry_sign: "🚫", robot_face: "🤖",
  // arrows and signs
  arrow_down: "⬇️", arrow_left: "⬅️", arrow_right: "➡️", arrow_forward: "▶️", arrow_backward: "◀️",
  arrow_upper_right: "↗️", arrow_lower_right: "↘️", arrow_heading_up: "⤴️", arrow_heading_down: "⤵️",
  leftwards_arrow_with_hook: "↩️", arrow_right_hook: "↪️", arrows_counterclockwise: "🔄", arrows_clockwise: "🔃",
  fast_forward: "⏩", rewind: "⏪", black_square_for_stop: "⏹️", twisted_rightwards_arrows: "🔀",
  heavy_plus_sign: "➕", heavy_minus_sign: "➖", exclamation: "❗", heavy_exclamation_mark: "❗",
  grey_exclamation: "❕", bangbang: "‼️", interrobang: "⁉️", information_source: "ℹ️", o: "⭕",
  negative_squared_cross_mark: "❎", ballot_box_with_check: "☑️", recycle: "♻️", new: "🆕", up: "🆙", ok: "🆗",
  cool: "🆒", sos: "🆘", free: "🆓", "100": "💯", link: "🔗", lock: "🔒", unlock: "🔓", key: "🔑",
  white_circle: "⚪", black_circle: "⚫", red_circle: "🔴", large_blue_circle: "🔵", blue_circle: "🔵",
  large_green_circle: "🟢", large_yellow_circle: "🟡", large_orange_circle: "🟠", large_purple_circle: "🟣",
  white_large_square: "⬜", black_large_square: "⬛", large_green_square: "🟩", large_red_square: "🟥",
  rotating_light: "🚨", construction: "🚧", triangular_flag_on_post: "🚩", checkered_flag: "🏁",
  white_flag: "🏳️", vertical_traffic_light: "🚦", traffic_light: "🚥",
  // hands and people
  "+1": "👍", thumbsup: "👍", "-1": "👎", thumbsdown: "👎", wave: "👋", ok_hand: "👌", clap: "👏",
  raised_hands: "🙌", pray: "🙏", muscle: "💪", point_right: "👉", point_left: "👈", point_up: "☝️",
  point_up_2: "👆", point_down: "👇", v: "✌️", crossed_fingers: "🤞", handshake: "🤝", fist: "✊", punch: "👊",
  raised_hand_with_fingers_splayed: "🖐️", writing_hand: "✍️", raising_hand: "🙋", shrug: "🤷", face_palm: "🤦",
  eyes: "👀", brain: "🧠", bust_in_silhouette: "👤", busts_in_silhouette: "👥",
  "skin-tone-2": "🏻", "skin-tone-3": "🏼", "skin-tone-4": "🏽", "skin-tone-5": "🏾", "skin-tone-6": "🏿",
  // faces
  smile: "😄", smiley: "😃", grinning: "😀", grin: "😁", laughing: "😆", sweat_smile: "😅", joy: "😂",
  rolling_on_the_floor_laughing: "🤣", slightly_smiling_face: "🙂", upside_down_face: "🙃", wink: "😉",
  blush: "😊", innocent: "😇", heart_eyes: "😍", "star-struck": "🤩", kissing_heart: "😘", stuck_out_tongue: "😛",
  hugging_face: "🤗", thinking_face: "🤔", zipper_mouth_face: "🤐", neutral_face: "😐", expressionless: "😑",
  face_with_rolling_eyes: "🙄", grimacing: "😬", relieved: "😌", sleeping: "😴", mask: "😷", nerd_face: "🤓",
  sunglasses: "😎", partying_face: "🥳", confused: "😕", slightly_frowning_face: "🙁", disappointed: "😞",
  worried: "😟", cry: "😢", sob: "😭", scream: "😱", exploding_head: "🤯", rage: "😡", angry: "😠",
  smiling_imp: "😈", skull: "💀", ghost: "👻", alien: "👽", see_no_evil: "🙈", hankey: "💩", poop: "💩",
  // hearts and sparkle
  heart: "❤️", green_heart: "💚", blue_heart: "💙", purple_heart: "💜", yellow_heart: "💛", orange_heart: "🧡",
  broken_heart: "💔", sparkling_heart: "💖", star: "⭐", star2: "🌟", dizzy: "💫", sparkles: "✨", fire: "🔥",
  zap: "⚡", boom: "💥", tada: "🎉", confetti_ball: "🎊", balloon: "🎈", gift: "🎁", trophy: "🏆",
  medal: "🏅", dart: "🎯", rocket: "🚀",
  // talk, office, time
  speech_balloon: "💬", thought_balloon: "💭", loudspeaker: "📢", mega: "📣", mute: "🔇", zzz: "💤",
  memo: "📝", pencil: "📝", pencil2: "✏️", page_facing_up: "📄", scroll: "📜", clipboard: "📋",
  bookmark: "🔖", books: "📚", file_folder: "📁", open_file_folder: "📂", package: "📦", wastebasket: "🗑️",
  email: "📧", envelope: "✉️", incoming_envelope: "📨", inbox_tray: "📥", outbox_tray: "📤", mailbox: "📫",
  pushpin: "📌", round_pushpin: "📍", paperclip: "📎", label: "🏷️", mag: "🔍", mag_right: "🔎",
  chart_with_upwards_trend: "📈", chart_with_downwards_trend: "📉", bar_chart: "📊", calendar: "📅",
  date: "📅", spiral_calendar_pad: "🗓️", alarm_clock: "⏰", stopwatch: "⏱️", timer_clock: "⏲️",
  clock1: "🕐", clock3: "🕒", clock9: "🕘", watch: "⌚", bulb: "💡", wrench: "🔧", hammer: "🔨",
  hammer_and_wrench: "🛠️", gear: "⚙️", shield: "🛡️", bug: "🐛", computer: "💻", iphone: "📱",
  telephone_receiver: "📞", phone: "☎️", satellite: "📡", electric_plug: "🔌", battery: "🔋",
  globe_with_meridians: "🌐", moneybag: "💰", dollar: "💵", credit_card: "💳", gem: "💎",
  house: "🏠", office: "🏢", car: "🚗", airplane: "✈️", ship: "🚢", art: "🎨", camera: "📷",
  musical_note: "🎵", headphones: "🎧", game_die: "🎲",
  // nature and food
  sunny: "☀️", cloud: "☁️", umbrella: "☔", snowflake: "❄️", rainbow: "🌈", crescent_moon: "🌙",
  seedling: "🌱", evergreen_tree: "🌲", cactus: "🌵", sunflower: "🌻", dog: "🐶", cat: "🐱", unicorn_face: "🦄",
  pizza: "🍕", apple: "🍎", banana: "🍌", cake: "🍰", birthday: "🎂", doughnut: "🍩", cookie: "🍪",
  hamburger: "🍔", taco: "🌮", sushi: "🍣", coffee: "☕", tea: "🍵", beer: "🍺", beers: "🍻",
  wine_glass: "🍷", champagne: "🍾",
};

export function emojiFor(name) {
  return Object.hasOwn(EMOJI, name) ? EMOJI[name] : null; // own keys only: :constructor: stays text
}

// A rich_text emoji element's "unicode" ("1f44d", "1f3f3-fe0f"): its characters, or null.
function fromUnicode(code) {
  if (typeof code !== "string" || !/^[0-9a-f]{2,6}(-[0-9a-f]{2,6})*$/i.test(code)) return null;
  try {
    return String.fromCodePoint(...code.split("-").map((hex) => parseInt(hex, 16)));
  } catch {
    return null;
  }
}

export function unescapeSlack(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

export function safeUrl(url) {
  return /^(https?:|mailto:)/i.test(url) ? url : null;
}

// A message's link in this workspace (what chat.getPermalink gives: https://<team>.slack.com/archives/<channel>/
// p<ts without its dot>, and ?thread_ts=<ts>&cid=<channel> for a reply) -> { channel, ts, thread }, else null.
const PERMALINK = /^https:\/\/[a-z0-9-]+\.slack\.com\/archives\/([A-Z0-9_]+)\/p([0-9]{7,})(?:\?(.*))?$/i;

export function permalinkTarget(url) {
  const m = PERMALINK.exec(String(url || ""));
  if (!m) return null;
  const ts = `${m[2].slice(0, -6)}.${m[2].slice(-6)}`;
  const thread = new URLSearchParams(m[3] || "").get("thread_ts");
  return { channel: m[1], ts, thread: thread || ts };
}

// Where a link to this workspace's own messages goes: the app sets it (openLinkedThread); Slack's clients open the
// linked thread in place instead of a browser tab, and so does the playground. Other links open in a new tab.
let linkedThread = null;

export function onWorkspaceLink(open) {
  linkedThread = open;
}

// Whether ``url`` was a link to this workspace's thread, now opened in place.
function openedInPlace(url) {
  const target = permalinkTarget(url);
  return Boolean(target && linkedThread && linkedThread(target));
}

export function followLink(url) {
  if (!openedInPlace(url)) window.open(url, "_blank", "noopener,noreferrer");
}

function el(tag, className, children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children || []) node.append(child);
  return node;
}

// Text with :emoji: shortcodes turned into characters (unknown names stay as typed).
function textWithEmoji(text) {
  const out = [];
  const re = /:([a-z0-9_+\-]+):/g;
  let last = 0;
  let m;
  while ((m = re.exec(text))) {
    const emoji = emojiFor(m[1]);
    if (!emoji) continue;
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    const span = el("span", "emoji", [emoji]);
    span.title = `:${m[1]}:`;
    out.push(span);
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

function link(href, label) {
  const url = safeUrl(href);
  if (!url) return document.createTextNode(label || href);
  const a = el("a", "link", [label || href]);
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  a.addEventListener("click", (event) => {
    if (openedInPlace(url)) event.preventDefault();
  });
  return a;
}

function mention(userId, label, ctx) {
  const name = ctx.userName(userId) || label || userId;
  const span = el("span", userId === ctx.me ? "mention me" : "mention", ["@" + name]);
  span.dataset.user = userId;
  return span;
}

// A <...> control sequence of mrkdwn (already escaped text inside). Unknown forms stay literal.
function controlToken(inner, ctx) {
  const bar = inner.indexOf("|");
  const target = bar >= 0 ? inner.slice(0, bar) : inner;
  const label = bar >= 0 ? unescapeSlack(inner.slice(bar + 1)) : "";
  if (target.startsWith("@U") || target.startsWith("@W")) return mention(target.slice(1), label, ctx);
  if (target.startsWith("#C") || target.startsWith("#D") || target.startsWith("#G")) {
    return el("span", "mention channel", ["#" + (ctx.channelName(target.slice(1)) || label || target.slice(1))]);
  }
  if (target.startsWith("!")) {
    const word = target.slice(1).split("^")[0];
    if (["here", "channel", "everyone"].includes(word)) return el("span", "mention broadcast", ["@" + word]);
    if (word === "subteam") {
      // a user group, shown by its handle as Slack does: <!subteam^S123|@finance>, or without a label its handle
      const id = target.slice(1).split("^")[1] || "";
      const handle = label.replace(/^@/, "") || (ctx.groupName && ctx.groupName(id)) || id;
      return el("span", "mention group", ["@" + handle]);
    }
    return document.createTextNode(label || target);
  }
  const href = unescapeSlack(target);
  if (safeUrl(href)) return link(href, label || href);
  return null;
}

const MRKDWN_INLINE =
  /`([^`\n]+)`|<([^<>\n]+)>|(?<![\p{L}\p{N}*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\p{L}\p{N}*])|(?<![\p{L}\p{N}_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\p{L}\p{N}_])|(?<![\p{L}\p{N}~])~(?=\S)([^~\n]+?)(?<=\S)~(?![\p{L}\p{N}~])/gu;

function mrkdwnInline(text, ctx) {
  const out = [];
  const re = new RegExp(MRKDWN_INLINE.source, "gu");
  let last = 0;
  let m;
  while ((m = re.exec(text))) {
    let node = null;
    if (m[1] !== undefined) node = el("code", "", [unescapeSlack(m[1])]);
    else if (m[2] !== undefined) node = controlToken(m[2], ctx);
    else if (m[3] !== undefined) node = el("strong", "", mrkdwnInline(m[3], ctx));
    else if (m[4] !== undefined) node = el("em", "", mrkdwnInline(m[4], ctx));
    else if (m[5] !== undefined) node = el("s", "", mrkdwnInline(m[5], ctx));
    if (!node) continue; // an unknown <...>: left as literal text
    if (m.index > last) out.push(...textWithEmoji(unescapeSlack(text.slice(last, m.index))));
    out.push(node);
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(...textWithEmoji(unescapeSlack(text.slice(last))));
  return out;
}

// Lines of mrkdwn outside code fences: "> " (escaped as "&gt; ") quote lines, line breaks kept.
function mrkdwnLines(text, ctx, frag) {
  const lines = text.split("\n");
  let quote = null;
  lines.forEach((line, i) => {
    const q = /^(?:&gt;|>)\s?(.*)$/.exec(line);
    if (q) {
      if (!quote) {
        quote = el("blockquote");
        frag.append(quote);
      } else quote.append(el("br"));
      quote.append(...mrkdwnInline(q[1], ctx));
      return;
    }
    quote = null;
    frag.append(...mrkdwnInline(line, ctx));
    if (i < lines.length - 1 && !/^(?:&gt;|>)/.test(lines[i + 1] || "")) frag.append(el("br"));
  });
}

export function mrkdwn(text, ctx) {
  const frag = document.createDocumentFragment();
  const parts = String(text ?? "").split("```");
  parts.forEach((part, i) => {
    const isCode = i % 2 === 1 && i < parts.length - 1;
    if (isCode) frag.append(el("pre", "code-block", [unescapeSlack(part.replace(/^\n/, ""))]));
    else mrkdwnLines(i % 2 === 1 ? "```" + part : part, ctx, frag);
  });
  return frag;
}

export function plainText(obj) {
  const text = String((obj && obj.text) ?? "");
  if (obj && obj.emoji === false) return document.createTextNode(text);
  const frag = document.createDocumentFragment();
  frag.append(...textWithEmoji(text));
  return frag;
}

// A text object: plain_text or mrkdwn.
export function textObject(obj, ctx) {
  if (!obj) return document.createTextNode("");
  if (obj.type === "mrkdwn") return mrkdwn(obj.text, ctx);
  return plainText(obj);
}

// --- standard Markdown (markdown block) ------------------------------------------------------------

const MD_INLINE =
  /`([^`\n]+)`|\[([^\]\n]+)\]\(([^)\s]+)\)|<([^<>\n]+)>|\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__|~~(?=\S)(.+?)(?<=\S)~~|(?<![\p{L}\p{N}*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\p{L}\p{N}*])|(?<![\p{L}\p{N}_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\p{L}\p{N}_])|\\([!-/:-@[-`{-~])/gu;
// the last: a backslash escape (CommonMark: before any ASCII punctuation it shows the character itself, and the
// character opens no markup; not inside code), as Slack's markdown block reads the bot's \[ and \]

function mdInline(text, ctx) {
  const out = [];
  const re = new RegExp(MD_INLINE.source, "gu");
  let last = 0;
  let m;
  while ((m = re.exec(text))) {
    let node = null;
    if (m[1] !== undefined) node = el("code", "", [unescapeSlack(m[1])]);
    else if (m[2] !== undefined) node = link(unescapeSlack(m[3]), unescapeSlack(m[2]));
    else if (m[4] !== undefined) node = controlToken(m[4], ctx);
    else if (m[5] !== undefined || m[6] !== undefined) node = el("strong", "", mdInline(m[5] ?? m[6], ctx));
    else if (m[7] !== undefined) node = el("s", "", mdInline(m[7], ctx));
    else if (m[8] !== undefined || m[9] !== undefined) node = el("em", "", mdInline(m[8] ?? m[9], ctx));
    else if (m[10] !== undefined) node = document.createTextNode(m[10]);
    if (!node) continue;
    if (m.index > last) out.push(...textWithEmoji(unescapeSlack(text.slice(last, m.index))));
    out.push(node);
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(...textWithEmoji(unescapeSlack(text.slice(last))));
  return out;
}

export function markdown(text, ctx) {
  const root = el("div", "md");
  const lines = String(text ?? "").split("\n");
  let para = null;
  let list = null;
  const close = () => {
    para = null;
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^```/.test(line)) {
      close();
      const body = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) body.push(lines[i]);
      root.append(el("pre", "code-block", [body.join("\n")]));
      continue;
    }
    if (!line.trim()) {
      close();
      continue;
    }
    let m;
    if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
      close();
      root.append(el("p", `md-h md-h${m[1].length}`, mdInline(m[2], ctx)));
    } else if (/^(-{3,}|\*{3,})$/.test(line.trim())) {
      close();
      root.append(el("hr"));
    } else if ((m = /^\s*(?:[-*+•])\s+(.*)$/.exec(line)) || (m = /^\s*(\d+)[.)]\s+(.*)$/.exec(line))) {
      const ordered = m.length === 3;
      const tag = ordered ? "OL" : "UL";
      if (!list || list.tagName !== tag) {
        para = null;
        list = el(tag.toLowerCase());
        if (ordered) list.start = Number(m[1]);
        root.append(list);
      }
      list.append(el("li", "", mdInline(ordered ? m[2] : m[1], ctx)));
    } else if ((m = /^(?:>|&gt;)\s?(.*)$/.exec(line))) {
      close();
      root.append(el("blockquote", "", mdInline(m[1], ctx)));
    } else {
      list = null;
      if (!para) {
        para = el("p");
        root.append(para);
      } else para.append(el("br"));
      para.append(...mdInline(line, ctx));
    }
  }
  return root;
}

// --- rich_text ---------------------------------------------------------------------------------------

function styled(node, style) {
  let out = node;
  if (!style) return out;
  if (style.code) out = el("code", "", [out]);
  if (style.strike) out = el("s", "", [out]);
  if (style.italic) out = el("em", "", [out]);
  if (style.bold) out = el("strong", "", [out]);
  return out;
}

function richElements(elements, ctx) {
  const out = [];
  for (const e of elements || []) {
    if (e.type === "text") {
      const parts = String(e.text ?? "").split("\n");
      parts.forEach((p, i) => {
        if (i) out.push(el("br"));
        if (p) out.push(styled(document.createTextNode(p), e.style));
      });
    } else if (e.type === "link") out.push(styled(link(e.url, e.text || e.url), e.style));
    else if (e.type === "user") out.push(mention(e.user_id, "", ctx));
    else if (e.type === "channel") out.push(el("span", "mention channel", ["#" + (ctx.channelName(e.channel_id) || e.channel_id)]));
    else if (e.type === "emoji") out.push(el("span", "emoji", [emojiFor(e.name) || fromUnicode(e.unicode) || `:${e.name}:`]));
    else if (e.type === "broadcast") out.push(el("span", "mention broadcast", ["@" + e.range]));
    else if (e.text) out.push(document.createTextNode(String(e.text)));
  }
  return out;
}

export function richText(block, ctx) {
  const root = el("div", "rich-text");
  for (const part of block.elements || []) {
    if (part.type === "rich_text_section") root.append(el("div", "", richElements(part.elements, ctx)));
    else if (part.type === "rich_text_preformatted") root.append(el("pre", "code-block", richElements(part.elements, ctx)));
    else if (part.type === "rich_text_quote") root.append(el("blockquote", "", richElements(part.elements, ctx)));
    else if (part.type === "rich_text_list") {
      const list = el(part.style === "ordered" ? "ol" : "ul");
      for (const item of part.elements || []) list.append(el("li", "", richElements(item.elements, ctx)));
      root.append(list);
    }
  }
  return root;
}
