"""The simulation's ledger must be able to fail: what it excuses, it excuses narrowly."""

from __future__ import annotations

from sim.ledger import Ledger
from sim.stream import SimStream
from sim.world import World


def a_shard_of(records: int) -> tuple[Ledger, str, list[int]]:
    stream = SimStream(World(0), 1)
    stream.put(records, arrival=-1.0)
    ledger = Ledger(stream)
    ledger.key_of = lambda sequence: sequence  # every record its own key: any order
    (shard,) = stream.shards.values()
    return ledger, shard.id, list(shard.sequences)


def process(ledger: Ledger, shard: str, worker: str, epoch: int, records: list[int]) -> None:
    delivery = ledger.begin(worker, shard, epoch, [str(r) for r in records])
    ledger.done(shard, records)
    ledger.end(delivery)


def test_a_move_while_a_failed_record_holds_the_checkpoint_may_replay_those_done_ahead() -> None:
    ledger, shard, (first, second, third) = a_shard_of(3)
    process(ledger, shard, "a", 1, [second, third])  # `first` failed: these are ahead
    ledger.done_ahead.update({second, third})
    process(ledger, shard, "b", 2, [first, second, third])  # moved before `first` was done
    assert ledger.duplicates() == 2
    assert ledger.duplicates(planned=True) == 0


def test_once_the_failed_record_is_done_a_move_may_replay_nothing() -> None:
    ledger, shard, (first, second, third) = a_shard_of(3)
    process(ledger, shard, "a", 1, [second, third])
    ledger.done_ahead.update({second, third})
    process(ledger, shard, "a", 1, [first])  # the retry: the checkpoint may pass all three
    process(ledger, shard, "b", 2, [second, third])  # a move that lost that checkpoint
    assert ledger.duplicates(planned=True) == 2
