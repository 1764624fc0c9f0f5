"""Starting and stopping the servers the tests need: loopback ports, logs, PIDs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
