"""What a consumer's test has on the real node: the operator installed, a fresh namespace
with credentials, and the Kinesis emulator on the node to make streams in."""

from __future__ import annotations

import uuid
from typing import NamedTuple

from testbed.kinesis import KinesisEmulator, create_stream
from testbed.node import Cluster
from testbed.userpath import Kubectl


class NodeUser(NamedTuple):
    """Unpacks as `cluster, kubectl, emulator, namespace = user`."""

    cluster: Cluster
    kubectl: Kubectl
    emulator: KinesisEmulator
    namespace: str

    def new_stream(self, shards: int, prefix: str = "clicks") -> str:
        """A stream of `shards` shards on the node's emulator; its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        create_stream(self.emulator.client, name, shards)
        return name
