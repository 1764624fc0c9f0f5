"""Clickstream events put into a stream while the workers consume it, and what their logs
say of them: what the real-node tests that count events share."""

from __future__ import annotations

import json
import threading
from typing import Any

from realnode.deliveries import Event, Producer, judge
from testbed.kinesis import KinesisEmulator, put_records
from testbed.node import Cluster
from testbed.podlogs import PodLogs
from testbed.userpath import EXAMPLES, Kubectl, edited_example
from testbed.waiting import wait_for

KEYS = [f"k{i:02d}" for i in range(16)]


class EventFlow:
    """Events for `stream` over 16 partition keys, and the worker pods' logs in
    `namespace` (read from now on; `logs.stop()` ends it). `produce` may run on a thread
    of its own while the test waits (`wait_all_processed`)."""

    def __init__(
        self,
        cluster: Cluster,
        kubectl: Kubectl,
        emulator: KinesisEmulator,
        stream: str,
        namespace: str,
    ) -> None:
        self.producer = Producer(list(KEYS))
        self.logs = PodLogs(cluster.node.log_dir(), namespace).start()
        self._kubectl = kubectl
        self._emulator = emulator
        self._stream = stream
        self._namespace = namespace
        self._lock = threading.Lock()

    def example(self, image: str) -> dict[str, Any]:
        """The clickstream example's StreamConsumer with `image`, reading this flow's
        stream, its processor logging at INFO (the lines `judge` reads)."""
        env = {"STREAMCONSUMER_LOG_LEVEL": "INFO"}
        return edited_example(
            EXAMPLES / "streamconsumer.yaml", image, self._stream, self._emulator, env
        )

    def apply_ready(self, manifest: dict[str, Any]) -> None:
        """Applies `manifest` in this flow's namespace and waits up to 3 minutes for the
        StreamConsumer to be Ready."""
        kubectl, namespace = self._kubectl, self._namespace
        kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
        name = manifest["metadata"]["name"]
        kubectl(
            "-n", namespace, "wait", f"streamconsumer/{name}",
            "--for=condition=Ready", "--timeout=3m",
        )  # fmt: skip

    def produce(self, count: int) -> None:
        with self._lock:
            put_records(self._emulator.client, self._stream, self.producer.batch(count))

    def produced(self) -> list[Event]:
        """The events put so far (a copy: `produce` may be adding to them)."""
        with self._lock:
            return list(self.producer.produced)

    def wait_all_processed(self, what: str) -> None:
        """Waits up to 3 minutes for every event put so far to show in the logs; the
        failure shows the last lines of each worker's log."""
        wait_for(self.all_processed, 180, what, poll=0.5, details=self.worker_logs)

    def all_processed(self) -> bool:
        self._kubectl.pods(self._namespace)  # fails at once if a worker keeps crashing
        return not judge(self.produced(), self.logs.streams()).lost

    def worker_logs(self) -> str:
        return "\n".join(
            f"--- {s.pod}\n" + "\n".join(lines[-15:]) for s, lines in self.logs.streams().items()
        )
