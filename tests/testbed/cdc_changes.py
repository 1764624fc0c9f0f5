"""Change data as a CDC pipeline lands it (`key`, `sequence`, `deleted`, `item`,
`changed_at`: the columns of examples/cdc), generated per shard for the Spark cluster's
tests and bench: each shard owns the keys congruent to it, sequences grow per shard, a
tenth of the changes delete their key. `expected_mirror` is what the mirror must hold."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from streamconsumer.spark import BatchInfo

SEQUENCE_DIGITS = 40  # as examples/cdc pads them

CHANGES = pa.schema(
    [
        ("key", pa.string()),
        ("sequence", pa.string()),
        ("deleted", pa.bool_()),
        ("item", pa.string()),
        ("changed_at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class ChangeBatch:
    info: BatchInfo
    rows: pa.Table


def change_batches(
    shard: int, shards: int, batches: int, size: int, keys: int, seed: int = 0
) -> list[ChangeBatch]:
    rng = random.Random(f"{seed}-{shard}")
    owned = [n for n in range(keys) if n % shards == shard]
    shard_id = f"shardId-{shard:012d}"
    out, sequence = [], 10**20 * (shard + 1)
    for _ in range(batches):
        rows = []
        for _ in range(size):
            sequence += rng.randrange(1, 1000)
            n = rng.choice(owned)
            deleted = rng.random() < 0.1
            item = (
                None if deleted else json.dumps({"pk": {"S": f"k{n}"}, "v": {"N": str(sequence)}})
            )
            rows.append(
                {
                    "key": f"k{n}",
                    "sequence": str(sequence).zfill(SEQUENCE_DIGITS),
                    "deleted": deleted,
                    "item": item,
                    "changed_at": datetime(2026, 11, 29, tzinfo=UTC),
                }
            )
        first, last = (str(row["sequence"]) for row in (rows[0], rows[-1]))
        info = BatchInfo("cdc", shard_id, first, last, size)
        out.append(ChangeBatch(info, pa.Table.from_pylist(rows, schema=CHANGES)))
    return out


def expected_mirror(batches: Iterable[ChangeBatch]) -> dict[str, dict[str, object]]:
    """Key -> item of the live rows: per key, the change with the highest sequence."""
    newest: dict[str, tuple[str, dict[str, object] | None]] = {}
    for batch in batches:
        for row in batch.rows.to_pylist():
            if row["key"] not in newest or row["sequence"] > newest[row["key"]][0]:
                item = None if row["deleted"] else json.loads(row["item"])
                newest[row["key"]] = (row["sequence"], item)
    return {key: item for key, (_, item) in newest.items() if item is not None}
