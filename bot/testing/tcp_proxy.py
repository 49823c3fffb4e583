"""A loopback TCP proxy for fault injection: add latency to a service (e.g. Redis), cut it off, or lose a reply.

``async with TcpProxy("127.0.0.1", 6379) as proxy``: connect to ``127.0.0.1:proxy.port`` instead. ``proxy.delay``
(seconds) is added before each chunk sent towards the service; ``proxy.cut()`` closes every connection and refuses new
ones until ``proxy.restore()``. ``proxy.lose_next_reply(containing=b"...")`` forwards the next request whose bytes
contain the pattern, so the service executes it, then closes that connection instead of passing the reply back (a
reply lost in the network); ``replies_lost`` counts them. ``round_trips`` counts requests: bytes towards the service
after a reply on that connection (or its first bytes), so a pipeline is one however many commands it holds;
``proxy.trace = []`` keeps each one's first bytes. ``proxy.cut_at(containing=b"...", when=...)`` starts an outage (as
:meth:`TcpProxy.cut`, until ``restore()``) at the next request whose bytes contain the pattern: ``"request"`` before
the service sees it, ``"applied"`` after the service executed it but before its reply is passed back, ``"replied"``
right after its reply was passed back; ``lasting=`` seconds restores it that long after the cut; ``await
proxy.cut_until_gone(other_client, key)`` cuts and waits until a key (a lease the cut-off client can no longer renew)
is gone. ``proxy.refuse_next(containing=b"...", error=b"OOM ...")`` answers the next request containing the pattern
itself, with that Redis error for each command in it (as Redis out of memory answers writes), without passing it on.
``proxy.hold_next(containing=b"...", seconds=...)`` holds the next request containing the pattern back that long
before passing it on, even when its client gave up on it meanwhile (a request stalled in the network that still lands,
after what the client sent later on other connections).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal

CutWhen = Literal["request", "applied", "replied"]


class _Pair:
    """One proxied connection: whether the reply to its last request must be dropped."""

    def __init__(self) -> None:
        self.drop_reply = False
        self.cut_after_reply = False  # cut everything once the reply to the last request is passed (or lost)
        self.lasting: float | None = None  # ... restoring this long after
        self.reply_to: asyncio.StreamWriter  # the client's end, for replies made up here
        self.replied = True  # the service answered since the client last sent: the next bytes start a round trip


class TcpProxy:
    """Forwards loopback connections to ``host:port``; see the module docstring."""

    def __init__(self, host: str, port: int, *, delay: float = 0.0) -> None:
        self.host = host
        self.target_port = port
        self.delay = delay
        self.down = False
        self.port = 0
        self.replies_lost = 0
        self.cuts = 0  # outages started (cut() calls)
        self.round_trips = 0
        self.trace: list[bytes] | None = None  # set to [] to keep each round trip's first bytes (to see what they are)
        self._lose: bytes | None = None
        self._cut_at: tuple[bytes, CutWhen, float | None] | None = None
        self._refuse: tuple[bytes, bytes] | None = None
        self._hold: tuple[bytes, float] | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        """Close all connections and refuse new ones."""
        self.down = True
        self.cuts += 1
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    def restore(self) -> None:
        """Accept connections again."""
        self.down = False

    async def cut_until_gone(self, redis_client: Any, key: str, *, within: float = 5.0) -> None:
        """:meth:`cut`, then wait (reading through ``redis_client``, which does not use this proxy) until ``key``
        is gone, e.g. the lease of a run whose driver is cut off expired. Raises ``AssertionError`` after
        ``within`` seconds."""
        self.cut()
        deadline = asyncio.get_running_loop().time() + within
        while await redis_client.exists(key):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{key} is still there {within:g} s after the cut")
            await asyncio.sleep(0.05)

    def lose_next_reply(self, *, containing: bytes) -> None:
        """Let the next request containing ``containing`` through, then drop its connection before the reply."""
        self._lose = containing

    def cut_at(self, *, containing: bytes, when: CutWhen, lasting: float | None = None) -> None:
        """Cut (see :meth:`cut`) at the next request containing ``containing``: before it reaches the service
        (``"request"``), after the service executed it with its reply lost (``"applied"``), or after its reply
        (``"replied"``). The outage lasts until :meth:`restore`, or ``lasting`` seconds from the cut."""
        self._cut_at = (containing, when, lasting)

    def refuse_next(self, *, containing: bytes, error: bytes) -> None:
        """Answer the next request containing ``containing`` with the Redis error ``error`` (e.g. ``b"OOM command not
        allowed when used memory > 'maxmemory'."``) once per command in it, instead of passing it on."""
        self._refuse = (containing, error)

    def hold_next(self, *, containing: bytes, seconds: float) -> None:
        """Hold the next request containing ``containing`` back ``seconds`` before passing it on (it is passed on
        even when its client closed the connection meanwhile; its reply then goes nowhere)."""
        self._hold = (containing, seconds)

    def _cut_for(self, lasting: float | None) -> None:
        self.cut()
        if lasting is not None:
            asyncio.get_running_loop().call_later(lasting, self.restore)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        pair = _Pair()
        pair.reply_to = writer
        await asyncio.gather(
            self._pump(reader, up_writer, pair, upstream=True), self._pump(up_reader, writer, pair, upstream=False)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: _Pair, *, upstream: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if upstream and self.delay:
                    await asyncio.sleep(self.delay)
                if self.down:
                    break
                if upstream and pair.replied:
                    self.round_trips += 1
                    if self.trace is not None:
                        self.trace.append(data)
                pair.replied = not upstream
                if upstream and self._lose is not None and self._lose in data:
                    self._lose, pair.drop_reply = None, True
                if upstream and self._hold is not None and self._hold[0] in data:
                    seconds, self._hold = self._hold[1], None
                    await asyncio.sleep(seconds)
                if upstream and self._refuse is not None and self._refuse[0] in data:
                    error = b"-" + self._refuse[1] + b"\r\n"
                    self._refuse = None
                    pair.replied = True
                    pair.reply_to.write(error * _commands(data))
                    await pair.reply_to.drain()
                    continue
                if upstream and self._cut_at is not None and self._cut_at[0] in data:
                    _, when, pair.lasting = self._cut_at
                    self._cut_at = None
                    if when == "request":
                        self._cut_for(pair.lasting)
                        break
                    pair.drop_reply, pair.cut_after_reply = when == "applied", True
                if not upstream and pair.drop_reply:
                    self.replies_lost += 1
                    writer.transport.abort()  # a reset, as when the network drops mid-reply
                    if pair.cut_after_reply:
                        self._cut_for(pair.lasting)
                    break
                writer.write(data)
                await writer.drain()
                if not upstream and pair.cut_after_reply:
                    self._cut_for(pair.lasting)
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()


def _commands(data: bytes) -> int:
    """How many commands (RESP arrays of bulk strings, as clients send them) ``data`` holds; at least 1."""
    n, i = 0, 0
    while i < len(data) and data[i : i + 1] == b"*":
        end = data.index(b"\r\n", i)
        parts, i = int(data[i + 1 : end]), end + 2
        for _ in range(parts):
            end = data.index(b"\r\n", i)
            i = end + 2 + int(data[i + 1 : end]) + 2
        n += 1
    return max(n, 1)
