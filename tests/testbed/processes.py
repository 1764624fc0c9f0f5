"""Starting and stopping the servers the tests need: loopback ports, logs, PIDs."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

# The tests' JVMs (Spark drivers, DynamoDB Local) live for a few small requests: the C1
# compiler alone and the serial collector spend about a quarter less CPU than the defaults
# (C2's compile threads, G1's workers) on the suite's 2 cores (tests/spark/test_cdc_mirror.py:
# 186 -> 138 CPU-s). Production keeps the JVM's defaults.
BRIEF_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

# Ports handed out come from below the kernel's ephemeral range, so no outgoing
# connection's source port can take one between our pick and the server's bind (how a
# CI run lost an operator's probe port), and from a slice per xdist worker, so two
# workers never pick the same one. Above the fixed ports the bed uses (kube-proxy's 10249
# and 10256, the kubelet's 10250, Spark Connect's 15002).
_LOWEST_PORT = 20000
_WORKER_SLICES = 8


def _port_range() -> range:
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    width = max(ephemeral_low - _LOWEST_PORT, _WORKER_SLICES) // _WORKER_SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = _LOWEST_PORT + (int(worker) if worker.isdigit() else 0) % _WORKER_SLICES * width
    return range(first, first + width)


_PORTS = _port_range()
# Each process starts at a random place in its slice: a test's subprocesses share its slice.
_next_port = secrets.randbelow(len(_PORTS))


def free_port(count: int = 1) -> int:
    """The first of `count` consecutive TCP ports on 127.0.0.1 that nothing listens on
    right now, none handed out before by this process (until its slice wraps)."""
    global _next_port
    for _ in range(len(_PORTS)):
        first = _PORTS[_next_port]
        _next_port = (_next_port + count) % len(_PORTS)
        ports = range(first, first + count)
        if ports.stop <= _PORTS.stop and all(_bindable(port) for port in ports):
            return first
    raise RuntimeError(f"no {count} free consecutive ports in {_PORTS}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def serve_until_one_exits(servers: Sequence[Server], what: str) -> None:
    """A command-line bed's main loop: returns once one of `servers` exits (saying so on
    stderr) or on Ctrl-C; stopping the rest is the caller's."""
    try:
        while all(server.process.poll() is None for server in servers):
            time.sleep(1)
        print(f"A {what} process exited; stopping the rest.", file=sys.stderr)
    except KeyboardInterrupt:
        pass


@contextlib.contextmanager
def stopped_on_failure(stop: Callable[[], None]) -> Iterator[None]:
    """Calls `stop` if the block fails, then lets the failure through: what a start
    left half-started is nobody else's to stop."""
    try:
        yield
    except BaseException:
        stop()
        raise


class Server:
    """One child process with its log file; stopped by PID (never by name)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            list(argv),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,  # its own process group: stop() reaches its children too
            pass_fds=tuple(pass_fds),
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Polls `ready` until true; fails with the log if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode} before {what}:\n"
                    f"{self.log_tail()}"
                )
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not {what} after {timeout:.0f}s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """SIGTERM, without waiting for the exit (stop waits)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


@dataclass(kw_only=True)
class LoopbackService:
    """A Server of ours that serves HTTP on `host`:`port` (an emulator), stopped with it."""

    port: int
    server: Server
    workdir: Path
    host: str = "127.0.0.1"

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
