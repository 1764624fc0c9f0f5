"""A processor for end-to-end tests and the demo: it records every record it processes
(shard, sequence, worker) as a JSON line, so a test can prove nothing was lost, order
held per shard, and count duplicates."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamconsumer
from streamconsumer import processor as sdk
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record, ShardInfo

if TYPE_CHECKING:
    from streamconsumer.processor import BatchResult

_lock = threading.Lock()
_serial = threading.Lock()
log = logging.getLogger(__name__)  # a processor's own logger (spec.processor.logLevel)


def change_token(record: Record) -> str:
    """A table change as the test bed names it: "EVENT:v", with `v` the unique value the
    change wrote (its new image's, or for a REMOVE the old image's)."""
    image = record.new_image if record.new_image is not None else record.old_image
    return f"{record.event_name}:{(image or {}).get('v')}"


def record_lines(shard: str, worker: str, records: Iterable[tuple[str, int, str]]) -> str:
    """The lines `read_report` reads, one per (sequence number, sub-sequence number,
    data) that `worker` processed on `shard`, now."""
    return "".join(
        json.dumps(
            {
                "shard": shard,
                "seq": seq,
                "sub": sub,
                "data": data,
                "worker": worker,
                "t": time.time(),
            }
        )
        + "\n"
        for seq, sub, data in records
    )


class RecordingProcessor(BaseRecordProcessor):
    """Appends one line per record to $RECORD_DIR/<worker>.jsonl, then checkpoints."""

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        directory = Path(os.environ["RECORD_DIR"])
        directory.mkdir(parents=True, exist_ok=True)
        self.worker = os.environ.get("STREAMCONSUMER_WORKER_NAME", "worker")
        self.path = directory / f"{self.worker}.jsonl"
        log.info("recording %s to %s", shard.shard_id, self.path)
        # Which streamconsumer package runs this worker (another release's, in the
        # upgrade test): $RECORD_DIR/<worker>.package.
        (directory / f"{self.worker}.package").write_text(
            str(Path(streamconsumer.__file__).resolve().parent)
        )
        self.delay = float(os.environ.get("RECORD_DELAY_SECONDS", "0"))
        # Fail the first attempt of every n-th batch (0: never), to exercise retries.
        self.fail_every = int(os.environ.get("RECORD_FAIL_EVERY", "0"))
        # While this file exists every batch fails: a sink that is down (poison).
        self.down_while = os.environ.get("RECORD_DOWN_WHILE")
        # A record whose data is this value makes every batch holding it fail (a poison).
        self.poison = os.environ.get("RECORD_POISON")
        # A record larger than this many bytes is a poison too (one too large for an env).
        self.poison_over = int(os.environ.get("RECORD_POISON_OVER_BYTES", "0"))
        # The first batch holding this value hangs (sleeps RECORD_HANG_SECONDS) before
        # recording anything; RECORD_HANG_MARK (a file) says it has happened.
        self.hang = os.environ.get("RECORD_HANG")
        # Every n-th batch of more than one record reports its second half failed, once
        # (a partial batch response); each report is a line in $RECORD_DIR/<worker>.partial.
        self.partial_every = int(os.environ.get("RECORD_PARTIAL_EVERY", "0"))
        self.reported: set[str] = set()  # first failed records reported so far
        self.batches = 0
        self.failed = False

    def process_records(
        self, records: list[Record], checkpointer: Checkpointer
    ) -> BatchResult | None:
        if self.hang and any(r.data.decode() == self.hang for r in records):
            mark = Path(os.environ["RECORD_HANG_MARK"])
            if not mark.exists():
                mark.write_text(f"{self.worker} {time.time()}")
                time.sleep(float(os.environ.get("RECORD_HANG_SECONDS", "3600")))
        if self.poison and any(r.data.decode() == self.poison for r in records):
            raise ValueError(f"injected failure: cannot process {self.poison}")
        if self.poison_over and any(len(r.data) > self.poison_over for r in records):
            raise ValueError(f"injected failure: cannot process over {self.poison_over} bytes")
        if self.down_while and os.path.exists(self.down_while):
            raise RuntimeError("injected failure: the sink is down until the test says so")
        if self.fail_every and not self.failed and self.batches % self.fail_every == 0:
            self.failed = True
            raise RuntimeError("injected failure: the sink is down")
        self.failed = False
        self.batches += 1
        half = len(records) // 2
        partly = (
            self.partial_every
            and self.batches % self.partial_every == 0
            and half
            and records[half].sequence_number not in self.reported
        )
        if partly:
            self.reported.add(records[half].sequence_number)
            with _lock, self.path.with_suffix(".partial").open("a") as out:
                out.write(f"{self.shard.shard_id} {records[half].sequence_number}\n")
            self._record(records[:half])
            checkpointer.checkpoint(records[half - 1])
            # Looked up here: the previous release's workers run this processor too (the
            # upgrade tests), with an SDK that has no BatchResult (and no partial_every).
            return sdk.BatchResult(failed=[r.sequence_number for r in records[half:]])
        self._record(records)
        checkpointer.checkpoint()
        return None

    def _record(self, records: list[Record]) -> None:
        lines = record_lines(
            self.shard.shard_id,
            self.worker,
            (
                (
                    r.sequence_number,
                    r.sub_sequence_number or 0,
                    change_token(r) if r.event_name else r.data.decode(),
                )
                for r in records
            ),
        )
        with _lock, self.path.open("a") as out:
            out.write(lines)
        if self.delay:
            # RECORD_SERIAL=1: one batch at a time per worker, like a CPU-bound processor,
            # so more workers mean more capacity.
            with _serial if os.environ.get("RECORD_SERIAL") else contextlib.nullcontext():
                time.sleep(self.delay)


@dataclass
class Report:
    processed: int
    unique: int
    duplicates: int
    lost: set[str]
    order_violations: list[str] = field(default_factory=list)
    by_worker: Counter[str] = field(default_factory=Counter)
    by_shard: dict[str, list[str]] = field(default_factory=dict)
    # shard -> (first, last) wall time a record of it was processed
    shard_times: dict[str, tuple[float, float]] = field(default_factory=dict)
    # shard -> workers in the order they processed it (consecutive repeats collapsed)
    shard_owners: dict[str, list[str]] = field(default_factory=dict)
    # worker -> wall time of the last record it processed
    last_processed: dict[str, float] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def first_processed(self, shard: str, after: float, besides: str) -> float | None:
        """When a worker other than `besides` first processed `shard` after `after`."""
        times = [
            e["t"]
            for e in self.events
            if e["shard"] == shard and e["worker"] != besides and e["t"] > after
        ]
        return min(times, default=None)

    def children_before_parents(self, shards: Iterable[Mapping[str, Any]]) -> list[str]:
        """Of `shards` (as ListShards lists them), each child processed before a parent's
        last record, as "child started before parent finished" (none: parents first)."""
        early = []
        for child in (s for s in shards if s.get("ParentShardId")):
            if child["ShardId"] not in self.shard_times:
                continue  # no record hashed to it
            child_first = self.shard_times[child["ShardId"]][0]
            for parent in filter(
                None, [child["ParentShardId"], child.get("AdjacentParentShardId")]
            ):
                if self.shard_times[parent][1] > child_first:
                    early.append(f"{child['ShardId']} started before {parent} finished")
        return early

    def longest_pause(self, since: float, until: float) -> float:
        """The longest time between records processed on any one shard within the span
        (with records put steadily: how long that shard stood still)."""
        longest = 0.0
        for shard in self.shard_times:
            times = [since] + [
                e["t"] for e in self.events if e["shard"] == shard and since <= e["t"] <= until
            ]
            longest = max([longest, *(b - a for a, b in itertools.pairwise(times))])
        return longest


def packages(directory: Path) -> dict[str, str]:
    """worker -> the directory of the streamconsumer package it ran."""
    return {path.stem: path.read_text() for path in sorted(directory.glob("*.package"))}


def read_report(directory: Path, produced: set[str]) -> Report:
    """Checks what the workers recorded against the data values produced."""
    events = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    events.sort(key=lambda e: e["t"])
    seen = Counter(e["data"] for e in events)
    by_shard: dict[str, list[str]] = defaultdict(list)
    first_seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
    done: set[tuple[str, str, int]] = set()
    for event in events:
        by_shard[event["shard"]].append(event["data"])
        key = (event["shard"], event["seq"], event["sub"])
        if key not in done:
            done.add(key)
            first_seen[event["shard"]].append((int(event["seq"]), event["sub"]))
    shard_times: dict[str, tuple[float, float]] = {}
    shard_owners: dict[str, list[str]] = defaultdict(list)
    last_processed: dict[str, float] = {}
    for event in events:
        shard, when, worker = event["shard"], event["t"], event["worker"]
        first, _ = shard_times.get(shard, (when, when))
        shard_times[shard] = (first, when)
        if not shard_owners[shard] or shard_owners[shard][-1] != worker:
            shard_owners[shard].append(worker)
        last_processed[worker] = when
    violations = []
    for shard, positions in first_seen.items():
        # Per-shard order: every record is first processed after all records before it
        # (replays after a crash are duplicates, counted separately).
        for before, after in itertools.pairwise(positions):
            if after < before:
                violations.append(f"{shard}: {after} processed after {before}")
    return Report(
        processed=len(events),
        unique=len(seen),
        duplicates=sum(count - 1 for count in seen.values()),
        lost=produced - set(seen),
        order_violations=violations,
        by_worker=Counter(e["worker"] for e in events),
        by_shard=dict(by_shard),
        shard_times=shard_times,
        shard_owners=dict(shard_owners),
        last_processed=last_processed,
        events=events,
    )


class CountingProcessor(BaseRecordProcessor):
    """A near no-op processor for throughput benchmarks: counts records per shard and
    notes, once per batch, the count and the time in $RECORD_DIR/<shard>.count."""

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        self.path = Path(os.environ["RECORD_DIR"]) / f"{shard.shard_id}.count"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.started = time.time()

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.count += len(records)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(f"{self.count} {self.started} {time.time()}")
        partial.replace(self.path)  # readers never see a half-written file
        checkpointer.checkpoint()


class HashingProcessor(BaseRecordProcessor):
    """A CPU-bound processor for benchmarks: $HASH_ROUNDS rounds of sha256 over each
    record; notes, once per call, the shard's count, the start of its first call and the
    time in $RECORD_DIR/<shard>.<worker>.count (a shard that moves has a file per owner)."""

    def initialize(self, shard: ShardInfo) -> None:
        super().initialize(shard)
        worker = os.environ.get("STREAMCONSUMER_WORKER_NAME", "worker")
        self.path = Path(os.environ["RECORD_DIR"]) / f"{shard.shard_id}.{worker}.count"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rounds = int(os.environ.get("HASH_ROUNDS", "1000"))
        self.count = 0
        self.started: float | None = None

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        if self.started is None:
            self.started = time.time()
        for record in records:
            digest = record.data
            for _ in range(self.rounds):
                digest = hashlib.sha256(digest).digest()
        self.count += len(records)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(f"{self.count} {self.started} {time.time()}")
        partial.replace(self.path)
        checkpointer.checkpoint()
