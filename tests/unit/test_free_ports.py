"""The bed's port picks: never in the kernel's ephemeral range (where an outgoing
connection may take one before the server binds it), never the same twice, and runs of
consecutive ports that are all free."""

from __future__ import annotations

import socket
from pathlib import Path

from testbed.processes import free_port


def test_picks_are_below_the_ephemeral_range_and_not_repeated() -> None:
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picks = [free_port() for _ in range(200)]
    assert max(picks) < ephemeral_low
    assert len(set(picks)) == len(picks)


def test_runs_of_ports_are_free_and_apart() -> None:
    runs = [range(first, first + 3) for first in (free_port(3) for _ in range(50))]
    ports = [port for run in runs for port in run]
    assert len(set(ports)) == len(ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
