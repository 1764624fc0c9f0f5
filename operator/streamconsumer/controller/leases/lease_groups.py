"""Where the lease table is stored (docs/design.md#lease-groups). Up to `inline_max_shards`
entries the status holds it, as always. Past that, a lease log (lease_log.py): the
status holds one entry naming the log's newest segment, each write adds a segment of
what it changed, and a fold now and then writes the table anew into groups, its shards
spread by a hash of their id. With `Layout.log` off, the previous layout: lease groups,
`status.leases` naming each (of state InLeaseGroups, with its content's digest) and a
write rewriting every group that changed; kept so that a rollback to a release before
the log can first go back to it. Both are read, whichever is stored; the entries use
only fields the previous release's CRD knows, and that release's models refuse them.

Objects are copy-on-write: a new segment or group is a new ConfigMap under a name never
used before, and the status write that names it is the commit, under the term fence
and the resourceVersion precondition exactly as before. So a table is always read whole
as one write left it, however late an old writer acts, and the rest of the operator
sees only the table as one status (`GroupedStatusApi` is a `StatusApi`).

What is deleted, and why nothing named ever is:
- the objects a commit's predecessor read its table from that it no longer needs, once
  it landed: every later commit lands on it (the precondition) and names its own;
- an object nobody names, written by an older term, or by this daemon before the write
  that landed (an attempt older than a landed one never lands: the precondition again).
  Swept after a term's first write and every `SWEEP_EVERY` writes.
An object written by another process under the same term number (the loser of a race
for the fence) is left to the next term's sweep. Only the consumer's own objects are
touched: labelled with its name and uid (not a deleted namesake's; lease_group_store.py)."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streamconsumer.controller.leases import lease_log
from streamconsumer.controller.leases.lease_log import (
    SHARDS_PER_LOG_GROUP,
    Chain,
    LogObjectGone,
    Table,
    digest,
    group_content,
    head_of,
)
from streamconsumer.controller.leases.status import (
    STATUS_ERRORS,
    Conflict,
    StatusApi,
    StatusInvalid,
    StatusUnavailable,
)
from streamconsumer.core.lineage import MAX_TABLE_SHARDS, TableOutOfBounds, compact, expand
from streamconsumer.models.resource import LeaseState

log = logging.getLogger(__name__)

INLINE_MAX_SHARDS = 100
"""Leases and finished shards the status holds itself: about 30 KiB of status, which
every status write rewrites whole (with its managedFields) in etcd."""
GROUP_COUNT = 64
"""Lease groups of a table past `INLINE_MAX_SHARDS` (at 10,000 shards about 45 KiB
each); a lease log's base has at most as many, one per SHARDS_PER_LOG_GROUP."""
MAX_GROUPS = 1024
SWEEP_EVERY = 256
"""Writes between two sweeps of groups nobody names (those of writes that failed)."""
DURABLE_FIELDS = ("owner", "epoch", "checkpoint", "state", "handoffTo", "start", "resetting")
"""What a group keeps of a lease: its views (lag, parents) change too often to store."""
READ_ATTEMPTS = 10
"""Reads of a table whose groups a newer write replaced meanwhile, before giving up."""
_writes = itertools.count(1)  # numbers every write of this process (itertools: atomic)


@dataclass(frozen=True)
class Layout:
    inline_max_shards: int = INLINE_MAX_SHARDS
    groups: int = GROUP_COUNT
    log: bool = True  # a lease log (lease_log.py); False: lease groups, for a rollback
    log_group_shards: int = SHARDS_PER_LOG_GROUP  # of a lease log's base group

    def __post_init__(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS:
            raise ValueError(f"lease groups: 1 to {MAX_GROUPS}, not {self.groups}")
        if self.log_group_shards < 1:
            raise ValueError(
                f"shards of a lease log's group: 1 or more, not {self.log_group_shards}"
            )


@dataclass(frozen=True)
class GroupRef:
    """A group as the status names it: an entry of `status.leases` keyed by the group's
    ConfigMap, whose epoch counts its leases and whose checkpoint is its digest."""

    name: str
    digest: str  # 16 hex digits
    leases: int

    def wire(self) -> dict[str, Any]:
        return {
            "state": LeaseState.IN_LEASE_GROUPS.value,
            "epoch": self.leases,
            "checkpoint": str(int(self.digest, 16)),  # a checkpoint's pattern: digits
        }


@dataclass(frozen=True)
class Writer:
    """Who wrote a group: the term, the number of the write in this process, and the
    process (two processes may try the same term number; one fences)."""

    term: int
    seq: int
    holder: str

    def annotation(self) -> str:
        return f"{self.term}/{self.seq}/{self.holder}"

    @classmethod
    def parse(cls, text: str) -> Writer | None:
        term, _, rest = text.partition("/")
        seq, _, holder = rest.partition("/")
        if not (term.isdigit() and seq.isdigit() and holder):
            return None
        return cls(int(term), int(seq), holder)


@dataclass(frozen=True)
class StoredGroup:
    name: str
    written_by: Writer | None  # None: not one we can place in order (never deleted)


class GroupStore(Protocol):
    """The ConfigMaps of one consumer's lease groups: only those labelled as its groups
    and owned by it are read, listed or found. Errors: StatusUnavailable (may have
    happened), StatusInvalid (refused, or a group's name taken by another object)."""

    def create(self, name: str, content: str, written_by: Writer) -> None: ...

    def read(self, name: str) -> str | None:
        """The content; None if there is no such group of this consumer."""
        ...

    def contents(self, names: Collection[str]) -> dict[str, str]:
        """The groups of this consumer among `names`, name -> content, in one read."""
        ...

    def delete(self, name: str) -> None:
        """Absent already is done."""
        ...

    def listed(self) -> list[StoredGroup]: ...


def group_of(shard_id: str, groups: int) -> int:
    return zlib.crc32(shard_id.encode()) % groups


def refs_of(status: Mapping[str, Any] | None) -> list[GroupRef] | None:
    """The groups a stored status names, in order; None: its table is inline."""
    leases = (status or {}).get("leases") or {}
    named = {
        name: entry
        for name, entry in leases.items()
        if isinstance(entry, Mapping) and entry.get("state") == LeaseState.IN_LEASE_GROUPS
    }
    if not named:
        return None
    if len(named) != len(leases):
        raise StatusInvalid("status.leases mixes leases and lease groups")
    try:
        refs = {
            int(name.rsplit("-", 2)[-2]): GroupRef(
                name, f"{int(entry['checkpoint']):016x}", int(entry.get("epoch") or 0)
            )
            for name, entry in named.items()
        }
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise StatusInvalid(f"status.leases names lease groups badly: {error!r}") from None
    if sorted(refs) != list(range(len(refs))):
        raise StatusInvalid(f"status.leases names lease groups {sorted(refs)}, not 0 to n-1")
    return [refs[index] for index in range(len(refs))]


def _durable(lease: Mapping[str, Any]) -> dict[str, Any]:
    return {k: lease[k] for k in DURABLE_FIELDS if lease.get(k) is not None}


def durable_view(status: Mapping[str, Any]) -> dict[str, Any]:
    """A status as a grouped table reads back: leases without their views."""
    leases = status.get("leases") or {}
    return {**status, "leases": {sid: _durable(lease) for sid, lease in sorted(leases.items())}}


@dataclass(frozen=True)
class Split:
    """A logical status stored: the status to write, the groups to create first."""

    status: dict[str, Any]
    fresh: dict[str, str]  # name -> content
    refs: list[GroupRef] | None


def split(
    status: Mapping[str, Any],
    base: list[GroupRef] | None,
    layout: Layout,
    name_of: Callable[[int], str],
) -> Split:
    """`status` as stored over `base` (the layout of the status it replaces): groups whose
    content did not change keep their object; `name_of(group)` names a new one. A table
    goes back inline only below half the threshold: one near it does not move each write."""
    table = table_of(status)
    if not grouped(table, base is not None, layout):
        return Split(dict(status), {}, None)
    reusable = base if base is not None and len(base) == layout.groups else None
    counts = [0] * layout.groups
    for shard_id in table.leases:
        counts[group_of(shard_id, layout.groups)] += 1
    refs, fresh = [], {}
    for index, content in enumerate(partition(table, layout.groups)):
        if reusable is not None and reusable[index].digest == digest(content):
            refs.append(reusable[index])
            continue
        name = name_of(index)
        fresh[name] = content
        refs.append(GroupRef(name, digest(content), counts[index]))
    stored = {**status, "leases": {r.name: r.wire() for r in refs}, "finishedShards": []}
    return Split(stored, fresh, refs)


def table_of(status: Mapping[str, Any]) -> Table:
    """A status's table as stored: each lease's durable fields, the finished shards."""
    leases = status.get("leases") or {}
    return Table(
        {sid: _durable(lease) for sid, lease in leases.items()},
        frozenset(expand(status.get("finishedShards") or [])),
    )


def grouped(table: Table, grouped_now: bool, layout: Layout) -> bool:
    """Whether a table is stored outside the status. It goes back inline only below
    half the threshold: a table near it does not move at each write."""
    threshold = layout.inline_max_shards
    return table.size() > (threshold // 2 if grouped_now else threshold)


def log_groups(table: Table, layout: Layout) -> int:
    """How many groups a lease log's base spreads `table` over: fewer, larger objects
    than lease groups (they are gzipped), so a fold is a few requests."""
    return max(1, min(layout.groups, -(-table.size() // layout.log_group_shards)))


def partition(table: Table, groups: int) -> list[str]:
    """The contents of a table's `groups` groups, its shards spread by their id's hash."""
    leases: list[dict[str, Any]] = [{} for _ in range(groups)]
    finished: list[list[str]] = [[] for _ in range(groups)]
    for shard_id, lease in table.leases.items():
        leases[group_of(shard_id, groups)][shard_id] = lease
    for shard_id in table.finished:
        finished[group_of(shard_id, groups)].append(shard_id)
    return [group_content(leases[n], finished[n]) for n in range(groups)]


def joined(status: Mapping[str, Any], contents: Sequence[str]) -> dict[str, Any]:
    """The logical status of a stored grouped one, its groups' `contents` in order."""
    leases: dict[str, Any] = {}
    finished: set[str] = set()
    for content in contents:  # a tenant can write a group: the whole table is bounded
        try:
            group = json.loads(content)
            leases.update(group["leases"])
            finished.update(expand(group["finishedShards"], MAX_TABLE_SHARDS - len(finished)))
            if len(leases) + len(finished) > MAX_TABLE_SHARDS:
                raise TableOutOfBounds(f"the groups name more than {MAX_TABLE_SHARDS:,} shards")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
            raise StatusInvalid(f"a lease group cannot be read: {error!r}"[:300]) from None
    logical = dict(status)
    logical["leases"] = dict(sorted(leases.items()))
    logical["finishedShards"] = compact(finished)
    return logical


Stored = list[GroupRef] | Chain | None
"""Where a stored status keeps its table: lease groups, a lease log, or inline (None)."""


def kept_outside(status: Mapping[str, Any] | None) -> bool:
    """Whether a stored status keeps its table in ConfigMaps (read with `read_stored`)."""
    return head_of(status) is not None or refs_of(status) is not None


def names_of(stored: Stored) -> set[str]:
    """The objects a stored table is read from: none of them may be deleted."""
    if isinstance(stored, Chain):
        return stored.names()
    return {ref.name for ref in stored or []}


def read_stored(
    status: Mapping[str, Any] | None, store: GroupStore
) -> tuple[dict[str, Any] | None, Stored]:
    """A stored status with its table inline, and where the table is kept. Raises
    GroupGone (an object it names was not found), StatusInvalid."""
    head = head_of(status)
    if head is not None:
        try:
            chain = lease_log.read(head, store.read, store.contents)
        except LogObjectGone as gone:
            raise GroupGone(gone.args[0]) from None
        table = chain.table
        logical = {
            **(status or {}),
            "leases": dict(sorted(table.leases.items())),
            "finishedShards": compact(table.finished),
        }
        return logical, chain
    refs = refs_of(status)
    if refs is None:
        return (dict(status) if status is not None else None), None
    stored = store.contents({ref.name for ref in refs}) if refs else {}
    contents = []
    for ref in refs:
        content = stored.get(ref.name)
        if content is None:
            raise GroupGone(ref.name)
        if digest(content) != ref.digest:
            raise StatusInvalid(f"lease group {ref.name} does not match its digest")
        contents.append(content)
    return joined(status or {}, contents), refs


class GroupGone(Exception):
    """An object the status references was not found: replaced by a newer write since
    it was read, or gone (its name: args[0])."""


class GroupedStatusApi:
    """A StatusApi whose tables past the layout's threshold live in a lease log (or lease
    groups). Its callers (`StatusWriter`) see every status with its table inline. Writes
    run on threads that may outlive their job: shared state is touched under a lock."""

    def __init__(
        self,
        api: StatusApi,
        store: GroupStore,
        consumer: str,
        layout: Layout = Layout(),
        sweep_every: int = SWEEP_EVERY,
    ) -> None:
        self._api = api
        self._store = store
        self._consumer = consumer
        self._layout = layout
        self._sweep_every = sweep_every
        self._layouts: dict[str, Stored] = {}  # resourceVersion -> where its table is
        self._since_sweep = 0
        self._swept_term: int | None = None
        self._lock = threading.Lock()

    def get(self) -> dict[str, Any]:
        for _ in range(READ_ATTEMPTS):
            body = self._api.get()
            try:
                return self._logical(body)
            except GroupGone as gone:
                again = self._api.get()
                if again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]:
                    self._gone(gone.args[0])  # not replaced: really gone
                # else a newer write replaced it while we read: read the newer table
        raise StatusUnavailable(
            f"the lease table changed at each of {READ_ATTEMPTS} reads: try again"
        )

    def _gone(self, name: str) -> None:
        """Raises why the object `name`, which the status still references, was not read
        (the store raises if it is there but not ours); returns if it is there now."""
        if self._store.read(name) is not None:
            return
        raise StatusInvalid(
            f"ConfigMap {name}, which status.leases references, is missing: the "
            "checkpoints of its shards are gone with it "
            "(docs/troubleshooting.md#a-lease-group-is-missing)"
        )

    def replace_status(self, body: dict[str, Any]) -> dict[str, Any]:
        version = body["metadata"].get("resourceVersion")
        with self._lock:
            known = version in self._layouts
            base = self._layouts.get(version)
        seq = next(_writes)
        if not known:  # not one we read or wrote: read it (a conflict if it moved)
            stored = self.get()
            if stored["metadata"]["resourceVersion"] != version:
                raise Conflict("the object has been modified")
            with self._lock:
                base = self._layouts.get(version)
        term = (body["status"].get("term") or {}).get("number", 0)
        holder = (body["status"].get("term") or {}).get("holder", "")
        writer = Writer(int(term), seq, str(holder))
        token = hashlib.sha256(writer.annotation().encode()).hexdigest()[:10]
        status, fresh, stored_as = self._stored(body["status"], base, token)
        for name, content in fresh.items():
            self._store.create(name, content, writer)
        written = self._api.replace_status({**body, "status": status})
        self._remember(written["metadata"]["resourceVersion"], stored_as)
        kept = names_of(stored_as)
        self._delete(sorted(names_of(base) - kept))
        self._maybe_sweep(writer, kept)
        logical = body["status"] if stored_as is None else durable_view(body["status"])
        return {**written, "status": logical}

    def _stored(
        self, status: dict[str, Any], base: Stored, token: str
    ) -> tuple[dict[str, Any], dict[str, str], Stored]:
        """`status` as stored over `base`: the status to write, the objects to create
        first, and where its table is then kept."""
        layout = self._layout
        if not layout.log:
            refs = base if isinstance(base, list) else None
            made = split(status, refs, layout, lambda n: f"{self._consumer}-leases-{n}-{token}")
            return made.status, made.fresh, made.refs
        table = table_of(status)
        if not grouped(table, base is not None, layout):
            return dict(status), {}, None
        written = lease_log.write(
            table,
            base if isinstance(base, Chain) else None,
            lambda table: partition(table, log_groups(table, layout)),
            lambda kind: f"{self._consumer}-leaselog-{kind}-{token}",
        )
        chain = written.chain
        return {**status, "leases": chain.entry(), "finishedShards": []}, written.fresh, chain

    def _logical(self, body: dict[str, Any]) -> dict[str, Any]:
        logical, stored = read_stored(body.get("status"), self._store)
        self._remember(body["metadata"]["resourceVersion"], stored)
        return body if logical is None else {**body, "status": logical}

    def _remember(self, version: str, stored: Stored) -> None:
        with self._lock:
            self._layouts[version] = stored
            while len(self._layouts) > 4:  # oldest first: dicts keep insertion order
                del self._layouts[next(iter(self._layouts))]

    def _delete(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                self._store.delete(name)
            except STATUS_ERRORS as error:  # the next sweep's
                log.debug("%s: lease group %s not deleted: %s", self._consumer, name, error)

    def _maybe_sweep(self, landed: Writer, referenced: set[str]) -> None:
        with self._lock:
            self._since_sweep += 1
            due = self._swept_term != landed.term or self._since_sweep >= self._sweep_every
            if due:
                self._swept_term, self._since_sweep = landed.term, 0
        if not due:
            return
        try:
            listed = self._store.listed()
        except STATUS_ERRORS as error:
            log.debug("%s: lease groups not swept: %s", self._consumer, error)
            return
        self._delete([g.name for g in listed if g.name not in referenced and _older(g, landed)])


def _older(group: StoredGroup, landed: Writer) -> bool:
    """Written by an older term, or by `landed`'s own process before it."""
    by = group.written_by
    if by is None:
        return False
    return by.term < landed.term or (
        by.term == landed.term and by.holder == landed.holder and by.seq < landed.seq
    )
