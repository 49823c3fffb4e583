"""bot.testing.ports: a port named before its server starts is one no other test process, and no outgoing
connection, can be given meanwhile."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bot.testing import ports
from bot.testing.ports import free_port

HOLD = "from bot.testing.ports import free_port; print(free_port(), flush=True); input()"


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process hands out its block from the start again (as a new test process does)."""
    monkeypatch.setattr(ports, "_handed_out", itertools.count())


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


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    first = ports.FIRST + 5 * ports.PER_WORKER
    with socket.socket() as held:  # the block's first port is taken by someone else
        held.bind(("127.0.0.1", first))
        held.listen()
        second = free_port()
    assert second != first
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", second))  # and it is free


@pytest.mark.parametrize("worker", ["gw11", "gw23"])  # gw23 walks gw11's block
def test_a_port_another_live_process_was_given_is_never_given_here(
    worker: str, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    """Two test runs side by side (a CI run and a developer's) walk the same blocks in the same order: the second
    was handed the first's port, which the first's server then held ("in use by another process"). In the last
    block (gw11), which no worker of a run of at most 8 walks: once the other process ended, this run's own gw0
    took its port before the check that it was given back (CI's lowest-versions run, once)."""
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw11"}
    other = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None
        theirs = int(other.stdout.readline())  # reserved while that process lives; nothing listens on it yet
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        mine = [free_port() for _ in range(3)]
        assert theirs not in mine, (theirs, mine)
    finally:
        other.communicate(b"\n", timeout=30)
    assert ports.reserve(theirs)  # given back when that process ended


def test_the_block_of_a_worker_outside_the_suites_range_still_stays_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw40")
    low, _high = ephemeral_range()
    assert free_port() < low
