"""The lease log (controller/leases/lease_log.py): any sequence of tables written as
segments and folds reads back as the last one written, what a segment costs is what
changed, and a log anyone tampered with is refused, never read as another table."""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.controller.leases import lease_log
from streamconsumer.controller.leases.lease_groups import partition
from streamconsumer.controller.leases.lease_log import (
    MAX_CHAIN,
    Chain,
    Link,
    LogObjectGone,
    Table,
    digest,
    head_of,
)
from streamconsumer.controller.leases.status import StatusInvalid
from streamconsumer.models.kept import pack, unpack


class Objects:
    """The ConfigMaps a log is stored in, by name."""

    def __init__(self) -> None:
        self.stored: dict[str, str] = {}
        self.created = 0

    def write(self, table: Table, previous: Chain | None, groups: int = 4) -> Chain:
        self.created += 1
        token = self.created
        written = lease_log.write(
            table,
            previous,
            lambda t: partition(t, groups),
            lambda kind: f"c-leaselog-{kind}-{token}",
        )
        assert not written.fresh.keys() & self.stored.keys(), "a name used again"
        self.stored.update(written.fresh)
        return written.chain

    def read(self, head: Link) -> Chain:
        return lease_log.read(head, self.stored.get, self.contents)

    def contents(self, names: Collection[str]) -> Mapping[str, str]:
        return {name: self.stored[name] for name in names if name in self.stored}


def lease(owner: str, checkpoint: str, epoch: int = 1, **more: str) -> dict[str, object]:
    return {"owner": owner, "epoch": epoch, "checkpoint": checkpoint, "state": "Active", **more}


SHARD_IDS = [f"shardId-{n:012d}" for n in range(30)]
leases = st.dictionaries(
    st.sampled_from(SHARD_IDS),
    st.builds(
        lease,
        st.sampled_from(["w-a", "w-b", "w-c"]),
        st.integers(10**55, 10**56).map(str),
        st.integers(1, 4),
    ),
    max_size=20,
)
tables = st.builds(Table, leases, st.frozensets(st.sampled_from(SHARD_IDS), max_size=10))


@settings(max_examples=200, deadline=None)
@given(st.lists(tables, min_size=1, max_size=12))
def test_any_sequence_of_tables_reads_back_as_the_last_one_written(written: list[Table]) -> None:
    objects = Objects()
    chain: Chain | None = None
    for table in written:
        chain = objects.write(table, chain)
        assert chain.table == table
        back = objects.read(chain.head)
        assert back.table == table
        assert back.names() == chain.names()
        assert back.segments == chain.segments
        assert (back.base_bytes, back.log_bytes) == (chain.base_bytes, chain.log_bytes)


def test_a_segment_holds_what_changed_and_a_checkpoint_as_its_new_digits() -> None:
    rng = random.Random(41)
    before = {sid: lease("w-a", str(rng.randrange(10**55, 10**56))) for sid in SHARD_IDS}
    objects = Objects()
    base = objects.write(Table(before, frozenset()), None)
    moved = dict(before)
    moved["shardId-000000000003"] = {
        **before["shardId-000000000003"],
        "checkpoint": str(int(str(before["shardId-000000000003"]["checkpoint"])) + 12345),
    }
    chain = objects.write(Table(moved, frozenset()), base)
    assert len(chain.segments) == 2, "a segment, no fold"
    assert chain.groups == base.groups
    segment = json.loads(unpack(objects.stored[chain.head.name]))
    assert segment["prev"] == base.head.wire()
    (changed,) = segment["set"].values()
    shared, rest = changed["checkpoint"]
    assert shared >= 50, "the digits that differ, not the 56"
    assert len(rest) <= 6
    assert segment["drop"] == []
    assert segment["unset"] == {}


def test_an_unchanged_table_writes_nothing() -> None:
    objects = Objects()
    table = Table({"s-1": lease("w", "1")}, frozenset())
    chain = objects.write(table, None)
    made = len(objects.stored)
    assert objects.write(Table({"s-1": lease("w", "1")}, frozenset()), chain) == chain
    assert len(objects.stored) == made


def test_the_log_folds_at_half_the_base_and_keeps_unchanged_groups() -> None:
    rng = random.Random(7)
    table = {
        f"shardId-{n:012d}": lease("w-a", str(rng.randrange(10**55, 10**56))) for n in range(400)
    }
    objects = Objects()
    chain = objects.write(Table(table, frozenset()), None, groups=8)
    folds = 0
    for _ in range(60):
        sid = rng.choice(sorted(table))
        table = {**table, sid: {**table[sid], "checkpoint": str(rng.randrange(10**55, 10**56))}}
        before = chain
        chain = objects.write(Table(table, frozenset()), chain, groups=8)
        if len(chain.segments) == 1:
            folds += 1
            assert before.log_bytes + 200 >= lease_log.FOLD_RATIO * before.base_bytes
            kept = set(chain.groups) & set(before.groups)
            assert len(kept) >= 8 - (len(before.segments) - 1), "only changed groups anew"
        else:
            assert chain.log_bytes < lease_log.FOLD_RATIO * chain.base_bytes
    assert folds >= 1
    assert objects.read(chain.head).table == chain.table


def test_a_chain_folds_at_its_longest() -> None:
    objects = Objects()
    rng = random.Random(3)  # a base of random checkpoints: large once packed
    table = {f"s-{n}": lease("w", str(rng.randrange(10**55, 10**56))) for n in range(5000)}
    chain = objects.write(Table(table, frozenset()), None, groups=1)
    for n in range(MAX_CHAIN):
        table = {**table, "s-0": lease("w", str(10**40 + n))}
        chain = objects.write(Table(table, frozenset()), chain, groups=1)
    assert len(chain.segments) == MAX_CHAIN + 1, "no fold by bytes yet"
    table = {**table, "s-0": lease("w", "1")}
    chain = objects.write(Table(table, frozenset()), chain, groups=1)
    assert len(chain.segments) == 1, "folded once MAX_CHAIN segments followed the base"
    assert objects.read(chain.head).table == chain.table


# --- what a status names ----------------------------------------------------------------


def test_the_status_names_the_head_alone() -> None:
    objects = Objects()
    chain = objects.write(Table({"s-1": lease("w", "1")}, frozenset()), None)
    entry = chain.entry()
    assert head_of({"leases": entry}) == chain.head
    assert head_of({"leases": {"s-1": lease("w", "1")}}) is None
    with pytest.raises(StatusInvalid, match="beside other entries"):
        head_of({"leases": {**entry, "s-1": lease("w", "1")}})
    with pytest.raises(StatusInvalid, match="badly"):
        head_of({"leases": {chain.head.name: {"state": "InLeaseLog", "checkpoint": "x"}}})


# --- tampered with ----------------------------------------------------------------------


def written_twice() -> tuple[Objects, Chain]:
    objects = Objects()
    first = objects.write(Table({"s-1": lease("w", "1" * 20)}, frozenset()), None)
    return objects, objects.write(Table({"s-1": lease("w", "1" * 19 + "2")}, frozenset()), first)


def test_an_object_that_does_not_match_its_digest_is_refused() -> None:
    objects, chain = written_twice()
    base = chain.segments[0]
    objects.stored[base] = pack(json.dumps({"prev": None, "groups": []}))
    with pytest.raises(StatusInvalid, match="does not match its digest"):
        objects.read(chain.head)


def test_a_missing_object_is_said_by_name() -> None:
    objects, chain = written_twice()
    gone = chain.groups[0].name
    del objects.stored[gone]
    with pytest.raises(LogObjectGone) as raised:
        objects.read(chain.head)
    assert raised.value.args[0] == gone


def forged(objects: Objects, text: str) -> Link:
    """A segment of `text`, named by a head with its true digest (anyone who may write
    ConfigMaps and the status can make one)."""
    content = pack(text)
    objects.stored["forged"] = content
    return Link("forged", digest(content))


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"prev": null}',
        '{"prev": null, "groups": [["x"]]}',
        '{"prev": ["a", "b"], "set": {}}',
        '{"prev": null, "groups": 7}',
    ],
)
def test_a_malformed_log_is_refused(text: str) -> None:
    objects = Objects()
    with pytest.raises(StatusInvalid):
        objects.read(forged(objects, text))


def test_a_segment_that_does_not_fit_its_base_is_refused() -> None:
    objects, chain = written_twice()
    for changes in (
        {"set": {"s-1": {"checkpoint": [3, "9"]}}},  # fewer shared digits than written
        {"set": {"s-1": {"checkpoint": [99, "9"]}}},  # more than there are
        {"set": {"s-9": {"checkpoint": [10, "9"]}}},  # a rest of no checkpoint
        {"unset": {"s-9": ["owner"]}},
        {"drop": ["s-9"]},
        {"set": "x"},
    ):
        segment: dict[str, object] = {"set": {}, "unset": {}, "drop": [], "finished": []}
        segment["unfinished"] = []
        text = json.dumps({**segment, **changes, "prev": chain.head.wire()})
        with pytest.raises(StatusInvalid, match="cannot be read"):
            objects.read(forged(objects, text))


def test_a_chain_longer_than_allowed_or_a_cycle_is_refused() -> None:
    objects = Objects()
    # A cycle needs a digest that names itself: a chain of MAX_CHAIN + 2 links instead.
    link = objects.write(Table({}, frozenset()), None).head
    for n in range(MAX_CHAIN + 1):
        empty: dict[str, object] = {"set": {}, "unset": {}, "drop": [], "finished": []}
        empty["unfinished"] = []
        content = pack(json.dumps({**empty, "prev": link.wire()}))
        objects.stored[f"n{n}"] = content
        link = Link(f"n{n}", digest(content))
    with pytest.raises(StatusInvalid, match="longer than"):
        objects.read(link)


def test_a_segment_that_inflates_past_the_bound_is_refused() -> None:
    import base64
    import gzip

    bomb = base64.b64encode(gzip.compress(b" " * (17 * 2**20))).decode()
    objects = Objects()
    objects.stored["bomb"] = bomb
    with pytest.raises(StatusInvalid, match="past 16 MiB"):
        objects.read(Link("bomb", digest(bomb)))
