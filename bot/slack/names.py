"""People's and channels' names for text that is not shown by Slack: :class:`Names`.

Slack renders ``<@U…>`` and ``<#C…>`` as names in its own surfaces; anything else (an MCP client's progress
messages, for one, or a plain-text title: :meth:`Names.readable`) shows them raw ("waiting for <@U_ALICE> in
<#C_GENERAL>"). There the bot writes names:
``@alice`` (the profile's display name, else its real name, else the user name; ``users.info``) and ``#general``
(``conversations.info``), each remembered for :data:`TTL` seconds (at most :data:`KEPT` of each), and the id itself
where Slack can't say (no ``users:read`` / ``channels:read`` scope, an unknown id, Slack down).
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from bot.slack.transport.web_api import SlackWeb

log = logging.getLogger(__name__)

TTL = 600.0  # seconds a name is remembered
KEPT = 500  # names remembered, of each kind
LOOKUPS = 10  # people looked up per reply at most (NamedMentions)


class Names:
    """Names through ``web``, remembered (see the module docstring); ``clock``: seconds, monotonic."""

    def __init__(self, web: SlackWeb, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.web = web
        self.clock = clock
        self._users: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._channels: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def user(self, user_id: str) -> str:
        """``"@alice"`` for ``user_id``, or ``"@U…"`` (the id) when Slack can't say. Never raises."""
        cached = self._cached(self._users, user_id)
        if cached is not None:
            return cached
        return self._named(user_id, await self.web.user_info(user_id))

    async def exists(self, user_id: str) -> bool | None:
        """Whether ``user_id`` is a person of the workspace who can be asked: False when Slack has no such user, the
        account is deactivated, or it is a bot's (which never answers); None when it can't say (a scope missing, an
        outage). Its name is kept for :meth:`user` (one ``users.info`` for both). Never raises."""
        found = await self.web.find_user(user_id)
        if found is False:
            return False
        self._named(user_id, found)
        return None if found is None else not (found.get("deleted") or found.get("is_bot"))

    def _named(self, user_id: str, found: dict[str, Any] | None) -> str:
        """``"@name"`` of Slack's user object ``found`` (None: the id), kept."""
        profile = (found or {}).get("profile") or {}
        name = next(
            (str(n) for n in (profile.get("display_name"), profile.get("real_name"), (found or {}).get("name")) if n),
            "",
        )
        return self._keep(self._users, user_id, f"@{name or user_id}", known=bool(name))

    async def channel(self, channel_id: str) -> str:
        """``"#general"`` for ``channel_id``, ``"a direct message"`` for a DM, or ``"#C…"`` (the id) when Slack
        can't say. Never raises."""
        cached = self._cached(self._channels, channel_id)
        if cached is not None:
            return cached
        found = await self.web.conversation_info(channel_id)
        if found is not None and found.get("is_im"):
            return self._keep(self._channels, channel_id, "a direct message", known=True)
        name = str((found or {}).get("name") or "")
        return self._keep(self._channels, channel_id, f"#{name or channel_id}", known=bool(name))

    async def readable(self, text: str) -> str:
        """A person's message ``text`` (Slack's markup kept, its ``&lt;`` ``&gt;`` ``&amp;`` read back) as it reads
        in Slack, for plain text (an agent session's or a pane thread's title): ``<@U1>`` -> ``@alice``,
        ``<#C1|general>`` / ``<#C1>`` -> ``#general``, ``<https://x|the doc>`` -> ``the doc`` (``<https://x>`` ->
        ``https://x``, ``<mailto:a@b>`` -> ``a@b``), ``<!here>`` -> ``@here``, ``<!subteam^S1|@oncall>`` ->
        ``@oncall``, ``<!date^…|Feb 18>`` -> ``Feb 18`` (Slack: formatting-message-text). A label Slack sent is
        used as it is; at most :data:`LOOKUPS` people and channels are looked up (the rest: their ids). Never
        raises."""
        looked = 0
        out: list[str] = []
        last = 0
        for m in _MARKUP.finditer(text):
            out.append(text[last : m.start()])
            last = m.end()
            label = m.group("label")
            if m.group("user") or m.group("channel"):
                sign, ident = ("@", m.group("user")) if m.group("user") else ("#", m.group("channel"))
                if label:
                    out.append(sign + label.removeprefix(sign))
                elif looked < LOOKUPS:
                    looked += 1
                    out.append(await (self.user(ident) if sign == "@" else self.channel(ident)))
                else:
                    out.append(sign + ident)
            elif m.group("special") is not None:
                word, _, rest = m.group("special").partition("^")  # here, subteam^S1, date^…
                out.append(label or f"@{rest.split('^', 1)[0] if word == 'subteam' else word}")
            else:
                out.append(label or m.group("url").removeprefix("mailto:"))
        out.append(text[last:])
        return "".join(out)

    def _cached(self, kept: OrderedDict[str, tuple[str, float]], key: str) -> str | None:
        hit = kept.get(key)
        if hit is None or self.clock() >= hit[1]:
            return None
        kept.move_to_end(key)
        return hit[0]

    def _keep(self, kept: OrderedDict[str, tuple[str, float]], key: str, name: str, *, known: bool) -> str:
        """Remember ``name`` (an id fallen back to: a tenth as long, so a scope granted later shows soon)."""
        kept[key] = (name, self.clock() + (TTL if known else TTL / 10))
        kept.move_to_end(key)
        while len(kept) > KEPT:
            kept.popitem(last=False)
        return name


_BARE_MENTION = re.compile(r"<@([UW][A-Z0-9_]{2,})>")  # a mention without a label: Slack shows the name
_MARKUP = re.compile(
    r"<(?:@(?P<user>[UW][A-Z0-9_]+)|#(?P<channel>[CGD][A-Z0-9_]+)|!(?P<special>[a-z]+(?:\^[^|>]*)?)"
    r"|(?P<url>[A-Za-z][A-Za-z0-9+.-]*:[^|<>\s]+))(?:\|(?P<label>[^<>]*))?>"
)  # Slack's markup in a message's text: a mention, a channel, a special (here, subteam^S…, date^…), a link
_PARTIAL_MENTION = re.compile(r"<(?:@[A-Z0-9_]{0,40})?$")  # the start of one a text ends with


class NamedMentions:
    """A reply's text as the model streams it, each ``<@U…>`` labelled with the person's name (``<@U1|alice>``)
    before the bot's safe rendering writes it as the unpinging ``@alice`` (:mod:`bot.slack.render.safe_text`): where
    mentions may not ping, a model that only knows ids (an answer's ``answered_by``) showed "as @U_ALICE chose".
    A mention cut between two pieces is held until it is whole (:meth:`flush`: what is held, as it is). At most
    :data:`LOOKUPS` people are looked up per reply (a model writing a thousand ids costs no thousand calls)."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self._held = ""
        self._looked: set[str] = set()

    async def feed(self, text: str) -> str:
        """The text to show of ``text`` (after what was held), its whole mentions labelled. Never raises."""
        text = self._held + text
        partial = _PARTIAL_MENTION.search(text)
        cut = partial.start() if partial is not None else len(text)
        text, self._held = text[:cut], text[cut:]
        return await self.label(text)

    def flush(self) -> str:
        """What is held (the start of a mention the text ended with), as it is."""
        held, self._held = self._held, ""
        return held

    async def label(self, text: str) -> str:
        """``text`` with each ``<@U…>`` labelled with the person's name where Slack can say it. Never raises."""
        found: dict[str, str] = {}
        for user_id in dict.fromkeys(_BARE_MENTION.findall(text)):
            if user_id not in self._looked and len(self._looked) >= LOOKUPS:
                continue
            self._looked.add(user_id)
            name = (await self.names.user(user_id)).removeprefix("@")
            if name != user_id and "|" not in name and ">" not in name:
                found[user_id] = name
        if not found:
            return text
        return _BARE_MENTION.sub(lambda m: f"<@{m[1]}|{found[m[1]]}>" if m[1] in found else m[0], text)
