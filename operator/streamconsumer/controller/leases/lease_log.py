"""A large lease table kept as a log (docs/design.md#the-lease-log): what a status write
costs etcd is what changed, not the table.

The table is a base, spread by a hash of the shard id over gzipped group ConfigMaps,
and a chain of segments, each a gzipped ConfigMap holding what one status write changed
(the fields of the leases that changed, a checkpoint as the digits that differ from the
one before it) and naming its predecessor with its digest. `status.leases` holds one
entry, of state InLeaseLog, naming the newest segment and its digest: the status write
that names it is the commit, so a table is always read as one write left it, and what
it reads is the very chain that write named (each link's digest is checked).

Once the segments since the base hold half the base's bytes, or MAX_CHAIN of them, the
next write folds: a new base (a group whose content did not change keeps its object)
and a base segment naming its groups. A fold costs about a table; the writes between
two folds pay for it, each a fraction of what it changed. Everything here is pure: the
objects are read and written by `GroupedStatusApi` (lease_groups.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from streamconsumer.controller.leases.status import StatusInvalid
from streamconsumer.core.lineage import MAX_TABLE_SHARDS, TableOutOfBounds, compact, expand
from streamconsumer.models.kept import MAX_LEASE_BYTES, pack, unpack
from streamconsumer.models.resource import LeaseState

MAX_CHAIN = 128
"""Segments after a base at most: bounds a read's requests and the objects kept."""
FOLD_RATIO = 0.5
"""A fold once the segments since the base hold this share of the base's bytes."""
SHARDS_PER_LOG_GROUP = 2500
"""Shards of a base group: about 100 KiB gzipped at Kinesis' 56-digit sequence numbers,
well below a ConfigMap's 1 MiB."""
SHARED_DIGITS = 8
"""A checkpoint sharing at least this many leading characters with the one before it
is written as the rest: consecutive sequence numbers share most of their 56 digits."""

MAX_BASE_GROUPS = 1024
"""Groups of a base at most: as many as any layout has (lease_groups.MAX_GROUPS)."""
MAX_LOG_TEXT = 16 * 2**20
"""Inflated bytes of the segments after the base at most: the writer folds before."""
MAX_LOG_CHANGES = MAX_TABLE_SHARDS
"""Shards the segments after the base name at most (set, unset, dropped, finished and
no longer finished, ranges expanded): the writer folds before."""
MAX_BASE_TEXT = MAX_TABLE_SHARDS * MAX_LEASE_BYTES
"""Inflated bytes of a base's groups at most: the largest table of the largest leases."""
MAX_READ_VALUES = 30 * MAX_TABLE_SHARDS
"""JSON values one read parses at most (about ten a lease, in the base and the log),
counted in the text first: a megabyte of `[[],[],...` is a hundred of Python's. So a
log anyone may forge costs a read a bounded total, not 16 MiB per object per link."""

Leases = dict[str, dict[str, Any]]  # shard id -> the lease's durable fields
Partition = Callable[["Table"], list[str]]  # a table -> its base groups' contents
Namer = Callable[[str], str]  # a kind of object (`g<index>`, `s`) -> a name never used


@dataclass(frozen=True)
class Table:
    """A table's durable content: what a log stores of it."""

    leases: Leases
    finished: frozenset[str]

    def size(self) -> int:
        return len(self.leases) + len(self.finished)


@dataclass(frozen=True)
class Link:
    """An object of the log as its referrer names it."""

    name: str
    digest: str  # 16 hex digits of the stored content's SHA-256

    def wire(self) -> list[str]:
        return [self.name, self.digest]


@dataclass(frozen=True)
class Chain:
    """A table stored as a log, as read or written: what the next write builds on."""

    head: Link
    table: Table
    groups: tuple[Link, ...]  # the base's, in group order
    group_bytes: tuple[int, ...]  # the size of each
    segments: tuple[str, ...]  # the base segment first, the head last
    log_bytes: int  # of the segments after the base segment
    log_text: int = 0  # their bytes inflated (MAX_LOG_TEXT)
    log_changes: int = 0  # the shards they name (MAX_LOG_CHANGES)

    @property
    def base_bytes(self) -> int:
        return sum(self.group_bytes)

    def names(self) -> set[str]:
        """Every object the table is read from: none of them may be deleted."""
        return {link.name for link in self.groups} | set(self.segments)

    def entry(self) -> dict[str, dict[str, Any]]:
        """`status.leases` of a status that commits this chain."""
        return {
            self.head.name: {
                "state": LeaseState.IN_LEASE_LOG.value,
                "epoch": len(self.segments) - 1,
                "checkpoint": str(int(self.head.digest, 16)),  # a checkpoint's pattern
            }
        }


@dataclass(frozen=True)
class Written:
    """A table as a write stores it: the objects to create first, the chain it commits."""

    fresh: dict[str, str]  # name -> content
    chain: Chain


def digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def head_of(status: Mapping[str, Any] | None) -> Link | None:
    """The newest segment a stored status names; None if its table is not a log."""
    leases = (status or {}).get("leases") or {}
    logged = [
        (name, entry)
        for name, entry in leases.items()
        if isinstance(entry, Mapping) and entry.get("state") == LeaseState.IN_LEASE_LOG
    ]
    if not logged:
        return None
    if len(leases) != 1:
        raise StatusInvalid("status.leases holds a lease log's head beside other entries")
    name, entry = logged[0]
    try:
        return Link(name, f"{int(entry['checkpoint']):016x}")
    except (KeyError, TypeError, ValueError) as error:
        raise StatusInvalid(f"status.leases names a lease log badly: {error!r}") from None


def group_content(leases: Mapping[str, Any], finished: Collection[str]) -> str:
    """A part of a table, as a base group and the previous layout's groups hold it."""
    text = {"leases": dict(sorted(leases.items())), "finishedShards": compact(finished)}
    return json.dumps(text, sort_keys=True, separators=(",", ":"))


def write(table: Table, previous: Chain | None, partition: Partition, name_of: Namer) -> Written:
    """`table` stored over `previous` (None: not a log yet): a segment of what changed,
    or a fold. `partition` splits a table into its groups' contents; `name_of(kind)`
    names a new object (kinds `g<index>` and `s`)."""
    if previous is not None:
        if table == previous.table:
            return Written({}, previous)
        changes = _diff(previous.table, table)
        text = _dumps({"prev": previous.head.wire(), **changes})
        content = pack(text)
        log_bytes = previous.log_bytes + len(content)
        log_text = previous.log_text + len(text.encode())
        try:  # counted as a reader counts them: a log past the reader's bounds folds
            log_changes = previous.log_changes + _changed(
                changes, MAX_LOG_CHANGES - previous.log_changes
            )
        except TableOutOfBounds:
            log_changes = MAX_LOG_CHANGES + 1
        if (
            len(previous.segments) <= MAX_CHAIN
            and log_bytes < FOLD_RATIO * previous.base_bytes
            and log_text <= MAX_LOG_TEXT
            and log_changes <= MAX_LOG_CHANGES
        ):
            head = Link(name_of("s"), digest(content))
            chain = Chain(
                head,
                table,
                previous.groups,
                previous.group_bytes,
                (*previous.segments, head.name),
                log_bytes,
                log_text,
                log_changes,
            )
            return Written({head.name: content}, chain)
    return _fold(table, previous, partition, name_of)


def _fold(table: Table, previous: Chain | None, partition: Partition, name_of: Namer) -> Written:
    """A new base: groups whose content did not change keep their object."""
    old = {link.digest: link for link in previous.groups} if previous else {}
    fresh: dict[str, str] = {}
    groups, sizes = [], []
    for index, text in enumerate(partition(table)):
        content = pack(text)
        link = old.get(digest(content))
        if link is None:
            link = Link(name_of(f"g{index}"), digest(content))
            fresh[link.name] = content
        groups.append(link)
        sizes.append(len(content))
    base = pack(_dumps({"prev": None, "groups": [link.wire() for link in groups]}))
    head = Link(name_of("s"), digest(base))
    fresh[head.name] = base
    return Written(fresh, Chain(head, table, tuple(groups), tuple(sizes), (head.name,), 0))


def read(
    head: Link,
    segment: Callable[[str], str | None],
    groups: Callable[[Collection[str]], Mapping[str, str]],
) -> Chain:
    """The chain `head` names: its segments read one by one back to the base
    (`segment(name)`), the base's groups at once (`groups(names)`). Raises
    LogObjectGone (a link not found: replaced by a newer write, or lost) or
    StatusInvalid (anything not as its referrer's digest says, or not a log)."""
    texts: list[dict[str, Any]] = []
    names: list[str] = []
    link: Link | None = head
    log_bytes = log_text = 0
    values = [0]  # JSON values parsed so far (MAX_READ_VALUES)
    while link is not None:
        if len(names) > MAX_CHAIN:  # the base segment and MAX_CHAIN after it read
            raise StatusInvalid(f"a lease log longer than {MAX_CHAIN + 1} segments")
        content = _verified(link, segment(link.name))
        parsed, inflated = _loads(content, link.name, values)
        texts.append(parsed)
        names.append(link.name)
        link = _link(parsed.get("prev"), link.name)
        if link is not None:
            log_bytes += len(content)
            log_text += inflated
            if log_text > MAX_LOG_TEXT:
                raise StatusInvalid(f"a lease log of more than {MAX_LOG_TEXT // 2**20} MiB")
    base = texts[-1]
    listed = _listed(base.get("groups"), names[-1])
    if len(listed) > MAX_BASE_GROUPS:
        raise StatusInvalid(f"a lease log's base of more than {MAX_BASE_GROUPS} groups")
    base_links = tuple(_link(item, names[-1]) for item in listed)
    stored = groups({link.name for link in base_links if link}) if base_links else {}
    leases: Leases = {}
    finished: set[str] = set()
    group_links, sizes = [], []
    base_text = 0
    for link in base_links:
        assert link is not None  # _link returns None only for None
        content = _verified(link, stored.get(link.name))
        group_links.append(link)
        sizes.append(len(content))
        part, inflated = _loads(content, link.name, values)
        base_text += inflated
        if base_text > MAX_BASE_TEXT:
            raise StatusInvalid(f"a lease log's base of more than {MAX_BASE_TEXT // 2**20} MiB")
        _merge(leases, finished, part, link.name)
    table = Table(leases, frozenset(finished))
    log_changes = 0
    for changes, name in zip(reversed(texts[:-1]), reversed(names[:-1]), strict=True):
        log_changes += _changed(changes, MAX_LOG_CHANGES - log_changes, name)
        table = _applied(table, changes, name)
    return Chain(
        head,
        table,
        tuple(group_links),
        tuple(sizes),
        tuple(reversed(names)),
        log_bytes,
        log_text,
        log_changes,
    )


class LogObjectGone(Exception):
    """An object of the log its referrer names was not found (its name: args[0])."""


def _verified(link: Link, content: str | None) -> str:
    if content is None:
        raise LogObjectGone(link.name)
    if digest(content) != link.digest:
        raise StatusInvalid(f"lease log object {link.name} does not match its digest")
    return content


def _loads(content: str, name: str, values: list[int]) -> tuple[dict[str, Any], int]:
    """An object's JSON and its inflated size; `values` counts what a read parsed."""
    try:  # a tenant can write these ConfigMaps: unpack bounds what one inflates to
        text = unpack(content)
        values[0] += sum(text.count(mark) for mark in ",[{")
        if values[0] > MAX_READ_VALUES:
            raise StatusInvalid(f"a lease log of more than {MAX_READ_VALUES:,} JSON values")
        parsed = json.loads(text)
    except (ValueError, RecursionError) as error:  # RecursionError: nested past the parser
        raise StatusInvalid(f"lease log object {name} cannot be read: {error}"[:300]) from None
    if not isinstance(parsed, dict):
        raise StatusInvalid(f"lease log object {name} is not a JSON object")
    return parsed, len(text.encode())


def _link(value: Any, where: str) -> Link | None:
    if value is None:
        return None
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(part, str) for part in value)
        and len(value[1]) == 16
    ):
        return Link(value[0], value[1])
    raise StatusInvalid(f"lease log object {where} names another badly")


def _listed(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise StatusInvalid(f"lease log object {where} lists no groups")
    return value


def _merge(leases: Leases, finished: set[str], part: dict[str, Any], name: str) -> None:
    try:
        more = part["leases"]
        if not isinstance(more, dict) or not all(isinstance(v, dict) for v in more.values()):
            raise TypeError("leases are not objects")
        leases.update(more)
        finished.update(expand(part["finishedShards"], MAX_TABLE_SHARDS - len(finished)))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StatusInvalid(f"lease group {name} cannot be read: {error!r}"[:300]) from None
    if len(leases) + len(finished) > MAX_TABLE_SHARDS:
        raise TableOutOfBounds(f"a lease log names more than {MAX_TABLE_SHARDS:,} shards")


def _changed(changes: Mapping[str, Any], most: int, name: str = "") -> int:
    """The shards a segment names (ranges expanded, no more than `most` built)."""
    try:
        count = len(changes["set"]) + len(changes["unset"]) + len(changes["drop"])
        for key in ("finished", "unfinished"):
            count += len(expand(changes[key], max(0, most - count)))
    except TableOutOfBounds:
        raise TableOutOfBounds(f"a lease log naming more than {MAX_LOG_CHANGES:,} shards") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StatusInvalid(f"lease log segment {name} cannot be read: {error!r}"[:300]) from None
    if count > most:
        raise TableOutOfBounds(f"a lease log naming more than {MAX_LOG_CHANGES:,} shards")
    return count


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _diff(old: Table, new: Table) -> dict[str, Any]:
    """What a segment holds: the fields that changed of each lease, those dropped, the
    leases gone, and the shards finished and no longer finished."""
    changed: dict[str, dict[str, Any]] = {}
    unset: dict[str, list[str]] = {}
    for shard_id, lease in new.leases.items():
        before = old.leases.get(shard_id, {})
        fields = {
            key: _encoded(key, value, before.get(key))
            for key, value in lease.items()
            if before.get(key) != value
        }
        if fields or shard_id not in old.leases:  # a new lease, even of no fields
            changed[shard_id] = fields
        dropped = sorted(key for key in before if key not in lease)
        if dropped:
            unset[shard_id] = dropped
    return {
        "set": changed,
        "unset": unset,
        "drop": sorted(old.leases.keys() - new.leases.keys()),
        "finished": compact(new.finished - old.finished),
        "unfinished": compact(old.finished - new.finished),
    }


def _encoded(key: str, value: Any, before: Any) -> Any:
    """A checkpoint as the characters that differ from the one before it: [kept, rest]."""
    if key == "checkpoint" and isinstance(value, str) and isinstance(before, str):
        shared = 0
        for ours, theirs in zip(value, before, strict=False):
            if ours != theirs:
                break
            shared += 1
        if shared >= SHARED_DIGITS:
            return [shared, value[shared:]]
    return value


def _applied(table: Table, changes: dict[str, Any], name: str) -> Table:
    """`table` with a segment's `changes`; StatusInvalid where they do not fit it."""
    leases = dict(table.leases)
    try:
        for shard_id in changes["drop"]:
            del leases[shard_id]
        for shard_id, fields in changes["unset"].items():
            lease = dict(leases[shard_id])
            for key in fields:
                del lease[key]
            leases[shard_id] = lease
        for shard_id, fields in changes["set"].items():
            before = leases.get(shard_id, {})
            leases[shard_id] = {
                **before,
                **{key: _decoded(key, value, before.get(key)) for key, value in fields.items()},
            }
        finished = set(table.finished) - set(expand(changes["unfinished"], MAX_TABLE_SHARDS))
        finished |= set(expand(changes["finished"], MAX_TABLE_SHARDS))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StatusInvalid(f"lease log segment {name} cannot be read: {error!r}"[:300]) from None
    if len(leases) + len(finished) > MAX_TABLE_SHARDS:
        raise TableOutOfBounds(f"a lease log names more than {MAX_TABLE_SHARDS:,} shards")
    return Table(leases, frozenset(finished))


def _decoded(key: str, value: Any, before: Any) -> Any:
    if key == "checkpoint" and isinstance(value, list):
        shared, rest = value
        if not (isinstance(before, str) and isinstance(shared, int) and isinstance(rest, str)):
            raise TypeError("a checkpoint's rest with no checkpoint before it")
        if not SHARED_DIGITS <= shared <= len(before):
            raise ValueError(f"a checkpoint sharing {shared} characters of {len(before)}")
        return before[:shared] + rest
    return value
