"""An adversarial review of issue 40's bounds on tenant-written lease tables: inputs
within every documented bound that still cost the operator (not just the tenant's
consumer), escaped a reader as something other than its documented refusal, or passed
`checkpoints import` only for the operator to refuse what it wrote."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import pytest
from kubernetes import client as k8s

from streamconsumer import cli_checkpoints
from streamconsumer.cli_checkpoints import CheckpointsError, import_
from streamconsumer.controller.consumer.consumers import _checked
from streamconsumer.controller.consumer.driver import load
from streamconsumer.controller.consumer.loop import LoopSettings
from streamconsumer.controller.leases.status import StatusWriter
from streamconsumer.core.lineage import MAX_TABLE_SHARDS, compact, expand
from streamconsumer.models import kept
from testbed.specs import consumer_spec

from .test_tenant_tables import table_text
from .within_limits import within

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
SPEC = consumer_spec()
# 128 characters each (the longest id allowed) whose trailing-counter match backtracks
# over every digit from every start: quadratic in the id, ~0.2 ms each.
BACKTRACKING = [f"{n:06d}" + "1" * 121 + "x" for n in range(MAX_TABLE_SHARDS)]


class EvilStatusApi:
    """The status API of the consumer `evil`: SPEC, an empty status; a write is kept."""

    def get(self) -> dict[str, Any]:
        return {
            "metadata": {
                "resourceVersion": "1",
                "name": "evil",
                "creationTimestamp": "2026-11-02T00:00:00Z",
            },
            "spec": json.loads(SPEC.model_dump_json(by_alias=True, exclude_none=True)),
            "status": {},
        }

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        return body


def test_finished_ids_that_backtrack_are_expanded_and_compacted_in_linear_time() -> None:
    """Found by review: 100,000 such ids (a 390 KB packed ConfigMap) took 21 s to expand
    and 23 s to compact; compact runs at every status write, on the event loop."""
    assert len(within(lambda: expand(BACKTRACKING), seconds=5)) == MAX_TABLE_SHARDS
    assert len(within(lambda: compact(BACKTRACKING), seconds=5)) == MAX_TABLE_SHARDS


def test_a_kept_table_of_backtracking_ids_loads_and_renders_its_first_write_quickly() -> None:
    """The whole path: the daemon's check (a TABLES thread), `load` (a TABLES thread),
    and the first status write's render (driver.tick, on kopf's event loop: every
    consumer and the leader's renewals wait for it). Measured before the fix: 22.4 s,
    21.7 s and 21.4 s of CPU, from a ConfigMap of 390 KB."""
    text = table_text({"finishedShards": BACKTRACKING})
    packed = kept.stored_form(text)
    assert len(json.dumps(packed)) < 2**20, "fits in a ConfigMap"

    def run() -> dict[str, float]:
        started = time.process_time()
        data = kept.kept_data(packed.get("data"), packed.get("binaryData"))
        table, _ = _checked(data, "evil", SPEC, NOW)
        assert table is not None
        checked = time.process_time()
        api = EvilStatusApi()
        writer = StatusWriter(api, "tenant", "evil", holder="h")
        loop = load(api.get(), writer, LoopSettings(), time.monotonic(), lambda: 1, kept=table)
        loaded = time.process_time()
        assert loop.write_due(time.monotonic() + 100) is not None
        return {
            "checked": checked - started,
            "loaded": loaded - checked,
            "rendered": time.process_time() - loaded,
        }

    took = within(run, seconds=30, memory_mib=2048)
    assert took["rendered"] < 3.0, took  # on the event loop
    assert took["checked"] < 10.0, took
    assert took["loaded"] < 10.0, took


@pytest.mark.parametrize("ids", [{"s-\u0663", "s-\u0664"}, {"s-1\n", "s-2\n"}])
def test_ids_that_only_looked_numbered_round_trip(ids: set[str]) -> None:
    """The counter's `\\d+$` matched any script's digits, and before a final newline;
    the run was written back in ASCII digits without it: finished shards "s-٣", "s-٤"
    (or "s-1\\n", "s-2\\n") came back as "s-3", "s-4" and the real ones were forgotten."""
    assert expand(compact(ids)) == ids


@pytest.mark.parametrize("field", ["created", "taken", "expires"])
def test_a_kept_table_with_a_time_of_no_zone_is_refused_not_a_traceback(field: str) -> None:
    """Found by review: "expires": "2026-12-03T00:00:00" raised TypeError (can't compare
    offset-naive and offset-aware datetimes) out of the daemon's check: a kopf
    traceback every 2 s, not the documented CheckpointsInvalid stall."""
    text = table_text({}, **{field: "2026-11-20T00:00:00"})
    with pytest.raises(kept.KeptTableInvalid):
        _checked({kept.TABLE_KEY: text}, "evil", SPEC, NOW)


class Recorded:
    """The Kubernetes calls `import_` makes: none may write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[Any] = []
        monkeypatch.setattr(cli_checkpoints, "_consumer", lambda namespace, name: None)
        monkeypatch.setattr(cli_checkpoints, "_kept", lambda namespace, name: None)
        writes = self.writes

        class CoreV1Api:
            def patch_namespaced_config_map(self, *args: Any, **kwargs: Any) -> None:
                writes.append(args)

        monkeypatch.setattr(k8s, "CoreV1Api", CoreV1Api)


@pytest.mark.parametrize(
    "status",
    [
        # 1.2 million commas once written, none in the file: past MAX_TABLE_VALUES
        {"stream": "\\u002c" * 1_200_000},
        # 17 MiB once written (gzipped to kilobytes): past UNPACKED_MAX_BYTES
        {"stream": "a" * 17 * 2**20},
    ],
    ids=["escaped-commas", "inflates-past-16MiB"],
)
def test_an_import_the_operator_would_refuse_is_refused_before_writing(
    status: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: both files were imported ("0 shards' checkpoints kept"), and the
    operator then refused the ConfigMap the CLI wrote (CheckpointsInvalid, Stalled)."""
    calls = Recorded(monkeypatch)
    text = table_text(status).replace("\\\\u002c", "\\u002c")
    with pytest.raises(CheckpointsError):
        import_(text, "tenant", None, 7)
    assert calls.writes == []


def test_of_a_table_in_both_keys_the_one_taken_last_is_read_whatever_its_zone() -> None:
    """Found by review: "taken" was compared as ISO text. A table taken at 01:00+05:00
    (20:00 UTC the day before) read as later than one taken at 00:30 UTC: the older
    checkpoints were resumed from."""
    older = table_text({"leases": {"s0": {"checkpoint": "1"}}}, taken="2026-11-26T01:00:00+05:00")
    newer = table_text({"leases": {"s0": {"checkpoint": "2"}}}, taken="2026-11-26T00:30:00Z")
    packed = kept.stored_form(newer + " " * kept.PACK_ABOVE_BYTES)["binaryData"]
    data = kept.kept_data({kept.TABLE_KEY: older}, packed)
    assert kept.parsed(data[kept.TABLE_KEY]).status["leases"]["s0"]["checkpoint"] == "2"


def test_a_kept_table_whose_status_cannot_be_written_is_refused() -> None:
    """Found by review: a 19.5 KB packed ConfigMap whose lastReset names 990,000 shards
    is resumed, and every status write is then 4.95 MB (the apiserver takes 3 MiB, etcd
    1.5 MiB): the consumer never fences its status, nor stalls."""
    shards = [str(n % 10) for n in range(990_000)]
    text = table_text({"lastReset": {"id": "r", "to": {}, "shards": shards}})
    packed = kept.stored_form(text)
    assert len(json.dumps(packed)) < 20_000

    def first_write() -> int:
        data = kept.kept_data(packed.get("data"), packed.get("binaryData"))
        try:
            table, _ = _checked(data, "evil", SPEC, NOW)
        except kept.KeptTableInvalid:
            return 0
        api = EvilStatusApi()
        writer = StatusWriter(api, "tenant", "evil", holder="h")
        loop = load(api.get(), writer, LoopSettings(), time.monotonic(), lambda: 1, kept=table)
        due = loop.write_due(time.monotonic() + 100)
        assert due is not None
        return len(json.dumps(due.body))

    assert within(first_write, seconds=30, memory_mib=2048) < 1_500_000
