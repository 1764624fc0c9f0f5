"""Attacks on the worker API's connections (issue 40), on the operator's real listeners
over loopback, with real TLS from the operator's serving context: the server runs in a
process of its own with a small open-file limit (`listening_operator.py`), so that what
exhausts a production pod's files costs a test a few hundred sockets."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.processes import free_port

CHILD = Path(__file__).with_name("listening_operator.py")
FILES = 128  # the child's open-file limit
PER_CLIENT, TOTAL = 16, 40
ATTACKER, NEIGHBOUR = "127.0.0.1", "127.0.0.2"
# A TLS 1.2 record header and the start of a ClientHello: a handshake begun, never ended.
PARTIAL_HELLO = bytes.fromhex("160301020001000200")


@dataclass(frozen=True)
class Listening:
    pid: int
    api_port: int
    probe_url: str
    ca_file: Path

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@contextlib.contextmanager
def listening(tmp_path: Path, header_timeout: float = 15.0) -> Iterator[Listening]:
    env = {
        **os.environ,
        "STREAMCONSUMER_API_HOST": ATTACKER,
        "STREAMCONSUMER_API_PORT": str(free_port()),
        "STREAMCONSUMER_PROBE_PORT": str(free_port()),
        "STREAMCONSUMER_API_MAX_CONNECTIONS": str(TOTAL),
        "STREAMCONSUMER_API_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
        "STREAMCONSUMER_API_HEADER_TIMEOUT_SECONDS": str(header_timeout),
    }
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(FILES)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        ready = json.loads(child.stdout.readline())
        ca_file = tmp_path / "ca.crt"
        ca_file.write_text(ready["ca"])
        yield Listening(child.pid, ready["api"], ready["probe"], ca_file)
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def silent_connections(port: int, count: int, source: str = ATTACKER) -> list[socket.socket]:
    """`count` connections begun at once that never send a byte (those the server's
    backlog cannot take stay half-open: their connect is not awaited)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((source, 0))
        sock.setblocking(False)
        sock.connect_ex((ATTACKER, port))
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except ConnectionResetError:
        return True
    except OSError:
        return False  # never connected


def closed_within(sockets: list[socket.socket], wanted: int, limit: float) -> int:
    """How many of `sockets` the server has closed once `wanted` are, or after `limit`
    seconds (those its backlog could not take at first connect again meanwhile)."""
    deadline = time.monotonic() + limit
    closed: set[socket.socket] = set()
    while len(closed) < wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        closed.update(s for s in sockets if s not in closed and closed_by_server(s))
    return len(closed)


def seconds_until_closed(sock: socket.socket, since: float, limit: float) -> float:
    """How long after `since` the server closed `sock` (about `limit` if it did not)."""
    sock.setblocking(True)
    sock.settimeout(max(0.0, since + limit - time.monotonic()))
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while sock.recv(4096):
            pass
    return time.monotonic() - since


def probe(url: str) -> int:
    """What the kubelet's probe gets: it trusts any certificate, waits 1 s by default."""
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=1, context=unverified) as response:
            return int(response.status)
    except OSError:
        return 0


def worker_get(server: Listening, source: str) -> int:
    """A worker's HTTPS call from `source`, verifying the operator's CA; 0 if none."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    connection = http.client.HTTPSConnection(
        ATTACKER, server.api_port, timeout=2, context=context, source_address=(source, 0)
    )
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def test_silent_connections_from_one_client_leave_probes_and_other_clients_served(
    tmp_path: Path,
) -> None:
    """1,100 silent connections from one client took 1,024 open files, and the liveness
    probe failed until they were let go: here 200 against a limit of 128."""
    with listening(tmp_path) as server:
        attack = silent_connections(server.api_port, 200)
        try:
            closed = closed_within(attack, 200 - PER_CLIENT, 5.0)
            seen = {
                "probe": probe(server.probe_url),
                "neighbour": worker_get(server, NEIGHBOUR),
                "closed": closed,
                "server's files": server.open_files(),
            }
            print(f"attack of 200 silent connections: {seen}")
            assert seen["probe"] == 200, "the liveness probe failed"
            assert seen["neighbour"] == 200, "another client was not served"
            assert closed >= 200 - PER_CLIENT, "connections past the client's cap were kept"
            assert seen["server's files"] < FILES // 2
        finally:
            for sock in attack:
                sock.close()


def test_a_tls_handshake_not_finished_within_the_header_timeout_is_closed(
    tmp_path: Path,
) -> None:
    """asyncio's default handshake timeout is 60 s: a silent connection, or one that
    began its ClientHello and stopped, held a file that long."""
    with listening(tmp_path, header_timeout=1.0) as server:
        began = time.monotonic()
        silent, partial = silent_connections(server.api_port, 2)
        select.select([], [silent, partial], [], 1)
        partial.send(PARTIAL_HELLO)
        waits = [seconds_until_closed(s, began, 5.0) for s in (silent, partial)]
        print(f"closed after {waits[0]:.2f} s (silent), {waits[1]:.2f} s (partial hello)")
        assert max(waits) < 2.5
        silent.close()
        partial.close()
