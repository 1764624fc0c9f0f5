"""Adversarial: a lease log forged by whoever may write the status and create ConfigMaps
in the namespace costs the operator a bounded read in total, not 16 MiB per object times
129 segments and every group listed, and is refused with StatusInvalid or
TableOutOfBounds, never a RecursionError."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

import pytest

from streamconsumer.controller.leases import lease_log
from streamconsumer.controller.leases.lease_groups import GroupedStatusApi, Layout, partition
from streamconsumer.controller.leases.lease_log import MAX_CHAIN, Chain, Link, Table, digest
from streamconsumer.controller.leases.status import StatusInvalid, StatusWriter
from streamconsumer.core.lineage import MAX_TABLE_SHARDS, TableOutOfBounds
from streamconsumer.models.kept import UNPACKED_MAX_BYTES, pack
from unit.test_lease_groups import MemoryApi, MemoryGroups

REFUSED = (StatusInvalid, TableOutOfBounds)
EMPTY: dict[str, object] = {"set": {}, "unset": {}, "drop": [], "finished": [], "unfinished": []}


class Objects:
    def __init__(self) -> None:
        self.stored: dict[str, str] = {}
        self.parsed = 0

    def add(self, name: str, text: str) -> Link:
        content = pack(text)
        self.stored[name] = content
        return Link(name, digest(content))

    def read(self, head: Link) -> Chain:
        return lease_log.read(head, self.stored.get, self.contents)

    def contents(self, names: Collection[str]) -> Mapping[str, str]:
        return {n: self.stored[n] for n in names if n in self.stored}


def chain_of(objects: Objects, segments: list[str], groups: list[str] | None = None) -> Link:
    """A base of `groups` and a segment per text (each given its `prev`)."""
    links = [objects.add(f"g{n}", text) for n, text in enumerate(groups or [])]
    base = {"prev": None, "groups": [link.wire() for link in links]}
    link = objects.add("s0", json.dumps(base))
    for n, text in enumerate(segments, 1):
        link = objects.add(f"s{n}", text.replace('"PREV"', json.dumps(link.wire())))
    return link


def segment(**changes: object) -> str:
    return json.dumps({**EMPTY, **changes, "prev": "PREV"})


@pytest.mark.parametrize("where", ["segment", "group"])
def test_a_deeply_nested_object_is_refused_not_a_recursion_error(where: str) -> None:
    nested = "[" * 200_000 + "]" * 200_000
    objects = Objects()
    if where == "segment":
        head = chain_of(objects, [segment().replace('"set": {}', f'"set": {nested}')])
    else:
        head = chain_of(objects, [], groups=[f'{{"leases": {nested}, "finishedShards": []}}'])
    with pytest.raises(REFUSED):
        objects.read(head)


def test_a_nested_object_through_the_status_api_is_status_invalid() -> None:
    """What the operator sees: the same forged log through `GroupedStatusApi.get`."""
    api = MemoryApi()
    groups = MemoryGroups(api)
    layout = Layout(inline_max_shards=2, groups=2)
    writer = StatusWriter(GroupedStatusApi(api, groups, "c", layout), "ns", "c", holder="w")
    writer.adopt(api.get())
    leases = {
        f"shardId-{n:012d}": {"epoch": 1, "state": "Active", "checkpoint": "1"} for n in range(5)
    }
    writer.write({"leases": leases, "finishedShards": []})
    content = pack(
        json.dumps({**EMPTY, "prev": None}).replace('"set": {}', '"set": ' + "[" * 200_000)
    )
    groups.groups["c-forged"] = (content, next(iter(groups.groups.values()))[1])
    api.status["leases"] = {
        "c-forged": {"state": "InLeaseLog", "epoch": 1, "checkpoint": str(int(digest(content), 16))}
    }
    with pytest.raises(StatusInvalid):
        GroupedStatusApi(api, groups, "c", layout).get()


def test_a_chain_of_segments_inflating_to_16_mib_each_is_refused_in_total() -> None:
    """129 such segments are 2.7 MiB of ConfigMaps and 2 GiB read, as measured by review;
    a few are enough to show that nothing bounds their sum."""
    big = '"' + "A" * (UNPACKED_MAX_BYTES - 400) + '"'
    texts = [
        segment().replace('"set": {}', f'"set": {{"s{n}": {{"owner": {big}}}}}') for n in range(10)
    ]
    objects = Objects()
    with pytest.raises(REFUSED):
        objects.read(chain_of(objects, texts))


def test_a_segment_of_millions_of_tiny_values_is_refused() -> None:
    """5.5M empty lists: 16 MiB of JSON, 385 MiB of Python, 30 KiB of ConfigMap."""
    values = "[" + "[]," * 5_000_000 + "[]]"
    objects = Objects()
    head = chain_of(
        objects, [segment().replace('"set": {}', f'"set": {{"s": {{"owner": {values}}}}}')]
    )
    with pytest.raises(REFUSED):
        objects.read(head)


def test_expanding_the_whole_table_at_every_segment_is_refused() -> None:
    """129 segments of 150 bytes each, finishing and unfinishing 100,000 shards each:
    49 s of CPU from 19 KiB of ConfigMaps before."""
    every = [f"shardId-{0:012d}..shardId-{MAX_TABLE_SHARDS - 1:012d}"]
    objects = Objects()
    head = chain_of(objects, [segment(finished=every, unfinished=every)] * MAX_CHAIN)
    with pytest.raises(REFUSED):
        objects.read(head)


def test_a_base_of_more_groups_than_any_layout_writes_is_refused() -> None:
    objects = Objects()
    empty = '{"leases": {}, "finishedShards": []}'
    link = objects.add("g", empty)
    base = objects.add("s0", json.dumps({"prev": None, "groups": [link.wire()] * 5000}))
    with pytest.raises(REFUSED):
        objects.read(base)


def test_a_legitimate_busy_log_is_never_refused_by_the_bounds() -> None:
    """The writer folds before its own chain reaches the reader's bounds: a table whose
    every write finishes and unfinishes every shard, over a full chain."""
    shards = [f"shardId-{n:012d}" for n in range(2000)]
    objects = Objects()
    chain: Chain | None = None
    for n in range(MAX_CHAIN + 5):
        finished = frozenset(shards) if n % 2 else frozenset()
        leases: dict[str, dict[str, object]] = {
            "shardId-999999999999": {"epoch": n, "checkpoint": "7" * 56}
        }
        token = str(n)
        written = lease_log.write(
            Table(leases, finished),
            chain,
            lambda t: partition(t, 1),
            lambda kind: f"{kind}-{token}",  # noqa: B023 (called at once)
        )
        objects.stored.update(written.fresh)
        chain = written.chain
        assert objects.read(chain.head).table == chain.table


def test_a_deeply_nested_lease_group_of_the_previous_layout_is_status_invalid() -> None:
    from streamconsumer.controller.leases.lease_groups import joined

    with pytest.raises(REFUSED):
        joined({}, ['{"leases": ' + "[" * 200_000 + "]" * 200_000 + "}"])
