"""moto's server over HTTP on a free loopback port: SQS and S3 for the dead-letter
targets' integration tests (the Kinesis target uses the Kinesis emulator), in a process
of its own; STS and IAM in this process (`InProcessMoto`), where a test can read what
moto's backends saw and have moto check IAM permissions."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from testbed.processes import Server, free_port, stopped_on_failure

REGION = "us-east-1"


@dataclass
class MotoServer:
    server: Server
    endpoint_url: str

    @classmethod
    def start(cls, workdir: Path) -> MotoServer:
        port = free_port()
        moto_server = Path(sys.executable).parent / "moto_server"
        server = Server("moto", [str(moto_server), "-H", "127.0.0.1", "-p", str(port)], workdir)
        running = cls(server, f"http://127.0.0.1:{port}")
        with stopped_on_failure(server.stop):
            server.wait_until(lambda: running.client("sqs").list_queues() is not None, 60, "ready")
        return running

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            region_name=REGION,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        self.server.stop()


@dataclass
class InProcessMoto:
    """moto's server in a thread of this process, on 127.0.0.1 and a port the kernel
    picks: its backends (moto.sts.models.sts_backends, ...) are this process's."""

    server: ThreadedMotoServer
    endpoint_url: str

    @classmethod
    def start(cls) -> InProcessMoto:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(server, f"http://{host}:{port}")

    def client(self, service: str, **credentials: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            region_name=REGION,
            endpoint_url=self.endpoint_url,
            **({"aws_access_key_id": "testing", "aws_secret_access_key": "testing"} | credentials),
        )

    def stop(self) -> None:
        self.server.stop()
