"""A stdio MCP server's stderr (:class:`ServerStderr`): logged at DEBUG line by line, its last lines kept to explain
why the server failed."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections import deque
from typing import TextIO

log = logging.getLogger(__name__)


class ServerStderr:
    """A stdio server's stderr: logged at DEBUG, line by line, and its last lines kept to explain a failure."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._lines: deque[str] = deque(maxlen=5)
        self._partial = b""
        self._loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._read_fd: int | None = read_fd
        os.set_blocking(read_fd, False)
        try:
            self._loop.add_reader(read_fd, self._readable)
        except NotImplementedError:  # an event loop without add_reader: the server writes to our stderr
            self.writer.close()
            os.close(read_fd)
            self._read_fd, self.writer = None, sys.stderr

    def spawned(self) -> None:
        """The server has its copy of the pipe: close ours, so the pipe ends when the server does."""
        if self.writer is not sys.stderr:
            self.writer.close()

    def last_line(self) -> str:
        """The last non-blank line the server wrote (at most 200 characters), or ``""``."""
        self._readable()
        pending = [self._partial.decode("utf-8", "replace")] if self._partial.strip() else []
        line = next((line for line in reversed([*self._lines, *pending]) if line.strip()), "")
        return line.strip()[:200]

    def close(self) -> None:
        self.spawned()
        if self._read_fd is not None:
            self._readable()
            self._loop.remove_reader(self._read_fd)
            os.close(self._read_fd)
            self._read_fd = None

    def _readable(self) -> None:
        while self._read_fd is not None:
            try:
                data = os.read(self._read_fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:  # the server (and everything it started) closed its stderr
                self._loop.remove_reader(self._read_fd)
                return
            *lines, self._partial = (self._partial + data).split(b"\n")
            if len(self._partial) > 65536:  # no newline for that long: take it as a line
                lines.append(self._partial)
                self._partial = b""
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip()
                self._lines.append(line)
                log.debug("MCP server %s: %s", self.server, line)
