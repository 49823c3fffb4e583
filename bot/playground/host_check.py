"""Which ``Host`` headers the playground's loopback UI answers: the DNS-rebinding defence.

A page on ``evil.example`` can make its own name resolve to 127.0.0.1 (DNS rebinding); the browser then sends
the page's requests to the playground as same-origin ones, ``Origin`` included, but with
``Host: evil.example``. A server meant for loopback only must therefore refuse any request whose ``Host``
is not a loopback name (RFC 9110 section 7.2: ``Host`` names the target the client meant; RFC 9110 section
15.5.20: 421 Misdirected Request for a request this server is not configured to answer).
"""

from __future__ import annotations

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})


def is_loopback_host(host: str | None, *, port: int | None) -> bool:
    """Whether a ``Host`` header value names this loopback server: ``127.0.0.1``, ``localhost`` (any case) or
    ``[::1]``, followed by ``:<port>`` or by nothing. ``port=None`` accepts any port. A missing ``Host``,
    another name (``0.0.0.0``, ``127.0.0.1.evil.example``, an unbracketed ``::1``) or another port is refused.
    """
    if not host:
        return False
    host = host.lower()
    if host.startswith("["):
        name, bracket, rest = host.partition("]")
        name += bracket
    else:
        name, colon, number = host.partition(":")
        rest = colon + number
    if name not in LOOPBACK_NAMES:
        return False
    if not rest:
        return True
    number = rest[1:]
    if not rest.startswith(":") or not (number.isascii() and number.isdigit()):
        return False
    return port is None or number == str(port)
