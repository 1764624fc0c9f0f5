"""Adversarial: a segment diff/apply round trip loses, invents or moves back nothing,
for any sequence of tables (fields added and dropped, checkpoints that are prefixes of
each other, SHARD_END, empty and unicode strings, bools beside ints)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.controller.leases.lease_log import Chain, Table

from .test_lease_log import Objects


def wire(table: Table) -> str:
    """Typed equality: True is not 1, 1.0 is not 1."""
    return json.dumps({"l": table.leases, "f": sorted(table.finished)}, sort_keys=True, default=str)


BASE = "4959033827149025660855969253836157109592157598913658889"
checkpoints = st.one_of(
    st.just("SHARD_END"),
    st.just(""),
    st.text(alphabet="0123456789", min_size=0, max_size=60).map(lambda s: BASE[: len(s) % 56] + s),
    st.builds(lambda n, tail: BASE[:n] + tail, st.integers(0, 56), st.text(max_size=6)),
    st.text(max_size=12),
)
values = st.one_of(
    st.integers(-3, 3),
    st.text(max_size=4),
    st.dictionaries(st.sampled_from(["type", "at"]), st.text(max_size=3), max_size=2),
)
SHARDS = [f"shardId-{n:012d}" for n in range(8)] + ["x", "shardId-1..shardId-3", "é1", ""]
leases = st.dictionaries(
    st.sampled_from(SHARDS),
    st.dictionaries(
        st.sampled_from(
            ["owner", "epoch", "checkpoint", "state", "handoffTo", "start", "resetting"]
        ),
        st.one_of(checkpoints, values),
        max_size=7,
    ),
    max_size=8,
)
tables = st.builds(
    Table,
    leases,
    st.frozensets(st.sampled_from([*SHARDS[:8], "x", "é1", "a01", "a1", "a001"]), max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(tables, min_size=1, max_size=10), st.integers(1, 4))
def test_any_sequence_of_tables_reads_back_exactly(written: list[Table], groups: int) -> None:
    objects = Objects()
    chain: Chain | None = None
    for table in written:
        chain = objects.write(table, chain, groups)
        back = objects.read(chain.head)
        assert wire(back.table) == wire(table)
        assert back.names() == chain.names()
        assert back.log_bytes == chain.log_bytes
        assert back.group_bytes == chain.group_bytes
        assert (back.log_text, back.log_changes) == (chain.log_text, chain.log_changes)
