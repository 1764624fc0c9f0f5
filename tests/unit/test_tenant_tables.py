"""Lease tables a tenant can write (issue 40): a kept ConfigMap, a lease group, a file to
import. Each is bounded before the operator builds anything from it, and taken as
nobody's; every reader raises only its documented refusal, within a memory and time
limit (docs/security.md#lease-tables)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamconsumer.cli_checkpoints import CheckpointsError, import_, importable
from streamconsumer.controller import executors
from streamconsumer.controller.consumer.consumers import _checked
from streamconsumer.controller.leases.lease_groups import joined
from streamconsumer.controller.leases.state import durable_from_status
from streamconsumer.controller.leases.status import StatusInvalid
from streamconsumer.core.lineage import MAX_TABLE_SHARDS, TableOutOfBounds, expand
from streamconsumer.models import kept
from testbed.specs import consumer_spec

from .within_limits import within

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
TRILLION = "shardId-000000000000..shardId-999999999999"  # the 600-byte ConfigMap's range
SPEC = consumer_spec()


def table_text(status: dict[str, Any], **fields: Any) -> str:
    """A kept table of consumer "evil" holding `status`; `fields` replace its others."""
    return json.dumps(
        {
            "namespace": "tenant",
            "consumer": "evil",
            "source": {"kinesis": {"streamName": "s"}},
            "created": "2026-11-01T00:00:00Z",
            "taken": "2026-11-26T00:00:00Z",
            "expires": "2026-12-03T00:00:00Z",
            "drained": True,
            "status": status,
        }
        | fields
    )


def resumed(text: str) -> tuple[kept.KeptTable | None, str]:
    """What the operator does with a kept ConfigMap of this text (the daemon's check)."""
    return _checked({kept.TABLE_KEY: text}, "evil", SPEC, NOW)


def test_a_range_of_a_trillion_shards_is_refused_before_anything_is_built() -> None:
    with pytest.raises(TableOutOfBounds, match="more than 100,000 shards"):
        within(lambda: expand([TRILLION]), seconds=5, memory_mib=256)
    assert len(expand(["s-000..s-099", "plain"])) == 101
    with pytest.raises(TableOutOfBounds):
        expand(["s-0..s-9"], most=9)


def test_a_status_or_lease_group_naming_too_many_shards_is_refused() -> None:
    with pytest.raises(TableOutOfBounds):
        within(lambda: durable_from_status({"finishedShards": [TRILLION]}), memory_mib=256)
    leases = {f"s-{n}": {"epoch": 1} for n in range(MAX_TABLE_SHARDS)}
    with pytest.raises(TableOutOfBounds):  # the leases and the finished set together
        durable_from_status({"leases": leases, "finishedShards": ["t-0"]})
    group = json.dumps({"leases": {}, "finishedShards": ["s-00000..s-60000"]})
    with pytest.raises(StatusInvalid, match="more than 100,000"):  # no group alone is
        within(lambda: joined({}, [group, group]), memory_mib=512)


def test_a_kept_table_from_a_file_is_taken_as_nobodys() -> None:
    """Found by attack: an import carried an owner, an Active state, a forged requester
    of the last reset and epoch 2**62 into the status as they stood."""
    forged: dict[str, Any] = {
        "leases": {
            "s0": {"owner": "evil-0", "epoch": 7, "checkpoint": "49", "state": "Active"},
            "s1": {"owner": "evil-1", "epoch": 2, "state": "HandOff", "handoffTo": "evil-0"},
        },
        "finishedShards": ["s9"],
        "lastReset": {"id": "r1", "to": {"timestamp": None}, "requestedBy": "cluster-admin"},
    }
    table, _ = resumed(table_text(forged))
    assert table is not None
    assert table.status["leases"]["s0"] == {"epoch": 7, "checkpoint": "49", "state": "Released"}
    assert table.status["leases"]["s1"] == {"epoch": 2, "state": "Released"}
    assert table.status["lastReset"] == {"id": "r1", "to": {"timestamp": None}}
    forged["leases"]["s0"]["checkpoint"] = "4" * 2000  # a status holds 1.5 MiB at most
    with pytest.raises(kept.KeptTableInvalid, match="a lease of over 1024 B"):
        resumed(table_text(forged))
    forged["leases"]["s0"]["epoch"] = 2**62
    with pytest.raises(kept.KeptTableInvalid, match="epoch"):
        resumed(table_text(forged))
    with pytest.raises(CheckpointsError, match="not an exported table"):
        import_(table_text(forged), "tenant", None, 7)  # refused before any API call


def test_a_kept_table_past_the_bounds_is_refused_never_started_afresh() -> None:
    with pytest.raises(kept.KeptTableInvalid, match="more than 100,000 shards"):
        within(lambda: resumed(table_text({"finishedShards": [TRILLION]})), memory_mib=256)
    nested = table_text({"x": None}).replace("null", "[" + ",".join(["[]"] * 2_000_000) + "]")
    with pytest.raises(kept.KeptTableInvalid, match="values"):  # refused before it is parsed
        within(lambda: resumed(nested), memory_mib=128)


# --- fuzzing: whatever a tenant writes, the documented refusal at most -----------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
NUMBERS = st.integers(min_value=0, max_value=10**15)
RANGES = st.builds(lambda a, b: f"shardId-{a:012d}..shardId-{b:012d}", NUMBERS, NUMBERS)
LEASE = st.fixed_dictionaries(
    {},
    optional={
        "owner": st.text(max_size=8),
        "epoch": st.integers(min_value=-5, max_value=2**70),
        "state": st.sampled_from(["Active", "Released", "HandOff", "Finished", "InLeaseGroups"]),
        "checkpoint": st.text(max_size=8) | JSON,
        "resetting": st.booleans(),
    },
)
STATUS = st.fixed_dictionaries(
    {},
    optional={
        "leases": st.dictionaries(st.text(min_size=1, max_size=12), LEASE | JSON, max_size=5)
        | JSON,
        "finishedShards": st.lists(RANGES | st.text(max_size=12) | JSON, max_size=4) | JSON,
        "lastReset": JSON,
    },
)


def outcome(call: Any) -> str:
    """ "ok", or the refusal's class; anything but a ValueError is a defect."""
    try:
        call()
    except ValueError as error:  # KeptTableInvalid, TableOutOfBounds, pydantic's
        return type(error).__name__
    return "ok"


@settings(max_examples=60, deadline=None)
@given(status=STATUS)
def test_any_kept_table_is_resumed_or_refused_within_limits(status: dict[str, Any]) -> None:
    text = table_text(status)
    within(lambda: outcome(lambda: resumed(text)), seconds=10, memory_mib=256)


@settings(max_examples=60, deadline=None)
@given(status=STATUS, name=st.none() | st.text(max_size=12))
def test_any_file_to_import_is_kept_or_refused_within_limits(
    status: dict[str, Any], name: str | None
) -> None:
    """`checkpoints import` keeps only what the operator would resume from as it stands."""
    text = table_text(status)

    def keep() -> str:
        try:
            kept_table, _ = importable(text, "tenant", name, 7, NOW)
        except CheckpointsError:
            return "refused"
        assert all("owner" not in lease for lease in kept_table.status["leases"].values())
        return "kept"

    within(keep, seconds=10, memory_mib=256)


@settings(max_examples=60, deadline=None)
@given(contents=st.lists(JSON.map(json.dumps) | STATUS.map(json.dumps), max_size=3))
def test_any_lease_group_is_joined_or_refused_within_limits(contents: list[str]) -> None:
    def join() -> str:
        try:
            joined({}, contents)
        except StatusInvalid:
            return "refused"
        return "ok"

    within(join, seconds=10, memory_mib=256)


def test_a_table_waiting_behind_a_slow_one_gets_its_own_whole_budget() -> None:
    """Found by review: one tenant's loads that time out keep the table threads busy,
    and another tenant's instant load, queued behind them, was refused LoadTimedOut."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    async def both() -> tuple[BaseException | str, BaseException | str]:
        def slowly() -> str:
            time.sleep(0.6)
            return "slow"

        slow = executors.run_within(pool, slowly, seconds=0.3)
        quick = executors.run_within(pool, lambda: "quick", seconds=0.3)
        results = await asyncio.gather(slow, quick, return_exceptions=True)
        return results[0], results[1]

    try:
        slow, quick = asyncio.run(both())
    finally:
        pool.shutdown(wait=True)
    assert isinstance(slow, TimeoutError)
    assert quick == "quick"
