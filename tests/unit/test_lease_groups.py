"""Lease groups (controller/leases/lease_groups.py): the table past its threshold kept in
copy-on-write ConfigMaps, committed by the status write. The interleaving tests run the
production StatusWriter over GroupedStatusApi on threads whose every call to the
apiserver waits for a scheduler that hypothesis drives: any order of two terms' writes,
an abandoned attempt landing late, and their deletes and sweeps."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sim import reverts

from streamconsumer.controller.leases import lease_groups
from streamconsumer.controller.leases.lease_groups import (
    SWEEP_EVERY,
    GroupedStatusApi,
    GroupGone,
    Layout,
    StoredGroup,
    Writer,
    durable_view,
    joined,
    kept_outside,
    names_of,
    read_stored,
    refs_of,
    split,
)
from streamconsumer.controller.leases.state import durable_from_status
from streamconsumer.controller.leases.status import (
    Conflict,
    Deposed,
    StaleState,
    StatusInvalid,
    StatusUnavailable,
    StatusWriter,
    Superseded,
)
from testbed.releases import previous_loads

LAYOUT = Layout(inline_max_shards=4, groups=3, log=False)  # split()'s: lease groups
LOG = Layout(inline_max_shards=4, groups=3, log_group_shards=2)
BOTH = pytest.mark.parametrize("layout", [LOG, LAYOUT], ids=["log", "groups"])


def table(checkpoints: dict[str, int], owner: str = "w-1", finished: int = 0) -> dict[str, Any]:
    """A status as `render` writes one: views (lag, parents) beside the durable fields."""
    return {
        "leases": {
            shard: {
                "owner": owner,
                "epoch": 1,
                "checkpoint": str(at),
                "state": "Active",
                "parents": [],
                "millisBehindLatest": 5,
            }
            for shard, at in checkpoints.items()
        },
        "finishedShards": [f"shardId-{n:012d}" for n in range(finished)],
        "workers": {owner: {"shards": len(checkpoints)}},
    }


def shards(n: int, at: int = 100) -> dict[str, int]:
    return {f"shardId-{1000 + i:012d}": at for i in range(n)}


def named(token: str) -> Callable[[int], str]:
    """Names of new groups as the operator's (`<consumer>-leases-<index>-<token>`)."""
    return lambda index: f"c-leases-{index}-{token}"


# --- the layout ------------------------------------------------------------------------


@given(
    st.dictionaries(st.integers(1000, 1200), st.integers(1, 10**20), max_size=20),
    st.integers(0, 30),
)
def test_a_table_split_into_groups_reads_back_as_it_was_written(
    checkpoints: dict[int, int], finished: int
) -> None:
    status = table({f"shardId-{k:012d}": v for k, v in checkpoints.items()}, finished=finished)
    stored = split(status, None, LAYOUT, named("g"))
    if stored.refs is None:
        assert stored.status == status
        return
    assert refs_of(stored.status) == stored.refs  # named in status.leases, in order
    assert sum(ref.leases for ref in stored.refs) == len(checkpoints)
    assert {e["state"] for e in stored.status["leases"].values()} == {"InLeaseGroups"}
    contents = [stored.fresh[ref.name] for ref in stored.refs]
    back = joined(stored.status, contents)
    assert back == {**durable_view(status), "finishedShards": back["finishedShards"]}
    assert durable_from_status(back) == durable_from_status(durable_view(status))


def test_a_checkpoint_rewrites_one_group_and_the_rest_are_kept() -> None:
    first = split(table(shards(12)), None, LAYOUT, named("a"))
    assert first.refs is not None
    assert len(first.fresh) == 3
    moved = shards(12)
    moved[next(iter(moved))] = 101
    second = split(table(moved), first.refs, LAYOUT, named("b"))
    assert second.refs is not None
    assert len(second.fresh) == 1
    assert sum(ref.name.endswith("-a") for ref in second.refs) == 2


def test_lag_alone_writes_no_group() -> None:
    first = split(table(shards(12)), None, LAYOUT, named("a"))
    lagging = table(shards(12))
    for lease in lagging["leases"].values():
        lease["millisBehindLatest"] = 99_000
    assert split(lagging, first.refs, LAYOUT, named("b")).fresh == {}


def test_a_table_goes_into_groups_past_the_threshold_and_back_below_half() -> None:
    assert split(table(shards(4)), None, LAYOUT, named("a")).refs is None
    grouped = split(table(shards(5)), None, LAYOUT, named("a")).refs
    assert grouped is not None
    assert split(table(shards(3)), grouped, LAYOUT, named("b")).refs is not None  # no flapping
    assert split(table(shards(2)), grouped, LAYOUT, named("b")).refs is None


def test_a_grouped_status_read_without_its_groups_is_refused() -> None:
    stored = split(table(shards(12)), None, LAYOUT, named("a"))
    with pytest.raises(ValueError, match="lease groups"):
        durable_from_status(stored.status)


def test_the_previous_release_refuses_a_grouped_table_rather_than_start_over(
    tmp_path: Path,
) -> None:
    """Its `load` reads the table with `durable_from_status`: on the entries naming the
    groups it must fail (it then writes nothing), not read them as leases of shards it
    does not know, the table as empty, and start every shard over."""
    stored = split(table(shards(12)), None, LAYOUT, named("a")).status
    ran = previous_loads(stored, tmp_path / "previous")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "InLeaseGroups" in ran.stderr
    assert "Input should be 'Active', 'HandOff', 'Released' or 'Finished'" in ran.stderr


def test_the_previous_release_refuses_a_lease_log_rather_than_start_over(
    tmp_path: Path,
) -> None:
    api = MemoryApi()
    groups = MemoryGroups(api)
    writer = StatusWriter(GroupedStatusApi(api, groups, "c", LOG), "ns", "c", holder="w")
    writer.adopt(api.get())
    writer.write(table(shards(12)))
    assert kept_outside(api.status)
    ran = previous_loads(api.status, tmp_path / "previous")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "InLeaseLog" in ran.stderr
    with pytest.raises(ValueError, match="read without its groups"):
        durable_from_status(api.status)  # nor does this release's, without the log


# --- the stores, in memory -------------------------------------------------------------


class Scheduler:
    """Lets one actor thread run between two calls to the apiserver at a time; which one
    goes next is `choose`'s pick among those waiting."""

    def __init__(self, choose: Callable[[list[str]], str]) -> None:
        self._choose = choose
        self.check: Callable[[], object] = lambda: None  # between any two calls
        self._cond = threading.Condition()
        self._waiting: set[str] = set()
        self._running: str | None = None
        self._alive: set[str] = set()
        self.errors: list[BaseException] = []

    def point(self) -> None:
        me = threading.current_thread().name
        with self._cond:
            self._waiting.add(me)
            self._running = None
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._running == me)

    def spawn(self, name: str, body: Callable[[], None]) -> None:
        def run() -> None:
            self.point()
            try:
                body()
            except BaseException as error:  # shown by the test
                self.errors.append(error)
            finally:
                with self._cond:
                    self._alive.discard(name)
                    self._running = None
                    self._cond.notify_all()

        with self._cond:
            self._alive.add(name)
        threading.Thread(target=run, name=name, daemon=True).start()

    def run(self) -> None:
        while True:
            with self._cond:
                settled = self._cond.wait_for(
                    lambda: self._running is None and self._waiting >= self._alive, timeout=10
                )
                assert settled, "an actor hung"
                if not self._alive:
                    return
                self.check()
                pick = self._choose(sorted(self._alive))
                self._waiting.discard(pick)
                self._running = pick
                self._cond.notify_all()


class MemoryApi:
    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self.status: dict[str, Any] = {}
        self.version = 1
        self.scheduler = scheduler

    def _point(self) -> None:
        if self.scheduler is not None:
            self.scheduler.point()

    def get(self) -> dict[str, Any]:
        self._point()
        return copy.deepcopy(
            {"metadata": {"resourceVersion": str(self.version)}, "spec": {}, "status": self.status}
        )

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self._point()
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise Conflict("the object has been modified")
        self.status = copy.deepcopy(body["status"])
        self.version += 1
        return copy.deepcopy({**body, "metadata": {"resourceVersion": str(self.version)}})


class MemoryGroups:
    def __init__(self, api: MemoryApi, scheduler: Scheduler | None = None) -> None:
        self.groups: dict[str, tuple[str, Writer]] = {}
        self.created = 0
        self._api = api
        self.scheduler = scheduler

    def _point(self) -> None:
        if self.scheduler is not None:
            self.scheduler.point()

    def create(self, name: str, content: str, written_by: Writer) -> None:
        self._point()
        assert name not in self.groups, f"{name} created twice"
        self.groups[name] = (content, written_by)
        self.created += 1

    def read(self, name: str) -> str | None:
        self._point()
        found = self.groups.get(name)
        return found[0] if found else None

    def contents(self, names: Collection[str]) -> dict[str, str]:
        self._point()
        return {name: content for name, (content, _) in self.groups.items() if name in names}

    def delete(self, name: str) -> None:
        self._point()
        self.groups.pop(name, None)

    def listed(self) -> list[StoredGroup]:
        self._point()
        # In the order created, not by name: names carry this process' write numbers,
        # which other tests move; the interleavings explored must not depend on them.
        return [StoredGroup(name, by) for name, (_, by) in self.groups.items()]

    def logical(self) -> dict[str, Any]:
        """The table as the stored status references it; fails if a group is gone."""
        try:
            logical, _ = read_stored(self._api.status, self.unscheduled())
        except GroupGone as gone:
            raise AssertionError(f"the status references deleted groups {gone}") from None
        return self._api.status if logical is None else logical

    def referenced(self) -> set[str]:
        return names_of(read_stored(self._api.status, self.unscheduled())[1])

    def unscheduled(self) -> MemoryGroups:
        """The same groups, read with no scheduling point (as `Scheduler.check` must)."""
        view = MemoryGroups(self._api)
        view.groups = self.groups
        return view


@BOTH
def test_a_write_lands_reads_back_and_deletes_what_it_replaced(layout: Layout) -> None:
    api = MemoryApi()
    groups = MemoryGroups(api)
    grouped = GroupedStatusApi(api, groups, "c", layout)
    writer = StatusWriter(grouped, "ns", "c", holder="one")
    writer.adopt(grouped.get())
    for at in range(100, 110):
        writer.write(table(shards(12, at)))
        assert grouped.get()["status"]["leases"] == durable_view(table(shards(12, at)))["leases"]
        assert set(groups.groups) == groups.referenced()
    writer.write(table(shards(1)))  # back inline: every group goes
    assert groups.groups == {}
    assert not kept_outside(api.status)


@BOTH
def test_groups_of_failed_writes_are_swept_after_a_term_starts(layout: Layout) -> None:
    api = MemoryApi()
    groups = MemoryGroups(api)
    old = StatusWriter(GroupedStatusApi(api, groups, "c", layout), "ns", "c", holder="old")
    old.adopt(api.get())
    old.write(table(shards(12, 1)))
    orphan = Writer(0, 99, "old")
    groups.create("c-leases-0-orphan", "{}", orphan)  # its status write never landed
    new_api = GroupedStatusApi(api, groups, "c", layout)
    new = StatusWriter(new_api, "ns", "c", holder="new")
    new.adopt(new_api.get())
    new.write(table(shards(12, 2)))
    assert "c-leases-0-orphan" not in groups.groups
    assert set(groups.groups) == groups.referenced()


# --- any interleaving --------------------------------------------------------------------


INTERLEAVINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@BOTH
@INTERLEAVINGS
@given(data=st.data())
def test_no_interleaving_of_two_terms_and_a_late_attempt_loses_a_group(
    layout: Layout, data: Any
) -> None:
    two_terms_and_a_late_attempt(data, layout)


def two_terms_and_a_late_attempt(data: Any, layout: Layout) -> None:
    """Two operator processes (or two runs of the daemon in one), the old one with an
    abandoned write still running beside its newer ones, the new one taking over: at
    every step every group the stored status references exists, and the table read at
    the end is one that was written."""
    scheduler = Scheduler(lambda alive: data.draw(st.sampled_from(alive)))
    api = MemoryApi()
    groups = MemoryGroups(api)
    seed = StatusWriter(GroupedStatusApi(api, groups, "c", layout), "ns", "c", holder="seed")
    seed.adopt(api.get())
    first = table(shards(9, 1))
    seed.write(first)
    scheduler.check = groups.logical  # from here on, between any two calls
    api.scheduler = groups.scheduler = scheduler
    sweep_every = data.draw(st.sampled_from((1, 2, SWEEP_EVERY)))
    sizes = data.draw(st.lists(st.sampled_from((2, 9, 12)), min_size=5, max_size=5))
    sent = [first]

    def process(name: str, holder: str, writes: list[int], abandon: bool) -> Callable[[], None]:
        grouped = GroupedStatusApi(api, groups, "c", layout, sweep_every=sweep_every)
        writer = StatusWriter(grouped, "ns", "c", holder=holder)

        def run() -> None:
            writer.adopt(grouped.get())
            for n, size in enumerate(writes):
                status = table(shards(size, 10 * len(sent) + n), owner=holder)
                sent.append(status)
                attempt = writer.prepare(status)
                if abandon and n == 0:  # its job timed out: the call runs on, unwaited
                    late = functools.partial(_quietly, writer, attempt)
                    scheduler.spawn(f"{name}-late", late)
                else:
                    _quietly(writer, attempt)

        return run

    scheduler.spawn("old", process("old", "old", sizes[:3], abandon=True))
    # The same holder: kopf starting the daemon again in the same process (were its
    # writer's holder the process' alone).
    second = "old" if data.draw(st.booleans()) else "new"
    scheduler.spawn("new", process("new", second, sizes[3:], abandon=data.draw(st.booleans())))
    scheduler.run()
    assert not scheduler.errors, scheduler.errors
    final = groups.logical()  # fails if a referenced group is gone
    api.scheduler = groups.scheduler = None
    assert GroupedStatusApi(api, groups, "c", layout).get()["status"] == final
    written = [t["leases"] for t in sent] + [durable_view(t)["leases"] for t in sent]
    assert final["leases"] in written


def _quietly(writer: StatusWriter, attempt: Any) -> None:
    """A write whose refusals are the term fence at work, not failures."""
    with contextlib.suppress(Deposed, StaleState, Superseded, StatusUnavailable):
        writer.send(attempt)


# --- each rule reverted, caught -------------------------------------------------------------


def _sweep_without_the_writers_order(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(lease_groups, "_older", lambda group, landed: True)


@BOTH
@pytest.mark.parametrize(
    "revert",
    [_sweep_without_the_writers_order, reverts.lease_groups_deleted_before_the_commit],
)
def test_the_interleavings_catch_each_rule_reverted(
    layout: Layout, revert: Callable[[pytest.MonkeyPatch], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    revert(monkeypatch)
    search = settings(
        INTERLEAVINGS, derandomize=True, database=None, max_examples=300, phases=[Phase.generate]
    )
    with pytest.raises(AssertionError, match="the status references deleted groups"):
        search(given(st.data(), st.just(layout))(two_terms_and_a_late_attempt))()


# --- readers ------------------------------------------------------------------------------


@BOTH
def test_a_reader_of_a_busy_table_reads_one_that_was_written_or_says_to_try_again(
    layout: Layout,
) -> None:
    """A newer write between the reader's status read and its groups' read replaces
    groups: that is read again, never said to be data lost."""
    api = MemoryApi()
    groups = MemoryGroups(api)
    writer = StatusWriter(GroupedStatusApi(api, groups, "c", layout), "ns", "c", holder="w")
    writer.adopt(api.get())
    writer.write(table(shards(12, 1)))
    reader = GroupedStatusApi(api, groups, "c", layout)
    contents = groups.contents
    written = [1]

    def write_meanwhile(every: int) -> Callable[[Collection[str]], dict[str, str]]:
        calls = [0]

        def read(names: Collection[str]) -> dict[str, str]:
            calls[0] += 1
            if calls[0] % every == 0:
                written.append(written[-1] + 1)
                writer.write(table(shards(12, written[-1])))
            return contents(names)

        return read

    groups.contents = write_meanwhile(every=3)  # type: ignore[method-assign,assignment]
    read = reader.get()["status"]["leases"]
    assert read in [durable_view(table(shards(12, at)))["leases"] for at in written]
    groups.contents = write_meanwhile(every=1)  # type: ignore[method-assign,assignment]
    if layout.log:  # only a fold deletes (here every other write): either is right
        with contextlib.suppress(StatusUnavailable):
            read = reader.get()["status"]["leases"]
            assert read in [durable_view(table(shards(12, at)))["leases"] for at in written]
        return
    with pytest.raises(StatusUnavailable, match="try again"):
        reader.get()


@pytest.mark.parametrize(
    "content", ["not json", '{"leases": {}}', '{"leases": 3, "finishedShards": []}', "[]"]
)
def test_a_group_that_is_not_a_table_is_said(content: str) -> None:
    api = MemoryApi()
    groups = MemoryGroups(api)
    writer = StatusWriter(GroupedStatusApi(api, groups, "c", LAYOUT), "ns", "c", holder="w")
    writer.adopt(api.get())
    writer.write(table(shards(12, 1)))
    refs = refs_of(api.status) or []
    name = refs[0].name
    groups.groups[name] = (content, groups.groups[name][1])
    digest = hashlib.sha256(content.encode()).hexdigest()[:16]
    api.status["leases"][name]["checkpoint"] = str(int(digest, 16))
    with pytest.raises(StatusInvalid, match="a lease group cannot be read"):
        GroupedStatusApi(api, groups, "c", LAYOUT).get()


def test_status_leases_naming_groups_badly_is_said() -> None:
    stored = split(table(shards(12)), None, LAYOUT, named("t")).status
    mixed = {**stored, "leases": {**stored["leases"], "shardId-000000000001": {"epoch": 1}}}
    with pytest.raises(StatusInvalid, match="mixes leases and lease groups"):
        refs_of(mixed)
    gap = dict(stored["leases"])
    gap.pop("c-leases-1-t")
    with pytest.raises(StatusInvalid, match="not 0 to n-1"):
        refs_of({"leases": gap})
