"""bot.testing.ports: a port named before its server starts is one no other test worker, and no outgoing connection,
can be given meanwhile."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bot.testing import ports
from bot.testing.ports import free_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


@pytest.mark.parametrize("worker", ["gw0", "gw3", "gw7"])
def test_each_worker_has_a_block_of_its_own_below_the_ephemeral_range(
    worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    start = ports.FIRST + int(worker.removeprefix("gw")) * ports.PER_WORKER
    got = [free_port() for _ in range(5)]
    assert all(start <= port < start + ports.PER_WORKER for port in got), (worker, got)
    assert len(set(got)) == 5  # each handed out once
    low, _high = ephemeral_range()
    assert max(got) < low  # never a port the kernel gives a bind(0) or an outgoing connection


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    first = free_port()
    with socket.socket() as held:  # the next port in the block is taken by someone else
        held.bind(("127.0.0.1", first + 1))
        held.listen()
        second = free_port()
    assert second not in (first, first + 1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", second))  # and it is free


def test_the_block_of_a_worker_outside_the_suites_range_still_stays_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw40")
    low, _high = ephemeral_range()
    assert free_port() < low
