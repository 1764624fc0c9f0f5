"""processor.filter (issue 29, as Lambda's FilterCriteria): records it drops never reach
the processor and are checkpointed past — a read of only such records too — without
passing a batching processor's unflushed records; the worker counts them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from streamconsumer.models.record_filter import RecordFilter
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.sources.base import ReadResult
from streamconsumer.worker import metrics
from streamconsumer.worker.config import WorkerConfig
from streamconsumer.worker.filtering import keeper
from testbed.in_process import InProcessOperator

from .shard_drive import Drive
from .test_shard_machine import run_threaded


def record(sequence: int, data: object, key: str = "k") -> Record:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return Record(raw, key, str(sequence), checkpoint_sequence=str(sequence))


def spec(*patterns: dict[str, Any]) -> RecordFilter:
    return RecordFilter.model_validate({"patterns": list(patterns)})


def kept(filter_spec: RecordFilter, *records: Record) -> list[str]:
    keep = keeper(filter_spec)
    assert keep is not None
    return [r.sequence_number for r in records if keep(r)]


ORDERS = (
    record(1, {"type": "order", "total": 500, "paid": True, "customer": {"tier": "gold"}}),
    record(2, {"type": "refund", "total": 20, "paid": False, "note": None}),
    record(3, {"type": "order-draft", "customer": {"tier": "silver"}}),
    record(4, b"not json at all \xff"),
    record(5, [1, 2, 3]),
    record(6, {"type": {"nested": "object"}}),
)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"path": "type", "equals": "order"}, ["1"]),
        ({"path": "type", "equalsAny": ["order", "refund"]}, ["1", "2"]),
        ({"path": "type", "prefix": "order"}, ["1", "3"]),
        ({"path": "customer.tier", "equals": "gold"}, ["1"]),
        ({"path": "customer.tier", "exists": True}, ["1", "3"]),
        ({"path": "customer", "exists": False}, ["2", "6"]),
        ({"path": "total", "equals": "500"}, ["1"]),
        ({"path": "paid", "equals": "false"}, ["2"]),
        ({"path": "note", "equals": "null"}, ["2"]),
        ({"path": "note", "exists": True}, ["2"]),
        ({"path": "type.nested", "equals": "object"}, ["6"]),
        ({"path": "type", "equals": '{"nested": "object"}'}, []),  # objects: only `exists`
    ],
)
def test_data_conditions(condition: dict[str, Any], expected: list[str]) -> None:
    """Data that is not a JSON object (4, 5) meets no data condition, not even exists:
    false."""
    assert kept(spec({"data": [condition]}), *ORDERS) == expected


def test_patterns_are_any_of_and_conditions_all_of() -> None:
    both = spec(
        {"data": [{"path": "type", "equals": "order"}, {"path": "paid", "equals": "true"}]},
        {"partitionKey": {"prefix": "eu-"}},
    )
    records = (
        record(1, {"type": "order", "paid": True}, key="us-1"),
        record(2, {"type": "order", "paid": False}, key="us-1"),
        record(3, b"raw", key="eu-7"),
    )
    assert kept(both, *records) == ["1", "3"]
    key_and_data = spec(
        {"partitionKey": {"equals": "eu-7"}, "data": [{"path": "type", "exists": True}]}
    )
    assert kept(key_and_data, *records) == []


@pytest.mark.parametrize(
    "pattern",
    [
        {"data": [{"path": "a", "equals": "x", "prefix": "y"}]},
        {"data": [{"path": "a"}]},
        {"partitionKey": {}},
        {"data": [{"path": "a..b", "exists": True}]},
        {"data": [{"path": "a", "equalsAny": []}]},
    ],
)
def test_a_condition_that_names_no_single_test_is_refused(pattern: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        spec(pattern)


def test_data_too_deeply_nested_to_parse_is_delivered_not_raised() -> None:
    """Any producer may write a record of nested brackets (1 MiB of them fits in one):
    json.loads raises RecursionError, not ValueError. Raised in sift, it ended the shard's
    reader thread, and the shard read nothing more, silently, for as long as it was held.
    The filter cannot tell whether such a record matches: it is delivered (at least once),
    never dropped unread."""
    deep = record(2, b'{"type": ' * 100_000 + b'"order"' + b"}" * 100_000)
    brackets = record(3, b"[" * 100_000)
    orders = spec({"data": [{"path": "type", "equals": "order"}]})
    assert kept(orders, ORDERS[0], deep, brackets) == ["1", "2", "3"]
    assert kept(spec({"partitionKey": {"equals": "k"}}), deep) == ["2"], "the key alone decides"
    other_key = {"partitionKey": {"equals": "other"}, "data": [{"path": "type", "exists": True}]}
    assert kept(spec(other_key), deep) == [], "a key that does not match still drops it"


def test_no_filter_keeps_everything() -> None:
    assert keeper(None) is None


class Batching(BaseRecordProcessor):
    """Checkpoints every `every` calls (a batching sink flushing)."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.calls: list[list[str]] = []

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        self.calls.append([r.sequence_number for r in records])
        if len(self.calls) % self.every == 0:
            checkpointer.checkpoint()


ODD = spec({"data": [{"path": "n", "equalsAny": ["1", "3", "5", "7", "9"]}]})


def numbered(*sequences: int) -> ReadResult:
    return ReadResult([record(s, {"n": s}) for s in sequences], millis_behind_latest=0)


def filtered_drive(
    processor: BaseRecordProcessor, *reads: ReadResult, wants_empty: bool = False
) -> tuple[Drive, int]:
    drive = Drive(processor, keep=keeper(ODD), wants_empty_batches=wants_empty)
    dropped = sum(drive.machine.read(r) for r in reads)
    drive.run(until=60)
    return drive, dropped


def test_dropped_records_never_reach_the_processor_and_are_checkpointed_past() -> None:
    processor = Batching()
    drive, dropped = filtered_drive(
        processor, numbered(1, 2, 3, 4), numbered(5, 6), numbered(8, 10)
    )
    assert dropped == 5
    assert processor.calls == [["1", "3"], ["5"]], "one call per read, only kept records"
    assert drive.stored() == ["3", "4", "5", "6", "10"], "a read of only dropped ones too"


def test_dropped_records_do_not_pass_a_batching_processors_unflushed_records() -> None:
    processor = Batching(every=2)
    drive, _ = filtered_drive(processor, numbered(1, 2), numbered(4), numbered(3))
    assert processor.calls == [["1"], ["3"]]
    assert drive.stored() == ["3"], "not 2 or 4 before 1 is flushed at the second call"


def test_dropped_sub_records_do_not_pass_an_unflushed_part_of_their_aggregate() -> None:
    """A KPL aggregate whose middle part is kept and the rest dropped: the kept part's
    checkpoint position is the aggregate before (or none at all), which the processor has
    checkpointed, yet the kept part is not flushed. Passing the dropped parts over must
    not store the aggregate's number: a restart would resume after the unflushed part."""

    def aggregate(sequence: int, before: int | None) -> list[Record]:
        last = {0: str(before) if before else None, 1: str(before) if before else None}
        return [
            Record(
                json.dumps({"n": sequence + sub}).encode(),
                "k",
                str(sequence),
                sub_sequence_number=sub,
                checkpoint_sequence=last.get(sub, str(sequence)),
            )
            for sub in range(3)
        ]

    class FlushesOnce(Batching):
        """Flushes and checkpoints in its first call only."""

        def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
            self.calls.append([r.sequence_number for r in records])
            if len(self.calls) == 1 and records[0].sub_sequence_number is None:
                checkpointer.checkpoint()

    for before in (None, 1):  # the shard's first aggregate, or one after a record done
        reads = [numbered(1)] if before else []
        reads.append(ReadResult(aggregate(2, before), millis_behind_latest=0))  # n=3 kept
        processor = FlushesOnce()
        drive, _ = filtered_drive(processor, *reads)
        assert processor.calls == ([["1"], ["2"]] if before else [["2"]])
        assert drive.stored() == (["1"] if before else []), "nothing past the unflushed part"


def test_a_processor_that_wants_empty_batches_gets_one_for_a_read_of_dropped_records() -> None:
    """A batching processor flushes on its clock, told by empty calls: a stream of only
    dropped records must not stop them (its buffer would hold the checkpoint back)."""
    processor = Batching(every=2)
    drive, _ = filtered_drive(processor, numbered(1), numbered(2, 4), wants_empty=True)
    assert processor.calls == [["1"], []]
    assert drive.stored() == ["1", "4"]


def test_the_worker_counts_dropped_records() -> None:
    before = metrics.FILTERED.labels("s")._value.get()
    metrics.filtered("s", 3)
    metrics.filtered("s", 0)
    assert metrics.FILTERED.labels("s")._value.get() == before + 3


BASE = {
    "operator_url": "http://operator",
    "namespace": "ns",
    "consumer": "c",
    "worker_name": "w",
    "token_path": "/t",
    "entrypoint": "m:f",
}


def test_the_filter_reaches_the_worker_and_stays_out_of_the_pod_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, the pod template is the previous release's (no rollout on upgrade)."""
    assert "STREAMCONSUMER_FILTER" not in WorkerConfig.model_validate(BASE).to_env()
    env = WorkerConfig.model_validate(BASE | {"filter": ODD}).to_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert WorkerConfig.from_env().filter == ODD


class Never(BaseRecordProcessor):
    calls = 0

    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        Never.calls += 1


def test_the_threaded_runtime_checkpoints_a_stream_of_only_dropped_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every record dropped (b"d" is no JSON object): no call, yet the parent ends and
    the child's checkpoint reaches its last record; the worker counts them (a shard's
    series go when it leaves, so the counts are watched as they are made)."""
    Never.calls = 0
    counted: list[tuple[str, int]] = []
    monkeypatch.setattr(metrics, "filtered", lambda shard, count: counted.append((shard, count)))
    drop_all = spec({"data": [{"path": "x", "exists": True}]})

    def finished(operator: InProcessOperator) -> bool:
        child = operator.coordinator.leases.get("child")
        return child is not None and child.checkpoint == "5"

    operator = run_threaded(Never, finished, filter=drop_all)
    assert finished(operator)
    assert Never.calls == 0
    assert sum(count for _, count in counted) == 5
    assert {shard for shard, count in counted if count} == {"parent", "child"}


def test_a_filter_that_fails_on_a_record_delivers_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any error of the filter (not only a record nested too deep) would end the shard's
    reader thread, which calls it outside every guard: the record is delivered instead."""
    from streamconsumer.worker import filtering

    def broken(*_: object) -> bool:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(filtering, "_matches", broken)
    spec = RecordFilter.model_validate({"patterns": [{"data": [{"path": "a", "exists": True}]}]})
    keep = filtering.keeper(spec)
    assert keep is not None
    assert keep(Record(b'{"a": 1}', "k", "1")) is True
