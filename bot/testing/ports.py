"""Loopback ports for tests that must name a port before the server behind it starts (``METRICS_PORT``, a second
process's ``PORT``, a port nothing listens on).

A port taken with ``bind(("127.0.0.1", 0))`` and closed again is one of the kernel's ephemeral ports (Linux:
32768-60999, ``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel hands out again at once for any other
``bind(0)`` and for every outgoing connection (a Redis client's, an HTTP client's): in a parallel suite another
test's connection took it before the server bound it ("it is in use by another process"). :func:`free_port` takes
ports below that range instead, from a block of its own for each pytest-xdist worker (``PYTEST_XDIST_WORKER`` =
``gw0``, ``gw1``...), handing out each port once per process: no other worker, and no ephemeral port, can be the one
it returned.
"""

from __future__ import annotations

import itertools
import os
import socket

FIRST = 20_000  # the first block's first port: below the ephemeral range, above the services on these machines
PER_WORKER = 1_000  # ports in each worker's block
BLOCKS = 12  # gw0..gw11 (the suite runs at most 8 workers); 20000 + 12 * 1000 stays below 32768

_handed_out = itertools.count()


def _block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return int(worker) % BLOCKS if worker.isdigit() else 0


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on now and that no other test worker will be given: the next free
    one of this worker's block (checked by binding it). Raises ``RuntimeError`` when the whole block is taken."""
    start = FIRST + _block() * PER_WORKER
    for _ in range(PER_WORKER):
        port = start + next(_handed_out) % PER_WORKER
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or lingering in TIME_WAIT): the next one
            return port
    raise RuntimeError(f"no free port in {start}-{start + PER_WORKER - 1} on {host}")
