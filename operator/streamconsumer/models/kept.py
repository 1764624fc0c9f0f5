"""A StreamConsumer's lease table kept apart from the object (docs/checkpoints.md): what
the operator writes when the object is deleted, what a new StreamConsumer of the same
name and stream resumes from, and what `streamconsumer checkpoints export|import` read
and write. The checkpoints otherwise live only in the status, and die with it."""

from __future__ import annotations

import base64
import datetime
import gzip
import json
import zlib
from collections.abc import Mapping
from typing import Any

from pydantic import AwareDatetime, Field, ValidationError

from streamconsumer.models.base import Model, first_error
from streamconsumer.models.resource import GROUP, LeaseState, Source, StreamConsumerSpec

KEPT_FORMAT = 1
_HELD = ("owner", "handoffTo", "millisBehindLatest")  # of the workers that are gone


class KeptTable(Model):
    format: int = Field(default=KEPT_FORMAT, ge=1)
    namespace: str
    consumer: str
    source: Source
    # Aware, all three: a time of no zone compared with now raised TypeError, not a
    # refusal (a kept ConfigMap is anyone's in the namespace to write).
    created: AwareDatetime = Field(
        description="The deleted object's creationTimestamp: where initialPosition LATEST "
        "started, so a shard that had not started yet loses nothing in between."
    )
    taken: AwareDatetime
    expires: AwareDatetime
    drained: bool = Field(
        description="Every shard was handed off before it was taken: no record was "
        "processed past these checkpoints."
    )
    status: dict[str, Any] = Field(
        description="The status' durable part: leases (no owners), finishedShards, "
        "lastReset, and the stream they are of (`STREAM`) where the operator could tell."
    )


# The status field naming the stream the checkpoints are of (`status.stream`: its
# incarnation, `StreamSource.incarnation`). Kept in the table's free-form status, not as
# a field of its own: the previous release forbids unknown fields there and ignores this.
STREAM = "stream"


def ownerless(status: dict[str, Any]) -> dict[str, Any]:
    """The durable part of a status, as a table nobody holds: its workers are gone, and a
    new object's workers start from the checkpoints (epochs go on growing)."""
    leases = {}
    for shard_id, lease in (status.get("leases") or {}).items():
        kept = {k: v for k, v in lease.items() if k not in _HELD}
        if kept.get("state") != LeaseState.FINISHED:
            kept["state"] = LeaseState.RELEASED.value
        if kept.pop("resetting", False):  # a reset waiting for its owner: nobody owns it now
            kept.pop("checkpoint", None)
        leases[shard_id] = kept
    durable = {
        "leases": leases,
        "finishedShards": status.get("finishedShards") or [],
        "lastReset": status.get("lastReset"),
    }
    if status.get(STREAM) is not None:
        durable[STREAM] = status[STREAM]
    return durable


KEPT_LABEL = f"{GROUP}/checkpoints-of"
TABLE_KEY = "checkpoints.json"
PACKED_KEY = "checkpoints.json.gz"
PACK_ABOVE_BYTES = 900 * 1024
"""A ConfigMap holds 1 MiB: a larger table (past about 7,000 shards) is kept gzipped in
binaryData (about a quarter of the size), which only releases from 0.2.0 read."""
UNPACKED_MAX_BYTES = 16 * 2**20
"""A packed table inflates to no more than this (anyone who may write a ConfigMap can
make one that inflates to gigabytes): a ConfigMap's 1 MiB holds about 4 MiB of table."""
MAX_TABLE_VALUES = 1_000_000
"""The most JSON values (about ten a lease) a kept table is parsed with: counted in its
text first, since a megabyte of `[[],[],...` is a hundred of Python's."""
MAX_KEPT_EPOCH = 2**32
"""Epochs go on from a kept table's (a lingering worker of the deleted object stays
fenced), but no further than this: the wire carries no more than 2**53."""


MAX_LEASE_BYTES = 1024  # a lease's JSON; one the operator writes is about 150 B
_OF_THE_LAST_RESET = ("requestedBy", "shards")  # said by the file alone: not resumed


class KeptTableInvalid(ValueError):
    """A kept table no new object may start from: unreadable, or out of bounds."""


def kept_for(config_map_metadata: Any, name: str) -> bool:
    """Is this ConfigMap (its V1ObjectMeta) the table we keep for consumer `name`? One of
    that name without our label is someone else's, never overwritten."""
    labels = (config_map_metadata.labels if config_map_metadata else None) or {}
    return bool(labels.get(KEPT_LABEL) == name)


def table(
    namespace: str,
    name: str,
    spec: StreamConsumerSpec,
    body: Mapping[str, Any],
    now: datetime.datetime,
    drained: bool,
    stream: str | None = None,
) -> KeptTable:
    """What to keep of `body` (the object as last written) at `now`; `stream`: the
    incarnation of the stream its checkpoints are of, for a status that does not say."""
    status = ownerless(dict(body.get("status") or {}))
    if stream is not None:
        status.setdefault(STREAM, stream)
    return KeptTable(
        namespace=namespace,
        consumer=name,
        source=spec.source,
        created=datetime.datetime.fromisoformat(body["metadata"]["creationTimestamp"]),
        taken=now,
        expires=now + datetime.timedelta(days=spec.checkpoint_retention.days),
        drained=drained,
        status=status,
    )


def config_map(kept: KeptTable, name: str) -> dict[str, Any]:
    """The ConfigMap `name` that keeps the table (no owner: it outlives the object)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {KEPT_LABEL: kept.consumer},
        },
        **stored_form(kept.model_dump_json(by_alias=True)),
    }


def stored_form(text: str) -> dict[str, Any]:
    """A table's text as a ConfigMap holds it: `data`, or gzipped in `binaryData`."""
    if len(text.encode()) <= PACK_ABOVE_BYTES:
        return {"data": {TABLE_KEY: text}}
    return {"binaryData": {PACKED_KEY: pack(text)}}


def pack(text: str) -> str:
    """`text` gzipped, in base64: what `unpack` reads."""
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def unpack(packed: str | bytes) -> str:
    """The text `pack` packed; ValueError past UNPACKED_MAX_BYTES (anyone who may write
    a ConfigMap can make one that inflates to gigabytes) or if it is not one."""
    try:
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip
        text = inflate.decompress(base64.b64decode(packed), UNPACKED_MAX_BYTES)
        tail = inflate.unconsumed_tail
        decoded = text.decode()
    except (ValueError, zlib.error) as error:  # binascii.Error is a ValueError
        raise ValueError(f"not a gzipped table: {error}") from None
    if tail:
        raise ValueError(f"a packed table past {UNPACKED_MAX_BYTES // 2**20} MiB")
    return decoded


def kept_data(
    data: Mapping[str, str] | None, binary_data: Mapping[str, str | bytes] | None
) -> dict[str, str]:
    """A kept ConfigMap's data with its table under TABLE_KEY, packed or not. Where it
    holds both (the operator and `checkpoints import` apply it as different field
    managers, and neither removes the other's key), the table taken last."""
    unpacked = dict(data or {})
    packed = (binary_data or {}).get(PACKED_KEY)
    if packed is None:
        return unpacked
    text = _unpacked(packed)
    if TABLE_KEY not in unpacked or _taken(text) > _taken(unpacked[TABLE_KEY]):
        unpacked[TABLE_KEY] = text
    return unpacked


def _unpacked(packed: str | bytes) -> str:
    """The gzipped table; past UNPACKED_MAX_BYTES (anyone may write a ConfigMap that
    inflates to gigabytes), or not gzip at all, a text its reader refuses."""
    try:
        return unpack(packed)
    except ValueError as error:
        return str(error)


_NEVER = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _taken(text: str) -> datetime.datetime:
    """When the table was taken, or _NEVER if it does not say. A time, not its ISO text:
    01:00+05:00 is earlier than 00:30Z, though its text sorts after it."""
    try:
        return parsed(text).taken
    except KeptTableInvalid:
        return _NEVER


def same_stream(a: Source, b: Source) -> bool:
    """The same stream or table, wherever it is reached from (endpoint) and however it is
    read (polling or fan-out)."""
    ignored = {"endpoint_url", "consumer"}
    return type(a) is type(b) and a.model_dump(
        exclude={kind: ignored for kind in type(a).model_fields}
    ) == b.model_dump(exclude={kind: ignored for kind in type(b).model_fields})


def resumable(
    data: Mapping[str, str] | None, name: str, spec: StreamConsumerSpec, now: datetime.datetime
) -> tuple[KeptTable | None, str]:
    """The kept table a new object `name` may resume from, or None and why not (a table
    of another consumer or stream, or expired); raises KeptTableInvalid for one nobody may
    resume from: starting afresh instead would replay or skip what it says is done."""
    if data is None or TABLE_KEY not in data:
        return None, "no checkpoints kept"
    kept = parsed(data[TABLE_KEY])
    if kept.consumer != name:
        return None, f"the kept checkpoints are {kept.consumer}'s"
    if not same_stream(kept.source, spec.source):
        return None, "the kept checkpoints are of another stream"
    if kept.expires < now:
        return None, f"the kept checkpoints expired at {kept.expires.isoformat()}"
    return kept, ""


def parsed(text: str) -> KeptTable:
    """A kept table as a new object may take it (`as_resumed`); raises KeptTableInvalid."""
    values = sum(text.count(mark) for mark in ",[{")
    if values > MAX_TABLE_VALUES:
        raise KeptTableInvalid(f"a kept table of more than {MAX_TABLE_VALUES:,} values")
    try:
        kept = KeptTable.model_validate_json(text)
    except ValidationError as error:
        raise KeptTableInvalid(f"unreadable: {first_error(error)}"[:300]) from None
    return kept.model_copy(update={"status": as_resumed(kept.status)})


def as_resumed(status: Mapping[str, Any]) -> dict[str, Any]:
    """A kept table's status as a new object may take it. A ConfigMap anyone in the
    namespace may write, so nothing in it is taken as it stands that only the operator
    may say: no owner, hand-off or held state; no requester of the last reset (only the
    apiserver can tell who asks) nor its list of shards (only its id keeps it from being
    applied twice); no epoch past MAX_KEPT_EPOCH. And no lease the status could not hold:
    a status write is at most 1.5 MiB (etcd), so a lease is at most MAX_LEASE_BYTES."""
    leases = status.get("leases") or {}
    if not isinstance(leases, Mapping) or not isinstance(status.get("finishedShards") or [], list):
        raise KeptTableInvalid("its leases are not a table, or its finished shards no list")
    for shard_id, lease in leases.items():
        epoch = lease.get("epoch", 0) if isinstance(lease, Mapping) else None
        if not isinstance(epoch, int) or not 0 <= epoch <= MAX_KEPT_EPOCH:
            raise KeptTableInvalid(f"shard {shard_id[:128]}: not a lease of epoch 0 to 2**32")
        if len(json.dumps(lease)) > MAX_LEASE_BYTES:
            raise KeptTableInvalid(f"shard {shard_id[:128]}: a lease of over {MAX_LEASE_BYTES} B")
    resumed = ownerless(dict(status))
    if isinstance(last := resumed.get("lastReset"), Mapping):
        resumed["lastReset"] = {k: v for k, v in last.items() if k not in _OF_THE_LAST_RESET}
    return resumed


def kept_stream(kept: KeptTable) -> str | None:
    """The incarnation of the stream `kept` is of; None where the table does not say (an
    export of a running consumer, or a stream the operator could not describe)."""
    stream = kept.status.get(STREAM)
    return stream if isinstance(stream, str) else None


def another_incarnation(kept: KeptTable, current: str) -> str:
    """Why `kept` is not of the stream now behind its name (deleted and created again
    since: the same name and shard ids, none of the records); "" when it is."""
    was = kept_stream(kept)
    if was is None or was == current:
        return ""
    return (
        f"the stream was deleted and created again since they were kept: they are of "
        f"{was}, the stream now is {current}"
    )
