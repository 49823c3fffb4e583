// The message composer: Enter sends, Shift+Enter is a new line, "@" offers the bot and the people.
// "@askbot" in the text is sent as "<@U_BOT>" (and "@alice" as "<@U_ALICE>"); &, < and > are escaped as
// Slack's clients do. The text goes to POST /api/say as the acting user.
//
//   makeComposer(form, {target() -> {channel, thread_ts|null}, placeholder() -> string, sent(result)})

import { el, toast } from "./dom.js";
import { S, api } from "./store.js";

function people() {
  return [{ id: S.bot.id, name: S.bot.name, note: "app" }, ...S.users.map((u) => ({ id: u.id, name: u.name, note: u.real_name }))];
}

export function slackText(typed) {
  const escaped = typed.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const byName = new Map(people().map((p) => [p.name.toLowerCase(), p.id]));
  return escaped.replace(/(^|[^\w@])@([\w.-]+)/g, (whole, before, name) => {
    const id = byName.get(name.toLowerCase());
    return id ? `${before}<@${id}>` : whole;
  });
}

export function makeComposer(form, options) {
  const textarea = form.querySelector("textarea");
  const send = form.querySelector("button[type=submit]");
  const popup = el("ul", { class: "mention-popup", role: "listbox", hidden: true, id: `${form.id}-mentions` });
  form.append(popup);
  textarea.setAttribute("aria-autocomplete", "list");
  textarea.setAttribute("aria-controls", popup.id);
  let matches = [];
  let active = 0;

  const query = () => {
    const before = textarea.value.slice(0, textarea.selectionStart);
    const m = /(^|\s)@([\w.-]*)$/.exec(before);
    return m ? m[2] : null;
  };

  const close = () => {
    popup.hidden = true;
    matches = [];
    textarea.removeAttribute("aria-activedescendant");
  };

  const show = () => {
    const q = query();
    if (q === null) return close();
    matches = people().filter((p) => p.name.toLowerCase().startsWith(q.toLowerCase()));
    if (!matches.length) return close();
    active = Math.min(active, matches.length - 1);
    popup.replaceChildren(
      ...matches.map((p, i) =>
        el(
          "li",
          {
            id: `${popup.id}-${i}`,
            role: "option",
            class: i === active ? "active" : "",
            "aria-selected": i === active ? "true" : "false",
            onmousedown: (e) => {
              e.preventDefault();
              choose(i);
            },
          },
          [el("strong", {}, ["@" + p.name]), " ", el("span", { class: "muted" }, [p.note || ""])],
        ),
      ),
    );
    popup.hidden = false;
    textarea.setAttribute("aria-activedescendant", `${popup.id}-${active}`);
  };

  const choose = (i) => {
    const person = matches[i];
    if (!person) return;
    const caret = textarea.selectionStart;
    const before = textarea.value.slice(0, caret).replace(/@([\w.-]*)$/, `@${person.name} `);
    textarea.value = before + textarea.value.slice(caret);
    textarea.selectionStart = textarea.selectionEnd = before.length;
    close();
    textarea.focus();
  };

  const submit = async () => {
    const typed = textarea.value;
    if (!typed.trim()) return;
    const { channel, thread_ts } = options.target();
    send.disabled = true;
    const result = await api("/api/say", { user: S.me, channel, text: slackText(typed), thread_ts });
    send.disabled = false;
    if (!result.ok && !result.message) {
      toast(result.error || "could not send");
      return;
    }
    if (!result.ok) toast("The app did not acknowledge the event (see the developer panel).");
    textarea.value = "";
    autosize();
    if (options.sent) options.sent(result);
  };

  const autosize = () => {
    textarea.style.height = "auto";
    textarea.style.height = `${Math.min(textarea.scrollHeight, 160)}px`;
  };

  textarea.addEventListener("input", () => {
    active = 0;
    show();
    autosize();
  });
  textarea.addEventListener("blur", () => setTimeout(close, 100));
  textarea.addEventListener("keydown", (e) => {
    if (!popup.hidden && matches.length) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        active = (active + (e.key === "ArrowDown" ? 1 : matches.length - 1)) % matches.length;
        show();
        return;
      }
      if (e.key === "Enter" || e.key === "Tab") {
        e.preventDefault();
        choose(active);
        return;
      }
      if (e.key === "Escape") {
        e.preventDefault();
        close();
        return;
      }
    }
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });

  return {
    refresh() {
      const me = S.users.find((u) => u.id === S.me);
      textarea.placeholder = options.placeholder();
      textarea.setAttribute("aria-label", `${options.placeholder()} as ${me ? me.name : S.me}`);
      const hint = form.querySelector(".composer-hint");
      if (hint) hint.textContent = `as ${me ? me.name : S.me} · Enter to send, Shift+Enter for a new line · @ to mention ${S.bot.name}`;
    },
    focus() {
      textarea.focus();
    },
  };
}
