"""Loopback ports for tests that must name a port before the server behind it starts (``METRICS_PORT``, a second
process's ``PORT``, a port nothing listens on).

A port taken with ``bind(("127.0.0.1", 0))`` and closed again is one of the kernel's ephemeral ports (Linux:
32768-60999, ``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel hands out again at once for any other
``bind(0)`` and for every outgoing connection (a Redis client's, an HTTP client's): in a parallel suite another
test's connection took it before the server bound it ("it is in use by another process"). :func:`free_port` takes
ports below that range instead, from a block of its own for each pytest-xdist worker (``PYTEST_XDIST_WORKER`` =
``gw0``, ``gw1``...), and reserves each port it hands out for as long as the process lives: an exclusive ``flock``
on ``<tmp>/bot-test-ports/<port>.lock``, which the kernel drops when the process ends. So no other process on the
machine that asks here (another worker, another test run beside this one) is handed the same port meanwhile, and
nothing else binds in that range (it is below the ephemeral one, above the services of these machines).
"""

from __future__ import annotations

import itertools
import os
import socket
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: ports are then checked by binding only
    fcntl = None  # type: ignore[assignment]

FIRST = 20_000  # the first block's first port: below the ephemeral range, above the services on these machines
PER_WORKER = 1_000  # ports in each worker's block
BLOCKS = 12  # gw0..gw11 (the suite runs at most 8 workers); 20000 + 12 * 1000 stays below 32768
LOCKS = Path(tempfile.gettempdir()) / "bot-test-ports"

_handed_out = itertools.count()
_reservations: list[int] = []  # the lock files' descriptors, open while this process lives


def _block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return int(worker) % BLOCKS if worker.isdigit() else 0


def reserve(port: int) -> bool:
    """Reserve ``port`` for this process (until it ends): False when another live process holds it."""
    if fcntl is None:
        return True
    LOCKS.mkdir(mode=0o777, exist_ok=True)
    fd = os.open(LOCKS / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _reservations.append(fd)
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on now and that no other process asking here is given while this one
    lives: the next free one of this worker's block (checked by binding it), reserved (:func:`reserve`). Raises
    ``RuntimeError`` when the whole block is taken."""
    start = FIRST + _block() * PER_WORKER
    for _ in range(PER_WORKER):
        port = start + next(_handed_out) % PER_WORKER
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or lingering in TIME_WAIT): the next one
        if reserve(port):
            return port
    raise RuntimeError(f"no free port in {start}-{start + PER_WORKER - 1} on {host}")
