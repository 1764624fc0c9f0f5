"""`processor.processes` above 1: a pod's worker processes and the supervisor over them
(docs/parallelism.md#processes).

Each process is a whole worker of its own, named `<pod>#<index>`: the operator leases
shards to it as to any worker, so a CPU-bound processor gets a core per process and
every guarantee holds per process unchanged. The supervisor is the container's main
process and does nothing but:

- start the processes (no processor code of its own: a crash in it is theirs);
- pass SIGTERM on (a container runtime signals only the main process): each hands its
  shards off within the grace period, as a worker of one process does;
- end as one unit: when a process ends by itself (a hung call, a refusal), the others
  hand their shards off too and the supervisor exits with the first status that is not 0.
  The kubelet then restarts the container with its back-off, as it restarts a worker of
  one process; no restart loop of our own hides a crash from `kubectl get pods`;
- serve the processes' metrics on the pod's port, each series labelled with its
  process (process_metrics.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from streamconsumer.models.api import process_worker
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.process_metrics import serve_processes

log = logging.getLogger(__name__)

WORKER_COMMAND = (sys.executable, "-m", "streamconsumer.worker")
PROCESS_METRICS_ADDRESS = "127.0.0.1"
POLL_SECONDS = 0.2
# A process still running this long after its drain began is killed: its own drain ends
# within drain_seconds, so only a process frozen past it is left.
KILL_AFTER_DRAIN_MARGIN_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1  # prctl(2)


def process_metrics_port(pod_port: int, index: int) -> int:
    """Where process `index` serves its metrics, on localhost (the pod's port + 1 + index)."""
    return pod_port + 1 + index


def process_env(config: WorkerConfig, index: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of process `index`: the pod's, naming the process' own worker."""
    name = WorkerConfig.env_name
    port = process_metrics_port(config.metrics_port, index) if config.metrics_port else 0
    return {
        **environ,
        name("worker_name"): process_worker(config.worker_name, index),
        name("processes"): "1",
        name("metrics_port"): str(port),
        name("metrics_address"): PROCESS_METRICS_ADDRESS,
    }


def _die_with_parent(parent: int) -> None:
    """In the new process, before it runs: SIGTERM it when the supervisor dies (Linux),
    so a killed supervisor outside a container (which would take every process with it)
    leaves no worker running unseen. It may have died already: then end at once."""
    # The supervisor's Python handler is inherited until exec and would swallow the
    # signal: until then, SIGTERM ends this process as it would any other.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(0)


class PodProcesses:
    """The supervisor's decisions, pure (the simulation's pods run them too): to whom a
    SIGTERM goes, which process to kill, the pod's exit status. Processes are numbered
    0..count-1; times are a monotonic clock's."""

    def __init__(self, count: int, drain_seconds: float) -> None:
        self.running = set(range(count))
        self._kill_after = drain_seconds + KILL_AFTER_DRAIN_MARGIN_SECONDS
        self.drain_started: float | None = None
        self.status = 0  # the first status that was not 0, as a shell says it

    def drain(self, now: float) -> list[int]:
        """SIGTERM came: the processes to pass it to."""
        if self.drain_started is None:
            self.drain_started = now
        return sorted(self.running)

    def ended(self, index: int, status: int, now: float) -> list[int]:
        """Process `index` ended with `status` (negative: killed by that signal). If it
        ended by itself, the pod ends: the others are to be sent SIGTERM."""
        self.running.discard(index)
        if status != 0 and self.status == 0:
            self.status = status if status > 0 else 128 - status
        if self.drain_started is not None:
            return []
        return self.drain(now)

    @property
    def kill_at(self) -> float | None:
        """When a process still running is killed (drain_seconds and a margin after the
        drain began)."""
        return None if self.drain_started is None else self.drain_started + self._kill_after

    def overdue(self, now: float) -> list[int]:
        """The processes to kill now."""
        kill_at = self.kill_at
        return sorted(self.running) if kill_at is not None and now >= kill_at else []

    @property
    def done(self) -> bool:
        return not self.running


class Supervisor:
    """Drives PodProcesses with real processes."""

    def __init__(
        self,
        config: WorkerConfig,
        command: Sequence[str] = WORKER_COMMAND,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._config = config
        self._command = list(command)
        self._environ = dict(os.environ if environ is None else environ)
        self._pod = PodProcesses(config.processes, config.drain_seconds)
        self._processes: list[subprocess.Popen[bytes]] = []
        self._killed: set[int] = set()

    def start(self) -> None:
        """Starts the processes; before any thread of ours runs (a fork with threads may
        copy a held lock)."""
        parent = os.getpid()
        for index in range(self._config.processes):
            process = subprocess.Popen(
                self._command,
                env=process_env(self._config, index, self._environ),
                stdin=subprocess.DEVNULL,
                preexec_fn=lambda: _die_with_parent(parent),  # no thread of ours runs yet
            )
            self._processes.append(process)
        if self._pod.drain_started is not None:  # SIGTERM came while starting them
            self._terminate(self._pod.drain(time.monotonic()))
        log.info("worker: %d processes started", len(self._processes))

    def drain(self, *_: object) -> None:
        """Every process hands its shards off (the SIGTERM handler)."""
        self._terminate(self._pod.drain(time.monotonic()))

    def run(self) -> int:
        """Waits for every process to end; the pod's exit status."""
        pod = self._pod
        while not pod.done:
            for index in sorted(pod.running):
                status = self._processes[index].poll()
                if status is None:
                    continue
                if pod.drain_started is None:
                    log.error(
                        "worker: process %d ended by itself (status %d): the others hand "
                        "their shards off, and the pod's container ends",
                        index,
                        status,
                    )
                self._terminate(pod.ended(index, status, time.monotonic()))
            for index in pod.overdue(time.monotonic()):
                self._kill(index)
            if not pod.done:
                time.sleep(POLL_SECONDS)
        return pod.status

    def _terminate(self, indexes: list[int]) -> None:
        for index in indexes:
            if index < len(self._processes):  # (a SIGTERM while they start)
                with contextlib.suppress(ProcessLookupError):
                    self._processes[index].send_signal(signal.SIGTERM)

    def _kill(self, index: int) -> None:
        if index not in self._killed:
            self._killed.add(index)
            log.error("worker: process %d still runs past its drain: killed", index)
        with contextlib.suppress(ProcessLookupError):
            self._processes[index].kill()


def supervise(config: WorkerConfig, command: Sequence[str] = WORKER_COMMAND) -> int:
    """The container's main process when processor.processes is above 1."""
    supervisor = Supervisor(config, command)
    signal.signal(signal.SIGTERM, supervisor.drain)
    signal.signal(signal.SIGINT, supervisor.drain)
    supervisor.start()
    if config.metrics_port:
        ports = [process_metrics_port(config.metrics_port, i) for i in range(config.processes)]
        serve_processes(config.metrics_port, config.metrics_address, ports)
    return supervisor.run()
