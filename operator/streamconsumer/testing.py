"""Test your record processor the way the worker runs it, with no stream and no operator:

    records = make_records(b"a", b"b")  # sequence numbers "1", "2"
    harness = ProcessorHarness(PageCounter())
    harness.initialize()
    harness.process(records)          # raises what process_records raised
    assert harness.checkpoints == ["2"]
    harness.lose_lease()              # lease_lost(), as when another worker took the shard

Each call is wrapped as in the worker: a checkpoint your code asks for is stored once the
call returns (`checkpoints` lists them in order); a call that raises stores nothing. A
partial batch response is read as the worker reads it: `process` returns the records the
worker would deliver again (from the first failed one on), and raises BatchResultError
for a result the worker would count as the whole batch failing. An async processor (or
`async def` function) runs as in the worker, on the process's one event loop in a thread
of its own: call the harness from a plain (not async) test.

What the worker does when a batch keeps failing is the failure policy's: `deliver` runs
the worker's own shard state machine on a batch, under the policy given to the harness
(a FailurePolicy, or spec.processor.onFailure as written in the resource):

    harness = ProcessorHarness(load, policy={"retries": 2, "then": "skip"})
    delivery = harness.deliver(records)  # load fails records[1] on every call
    assert delivery.skipped == [records[1]]   # after 3 calls: the first and 2 retries
    assert delivery.checkpoints == ["1", "2"]

That part needs the worker extra (`pip install 'streamconsumer[worker]'`): the policy
is the worker's pydantic model, and nothing else here needs a dependency."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from streamconsumer import awaiting, lifecycle
from streamconsumer.deliveries import Attempt as Attempt  # re-exported: public names here
from streamconsumer.deliveries import Delivery as Delivery
from streamconsumer.deliveries import GivenUp as GivenUp
from streamconsumer.processor import (
    SHARD_END,
    Checkpointer,
    FunctionProcessor,
    ProcessResult,
    Progress,
    Record,
    RecordProcessor,
    ShardInfo,
)

if TYPE_CHECKING:
    from streamconsumer.models.failure import FailurePolicy
    from streamconsumer.worker.harness import HarnessShard

WORKER_EXTRA = "pip install 'streamconsumer[worker]'"


class NeedsWorkerExtra(ImportError):
    """ProcessorHarness.deliver runs the worker's own code: install the worker extra."""


def make_records(
    *payloads: bytes | str,
    partition_key: str = "key",
    first_sequence: int = 1,
    arrived: datetime | None = None,
) -> list[Record]:
    """Records as a worker hands them over, one per payload (a str is UTF-8 encoded), with
    sequence numbers counting from `first_sequence`: a checkpoint at any of them stores
    its sequence number, as on a real shard."""
    when = arrived or datetime.now(UTC)
    records = []
    for number, payload in enumerate(payloads, start=first_sequence):
        data = payload.encode() if isinstance(payload, str) else payload
        sequence = str(number)
        records.append(Record(data, partition_key, sequence, when, checkpoint_sequence=sequence))
    return records


class ProcessorHarness:
    """`processor`: a processor instance, or a plain function run as the worker runs one
    (checkpointed when it returns). `policy`, `consumer` (namespace/name, in dead letters)
    and `letter_limit` (the most bytes a dead letter's JSON may have at the target, an SQS
    queue's MaximumMessageSize; None: no limit) are for `deliver`."""

    def __init__(
        self,
        processor: RecordProcessor
        | awaiting.AsyncRecordProcessor
        | Callable[[list[Record]], ProcessResult | Awaitable[ProcessResult]],
        shard_id: str = "shardId-000000000000",
        start_sequence: str | None = None,
        parents: tuple[str, ...] = (),
        policy: FailurePolicy | Mapping[str, Any] | None = None,
        consumer: str = "default/harness",
        letter_limit: int | None = None,
    ) -> None:
        if awaiting.is_async(processor):
            processor = awaiting.synchronous(processor)  # as the worker runs it
        elif not isinstance(processor, RecordProcessor):
            processor = FunctionProcessor(cast(Callable[[list[Record]], ProcessResult], processor))
        self.processor: RecordProcessor = processor
        self.shard = ShardInfo(shard_id, start_sequence, parents)
        self.progress = Progress(shard_id, start_sequence)
        self.checkpointer = Checkpointer(self.progress)
        self.checkpoints: list[str] = []
        self.policy = policy
        self.consumer = consumer
        self.letter_limit = letter_limit
        self._initialized = False
        self._driver: HarnessShard | None = None

    def initialize(self) -> None:
        self._call(lambda: lifecycle.initialize(self.processor, self.shard))
        self._initialized = True

    def deliver(self, records: Sequence[Record]) -> Delivery:
        """Delivers `records` as the worker does, with the harness's failure policy:
        retries after back-offs (not waited: the harness's clock jumps over them),
        partial batch responses, maxRecordAgeSeconds (against the records' arrival
        times), bisection, then skip, dead-letter or block; a call still running after
        timeoutSeconds (real seconds) is hung. The worker's own shard state machine
        decides (`streamconsumer.worker.shard`); its checkpoints go to `checkpoints`
        too. It stops where the worker would wait for more records, at a block (the
        worker retries on for ever) or at a hung call (the worker restarts; this harness
        then refuses more). Initializes the processor first if `initialize` was not
        called. Needs the worker extra. After `deliver`, `process` is refused: the
        worker's machine holds the shard's place from then on."""
        if self._driver is None:
            self._driver = self._shard_driver()
        delivery = self._driver.deliver(list(records), time.time())
        self._initialized = self._driver.initialized
        self.checkpoints.extend(delivery.checkpoints)
        return delivery

    def _shard_driver(self) -> HarnessShard:
        try:
            from streamconsumer.worker.harness import HarnessShard, failure_policy
        except ModuleNotFoundError as missing:
            if (missing.name or "").partition(".")[0] == "streamconsumer":
                raise  # our own bug, not a missing extra
            raise NeedsWorkerExtra(
                f"ProcessorHarness.deliver runs the worker's failure policy, which needs "
                f"{missing.name}: {WORKER_EXTRA}"
            ) from missing
        return HarnessShard(
            self.processor,
            self.shard.shard_id,
            self.progress.stored,
            self.shard.parents,
            failure_policy(self.policy),
            self._initialized,
            self.consumer,
            self.letter_limit,
        )

    def process(self, records: Sequence[Record]) -> list[Record]:
        """The records to deliver again: none when the call reports no failure."""
        if self._driver is not None:
            raise RuntimeError(
                "deliver() holds this harness's place in the shard: use deliver() on, or "
                "a new harness for process()"
            )
        self.progress.begin(records)
        try:
            done = lifecycle.process_records(self.processor, records, self.checkpointer)
            if done < len(records):
                self.progress.partly_returned(records[done - 1] if done else None)
        except BaseException:
            self.progress.raised()
            raise
        if done == len(records):
            self.progress.returned()
        self._store()
        return list(records[done:])

    def end_shard(self) -> None:
        """shard_ended(), then SHARD_END stored, as the worker does at a shard's end."""
        self.progress.shard_ended()
        self._call(lambda: lifecycle.shard_ended(self.processor, self.checkpointer))
        if self.progress.requested != SHARD_END:
            self.checkpointer.checkpoint()
            self._store()

    def shutdown(self) -> None:
        self._call(lambda: lifecycle.shutdown_requested(self.processor, self.checkpointer))

    def lose_lease(self) -> None:
        """lease_lost(), as when the operator gave the shard to another worker: the
        processor may no longer checkpoint (what it asks is dropped, as by the worker)."""
        lifecycle.lease_lost(self.processor)

    def _call(self, call: Callable[[], None]) -> None:
        self.progress.begin()
        try:
            call()
        except BaseException:
            self.progress.raised()
            raise
        self.progress.returned()
        self._store()

    def _store(self) -> None:
        pending = self.progress.pending()
        if pending is not None:
            self.checkpoints.append(pending)
            self.progress.accepted(pending)
