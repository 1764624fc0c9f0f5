"""Dead letters delivered again, once the bug that failed them is fixed: to the processor
(each shard's letters in their shard's order, the records as first delivered: data, key,
shard and sequence), or to a stream the user names (their data under their partition
key). A letter is removed from its inbox (`done`: `inbox.Inbox.remove`) once it is
redriven, shard by shard (or request by request), so a second run redrives nothing twice
and a run stopped midway goes on where it stopped.

To the processor, each shard is one processor as in the worker (`ProcessorHarness`:
initialize, process_records in calls of `batch` letters until one raises or reports a
failed record, then shutdown_requested, so a batching processor commits what it buffered).
A shard's letters count as redriven as far as the processor checkpointed them, as the
worker counts them; the rest stay for the next run."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Any

from streamconsumer.deadletter.base import chunks
from streamconsumer.deadletter.inbox import Held
from streamconsumer.processor import ProcessorFactory, Record
from streamconsumer.testing import ProcessorHarness

PUT_RECORDS_LIMIT = 500
PUT_RECORDS_BYTES = 5 * 1024 * 1024


@dataclass
class Outcome:
    redriven: list[Held] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # shard: why its rest stayed


def by_shard(letters: Iterable[Held]) -> list[tuple[str, list[Held]]]:
    """Each shard's letters in the shard's order, shards in their names' order."""
    ordered = sorted(letters, key=lambda held: (held.shard_id, held.position))
    return [(shard, list(group)) for shard, group in groupby(ordered, lambda h: h.shard_id)]


class Copies:
    """Letters of one record written more than once (an SQS message sent again, a batch
    dead-lettered again after a crash): delivered once, removed together."""

    def __init__(self, held: list[Held]) -> None:
        self._of: dict[tuple[str, tuple[int, int]], list[Held]] = {}
        self.unique: list[Held] = []
        for letter in held:
            key = (letter.shard_id, letter.position)
            if key not in self._of:
                self._of[key] = []
                self.unique.append(letter)
            self._of[key].append(letter)

    def all(self, letters: list[Held]) -> list[Held]:
        """`letters` (unique ones) with every copy of each."""
        return [copy for letter in letters for copy in self._of[(letter.shard_id, letter.position)]]


def to_processor(
    letters: list[Held],
    factory: ProcessorFactory,
    consumer: str,
    batch: int,
    advanced: Callable[[int], None],
    done: Callable[[list[Held]], None],
) -> Outcome:
    outcome = Outcome()
    copies = Copies(letters)
    for shard, held in by_shard(copies.unique):
        harness = ProcessorHarness(factory(), shard_id=shard, consumer=consumer)
        records = records_of(held)
        try:
            harness.initialize()
            for start in range(0, len(held), batch):
                again = harness.process(records[start : start + batch])
                advanced(len(copies.all(held[start : start + batch])))
                if again:
                    outcome.failed[shard] = f"record {again[0].sequence_number} failed again"
                    break
        except Exception as error:  # the user's code: its failure is the shard's, said
            outcome.failed[shard] = f"{type(error).__name__}: {error}"
        try:
            harness.shutdown()  # as at a hand-off: a batching processor commits its buffer
        except Exception as error:
            outcome.failed.setdefault(shard, f"shutdown_requested: {type(error).__name__}: {error}")
        finished = copies.all(checkpointed(held, harness.checkpoints))
        done(finished)  # removed now: a run stopped later does not redrive them again
        outcome.redriven += finished
    return outcome


def records_of(held: list[Held]) -> list[Record]:
    """The shard's letters as records, each checkpointable at its sequence number once it
    is the last letter of its (KPL) aggregate, else at the aggregate before it: a
    checkpoint then covers whole aggregates only, as `checkpointed` counts them."""
    records = []
    whole: str | None = None  # the last sequence number whose letters all came before
    for index, letter in enumerate(held):
        sequence = str(letter.document["sequenceNumber"])
        ends = index + 1 == len(held) or held[index + 1].document["sequenceNumber"] != sequence
        records.append(replace(letter.record(), checkpoint_sequence=sequence if ends else whole))
        whole = sequence if ends else whole
    return records


def checkpointed(held: list[Held], checkpoints: list[str]) -> list[Held]:
    """The shard's letters the processor's checkpoints cover, as the worker counts what a
    processor has done: what returned and was checkpointed, nothing after."""
    if not checkpoints:
        return []
    last = int(checkpoints[-1])
    return [letter for letter in held if letter.position[0] <= last]


def to_stream(
    letters: list[Held],
    client: Any,
    stream: dict[str, str],
    advanced: Callable[[int], None],
    done: Callable[[list[Held]], None],
) -> Outcome:
    """Each letter's record put to the stream, under its partition key, shard by shard in
    order; a request with refused records stops the run after it (Kinesis puts the rest
    of a request regardless: those count as redriven, the refused stay)."""
    outcome = Outcome()
    copies = Copies(letters)
    # Each letter's record decoded once: (letter, the PutRecords entry).
    ordered = [
        (letter, {"Data": record.data, "PartitionKey": record.partition_key})
        for _, held in by_shard(copies.unique)
        for letter in held
        for record in (letter.record(),)
    ]

    def size(pair: tuple[Held, dict[str, Any]]) -> int:
        entry = pair[1]
        return len(entry["Data"]) + len(entry["PartitionKey"].encode())

    for pairs in chunks(ordered, size, PUT_RECORDS_LIMIT, PUT_RECORDS_BYTES):
        request = [letter for letter, _ in pairs]
        answer = client.put_records(Records=[entry for _, entry in pairs], **stream)
        results = answer["Records"]
        put = [letter for letter, r in zip(request, results, strict=True) if "ErrorCode" not in r]
        done(put)
        outcome.redriven += put
        advanced(len(put))
        refused = [
            (letter, r) for letter, r in zip(request, results, strict=True) if "ErrorCode" in r
        ]
        if refused:  # (a refused record's key may now be out of order: it is said)
            letter, result = refused[0]
            outcome.failed[letter.shard_id] = (
                f"{len(refused)} puts refused ({result['ErrorCode']}), from record "
                f"{letter.document['sequenceNumber']} on: they stay for the next run"
            )
            break
    return outcome
