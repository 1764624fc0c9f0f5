"""A StreamConsumer reading a DynamoDB table's stream on DynamoDB Local: the same
operator, local kubelet and worker processes as `Scenario`, with table changes instead
of Kinesis puts. Every change writes a unique value `v`, so the recording processor's
"EVENT:v" tokens show each change processed, once, in order."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.controlplane import ControlPlane
from testbed.dynamodb import REGION, DynamoDBLocal, create_table
from testbed.scenario import Scenario


class TableScenario(Scenario):
    def __init__(
        self,
        plane: ControlPlane,
        api_client: k8s.ApiClient,
        dynamodb: DynamoDBLocal,
        namespace: str,
        table: str,
        workdir: Path,
        name: str = "orders",
    ) -> None:
        super().__init__(plane, api_client, None, namespace, table, workdir, name)
        self.dynamodb = dynamodb
        self.table = table
        self.items: dict[str, str] = {}  # item key -> its current v
        self._values = 0

    def source(self) -> dict[str, Any]:
        return {
            "dynamodbStreams": {
                "tableName": self.table,
                "region": REGION,
                "endpointURL": self.dynamodb.endpoint_url,
            }
        }

    def create_source(self, shards: int) -> None:
        assert shards == 1, "DynamoDB Local gives a table's stream one shard"
        create_table(self.dynamodb.client, self.table)

    def _value(self) -> str:
        self._values += 1
        return f"v-{self._values}"

    def put(self, key: str) -> None:
        """INSERT when the item is new, MODIFY otherwise."""
        value = self._value()
        self.dynamodb.client.put_item(
            TableName=self.table, Item={"pk": {"S": key}, "v": {"S": value}}
        )
        self.produced.add(f"{'MODIFY' if key in self.items else 'INSERT'}:{value}")
        self.items[key] = value

    def delete(self, key: str) -> None:
        self.dynamodb.client.delete_item(TableName=self.table, Key={"pk": {"S": key}})
        self.produced.add(f"REMOVE:{self.items.pop(key)}")

    def produce(self, count: int) -> None:
        """`count` random changes: puts of new items, overwrites, deletes."""
        rng = random.Random(self._values)
        for _ in range(count):
            roll = rng.random()
            if self.items and roll < 0.2:
                self.delete(rng.choice(sorted(self.items)))
            elif self.items and roll < 0.5:
                self.put(rng.choice(sorted(self.items)))
            else:
                self.put(f"item-{self._values}")
