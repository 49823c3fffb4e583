"""A loopback TCP proxy for fault injection: add latency to a service (e.g. Redis) or cut it off.

``async with TcpProxy("127.0.0.1", 6379) as proxy``: connect to ``127.0.0.1:proxy.port`` instead.
``proxy.delay`` (seconds) is added before each chunk sent towards the service; ``proxy.cut()`` closes
every connection and refuses new ones until ``proxy.restore()``.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards loopback connections to ``host:port``; see the module docstring."""

    def __init__(self, host: str, port: int, *, delay: float = 0.0) -> None:
        self.host = host
        self.target_port = port
        self.delay = delay
        self.down = False
        self.port = 0
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
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    def restore(self) -> None:
        """Accept connections again."""
        self.down = False

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
        await asyncio.gather(self._pump(reader, up_writer, slow=True), self._pump(up_reader, writer, slow=False))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, slow: bool) -> None:
        try:
            while data := await reader.read(65536):
                if slow and self.delay:
                    await asyncio.sleep(self.delay)
                if self.down:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
