"""Text from the model and from people, made safe to show in Slack: the one place every surface goes through.

What Slack parses, and so what each surface neutralises (everything first loses bidi and control characters,
:func:`strip_controls`, so no label can be shown reversed or hidden):

- ``plain_text`` objects (button and option texts, option descriptions) are never parsed: :func:`safe_plain`
  (Slack: docs.slack.dev reference/block-kit/composition-objects/text-object).
- ``mrkdwn`` text objects and a message's top-level ``text`` (question sections, the option list, the answered
  outcome line, notifications): ``&``, ``<`` and ``>`` are control characters; ``<@U…>``, ``<!here>``,
  ``<!channel>``, ``<!everyone>``, ``<!subteam^S…>`` are mentions and ``<url|text>`` a link whose text hides its
  host; with ``verbatim`` false (the default) plain text is also auto-parsed (URLs, and words such as ``@here``).
  :func:`safe_mrkdwn` escapes the three characters, so every mention and link shows as typed, and breaks bare
  ``@here`` / ``@channel`` / ``@everyone`` / ``@group`` with a word joiner (Slack: docs.slack.dev
  messaging/formatting-message-text, "Escaping text" and "Automatic parsing").
- the ``markdown`` block (the model's reply) takes standard Markdown, where ``[text](url)`` shows only its text,
  and Slack's own ``<…>`` syntax (Slack: docs.slack.dev reference/block-kit/blocks/markdown-block).
  :func:`safe_markdown` writes disallowed mentions as ``@\\u2060name`` (a word joiner after the ``@``), turns
  ``<url|text>`` into ``[text](url) (host)`` and appends `` (host)`` to every Markdown link and image; the same
  syntax written with HTML entities (``&lt;!here&gt;``, which Markdown decodes) is treated alike.

A person is pinged only by ``<@U…>`` and only when ``allow_user_mentions`` (the operator's setting); a channel,
``@here``, ``@everyone`` or a user group never. Nothing a person wrote is dropped: mentions keep their name,
links their URL.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from urllib.parse import urlsplit

WORD_JOINER = "\u2060"  # invisible and unbreakable: "@\u2060here" looks like @here and pings nobody

# Bidi controls (Unicode UAX #9: embeddings/overrides U+202A-U+202E, isolates U+2066-U+2069, ALM U+061C,
# LRM/RLM U+200E/U+200F) and C0/C1 controls but \t and \n (\r is turned into \n first).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# "@here" not inside an ASCII word: an address (a@here.example) is left alone, "語@here" or "@here語" is broken (a
# Unicode \w would have taken CJK letters beside it as part of a word, which Slack's parser may not)
_BROADCAST = re.compile(r"(?<![A-Za-z0-9_@])@(?=(?:channel|here|everyone|group)(?![A-Za-z0-9_]))", re.IGNORECASE)
_USER_ID = r"[UW][A-Z0-9_]{2,}"
_ESCAPED_USER = re.compile(rf"&lt;@({_USER_ID})(?:\|[^&\n]*)?&gt;")

# Slack's own syntax inside a markdown block: <@U…|label>, <!here|label>, <!subteam^S…|label>, <url|text>.
_USER = re.compile(r"<@([A-Za-z0-9_]+)(?:\|([^<>]*))?>")
_SPECIAL = re.compile(r"<!([A-Za-z]+)(?:\^([^|<>]*))?(?:\|([^<>]*))?>")
_SLACK_LINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^|<>\s]*)\|([^<>]*)>")
_LINK_START = re.compile(r"<(?=[A-Za-z][A-Za-z0-9+.-]*:[^|<>\s]*\|)")
_NESTING = 8  # passes over nested Slack syntax; deeper nesting is broken by _LINK_START instead
# Markdown: the ``](destination "title")`` that ends an inline link or image, a reference definition, and code
# (fenced blocks, one-line spans) where CommonMark makes no links.
_MD_LINK_END = re.compile(
    r"\]\(\s*(<[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
_MD_REFERENCE = re.compile(r"^([ ]{0,3})\[(?=[^\]\n]+\]:)", re.MULTILINE)
_MD_CODE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^[ ]{0,3}\1[`~]*[ \t]*$|\Z)|(`+)[^\n]+?\2", re.M | re.S)
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# The same syntax written with HTML entities, which Markdown decodes: &lt;!here&gt;, &#60;@U1&#62;, &#64;here.
_LT, _GT = r"&(?:lt|#0*60|#x0*3c);", r"&(?:gt|#0*62|#x0*3e);"
# A tag written with entities on either side, or inside (``&lt;!here&gt;``, ``&lt;!here>``, ``<&#33;here>``); the
# innermost first (``&lt;&lt;!here&gt;``).
_ENCODED_TAG = re.compile(rf"(?:<|{_LT})((?:(?!{_GT}|{_LT})[^<>])*)(?:>|{_GT})", re.IGNORECASE)
_ENCODED_AT = re.compile(r"&(?:commat|#0*64|#x0*40);(?=(?:channel|here|everyone|group)\b)", re.IGNORECASE)


_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
LINE_MARK = " \u21b5 "  # "↵": where a value's text breaks its line


def one_line(text: str) -> str:
    """``text`` on one line, each line break shown as :data:`LINE_MARK`: an argument's value drawn on a card can't
    start a line of its own, so text in it can't pass for another argument or a note of the bot's
    (``"api\\n*force*: false"`` drew a false ``force`` line above the real ``force: true``: a break-it pass)."""
    return _LINE_BREAK.sub(LINE_MARK, text)


def strip_controls(text: str) -> str:
    """``text`` without bidi controls (U+202A-U+202E, U+2066-U+2069, U+061C, LRM/RLM) and C0/C1 control
    characters other than tab and newline; ``\\r\\n`` and a lone ``\\r`` become ``\\n``."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def safe_plain(text: str) -> str:
    """Text for a ``plain_text`` object: Slack parses nothing there, so only controls go (:func:`strip_controls`)."""
    return strip_controls(text)


def defang_broadcasts(text: str) -> str:
    """Bare ``@channel``, ``@here``, ``@everyone`` and ``@group`` (any case) with a word joiner after the ``@``:
    shown the same, never auto-parsed into a broadcast (Slack: formatting-message-text, "Automatic parsing")."""
    return _BROADCAST.sub("@" + WORD_JOINER, text)


def escape_entities(text: str) -> str:
    """Slack's three control characters as entities (``&amp;`` ``&lt;`` ``&gt;``); nothing else is encoded
    (Slack: docs.slack.dev messaging/formatting-message-text, "Escaping text")."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_mrkdwn(text: str, *, allow_user_mentions: bool = False) -> str:
    """``text`` as mrkdwn that shows what was written and pings nobody: controls removed, ``& < >`` escaped
    (so ``<!channel>`` or ``<url|text>`` show as typed), bare broadcasts broken; with ``allow_user_mentions``
    a ``<@U…>`` mention stays a mention (its ``|label`` dropped: Slack shows the person's name).

    ``"<!here> & @channel"`` -> ``"&lt;!here&gt; &amp; @\\u2060channel"``."""
    out = escape_entities(strip_controls(text))
    if allow_user_mentions:
        out = _ESCAPED_USER.sub(r"<@\1>", out)
    return defang_broadcasts(out)


def safe_markdown(text: str, *, allow_user_mentions: bool = False) -> str:
    """``text`` for a ``markdown`` block: controls removed; disallowed mentions as ``@\\u2060name``; Slack links
    ``<url|text>`` as ``[text](url) (host)``; every Markdown link and image followed by `` (host)``; reference
    definitions (``[id]: url``) shown as text; nested Slack syntax undone from the innermost out (an outer link can't
    hide its host behind an inner one's text); any other ``<!`` / ``<@`` and bare broadcasts broken with a word
    joiner; finally every ``[`` and ``]`` escaped, so no Markdown link or image can form at all (whatever tricks
    of nesting, escapes, code spans or reference definitions a parser and a renderer might disagree on).
    ``"[login](https://evil.example) <!here>"`` -> ``"\\[login\\](https://evil.example) (evil.example)
    @\\u2060here"``."""
    text = _outside_code(_decode_encoded_syntax(strip_controls(text)), _hosts_after_links)
    for _ in range(_NESTING):  # innermost first: "<https://a|<https://b|c>>" is two links, the outer hiding its host
        before = text
        text = named_mentions(_SLACK_LINK.sub(_slack_link, text), allow_user_mentions=allow_user_mentions)
        if text == before:
            break
    text = _LINK_START.sub("<" + WORD_JOINER, text)  # nested deeper than that: no link at all
    kept = rf"(?!@{_USER_ID}>)" if allow_user_mentions else ""
    text = defang_broadcasts(re.sub(rf"<(?=[!@]){kept}", "<" + WORD_JOINER, text))
    # Last, and everywhere (code included: a renderer may not see code where a parser does): no bracket can open a
    # Markdown link or image, so no link text can hide where it goes; a link shows as its text, its URL and host.
    return re.sub(r"\\*([\[\]])", r"\\\1", text)  # exactly one backslash before each, however many were there


def named_mentions(text: str, *, allow_user_mentions: bool = False) -> str:
    """Slack's mention syntax in ``text`` as a ``markdown`` block shows it, pinging nobody: ``<@U1|ann>`` ->
    ``@\\u2060ann`` (``<@U1>`` kept when ``allow_user_mentions``), ``<!here>`` -> ``@\\u2060here``, a user group
    ``<!subteam^S1|@team>`` -> ``@\\u2060team``, ``<!date^…|text>`` -> its text; one pass (innermost syntax only).
    :func:`safe_markdown` uses it for a block, and a reply's notification text for the same words
    (:func:`bot.slack.render.blocks.reply_text`), so both name the same person."""
    text = _USER.sub(lambda m: _user_mention(m, allow=allow_user_mentions), text)
    return _SPECIAL.sub(_special_mention, text)


def link_host(url: str) -> str:
    """The host a link really opens, to show beside its text: ``"https://a.example/x"`` -> ``"a.example"``,
    ``"https://good.example@evil.example"`` -> ``"evil.example"``, ``"mailto:x@b.example"`` -> ``"b.example"``,
    an internationalised host in its ASCII (punycode) form; no host: the scheme (``"javascript:"``) or the URL
    itself (at most 60 characters); ``""`` for an empty URL."""
    target = html.unescape(_MD_ESCAPE.sub(r"\1", url.strip().removeprefix("<").removesuffix(">")))
    try:
        parts = urlsplit(target)
        host = parts.hostname or ""
    except ValueError:
        parts, host = urlsplit(""), ""
    if not host and parts.scheme.lower() == "mailto":
        host = parts.path.rpartition("@")[2].lower()
    if host:
        return _ascii_host(host)
    if parts.scheme:
        return f"{parts.scheme}:"
    return target if len(target) <= 60 else target[:59] + "…"


def _ascii_host(host: str) -> str:
    """``host`` in the form that shows look-alike letters: ``"\u0430pple.com"`` (a Cyrillic a) ->
    ``"xn--pple-43d.com"``."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host.encode("ascii", "backslashreplace").decode("ascii")


def _decode_encoded_syntax(text: str) -> str:
    """Slack syntax written with HTML entities (which Markdown decodes) as plain ``<…>`` / ``@``, so the passes
    after this one neutralise it too: ``"&lt;!here&gt;"`` -> ``"<!here>"``, ``"&#64;here"`` -> ``"@\u2060here"``.
    Other encoded text (``"&lt;b&gt;"``) stays as written."""

    def decoded(m: re.Match[str]) -> str:
        if "&" not in m.group(0):
            return m.group(0)  # plain Slack syntax: the passes after this one take it as it is
        inner = html.unescape(m.group(1))
        return f"<{inner}>" if re.match(r"[!@]|[A-Za-z][A-Za-z0-9+.-]*:", inner) else m.group(0)

    return _ENCODED_AT.sub("@" + WORD_JOINER, _ENCODED_TAG.sub(decoded, text))


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    """``change`` applied to the parts of Markdown ``text`` outside fenced code blocks and one-line code spans."""
    out, at = [], 0
    for code in _MD_CODE.finditer(text):
        out += [change(text[at : code.start()]), code.group(0)]
        at = code.end()
    return "".join([*out, change(text[at:])])


def _hosts_after_links(text: str) -> str:
    """`` (host)`` after every inline Markdown link or image; reference definitions escaped so they show."""
    text = _MD_REFERENCE.sub(r"\1\\[", text)

    def with_host(m: re.Match[str]) -> str:
        host = link_host(m.group(1))
        return f"{m.group(0)} ({host})" if host else m.group(0)

    return _MD_LINK_END.sub(with_host, text)


def _slack_link(m: re.Match[str]) -> str:
    """``<url|text>`` -> ``[text](url) (host)`` (brackets in the text escaped, so it holds no other link)."""
    url, label = m.group(1), m.group(2)
    label = label.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    destination = url if "(" not in url and ")" not in url else f"<{url}>"
    return f"[{label}]({destination}) ({link_host(url)})"


def _user_mention(m: re.Match[str], *, allow: bool) -> str:
    """``<@U123|ann>``: kept when ``allow`` and a user id, else ``@\\u2060ann`` (or ``@\\u2060U123``)."""
    if allow and re.fullmatch(_USER_ID, m.group(1)):
        return f"<@{m.group(1)}>"
    return _named(m.group(2) or m.group(1))


def _special_mention(m: re.Match[str]) -> str:
    """``<!here>``, ``<!subteam^S1|@team>``...: ``@\\u2060here``, ``@\\u2060team``; ``<!date^…|text>``: its text."""
    word, argument, label = m.group(1), m.group(2), m.group(3)
    if word.lower() == "date":
        return label or m.group(0)[2:-1]
    return _named(label or argument or word)


def _named(name: str) -> str:
    return "@" + WORD_JOINER + (name.strip().lstrip("@") or "someone")
