"""`streamconsumer checkpoints export NAME` and `import FILE` (docs/checkpoints.md): a
consumer's lease table as JSON, out of a StreamConsumer (or the table kept when it was
deleted), and into the ConfigMap a new StreamConsumer of that name resumes from (a
rename, a namespace move, a restore)."""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from streamconsumer.controller.apply import CLI, apply
from streamconsumer.controller.leases.lease_group_store import read_consumer
from streamconsumer.controller.leases.state import durable_from_status
from streamconsumer.controller.leases.status import STATUS_ERRORS
from streamconsumer.controller.names import kept_checkpoints
from streamconsumer.models.kept import (
    TABLE_KEY,
    KeptTable,
    config_map,
    kept_data,
    kept_for,
    parsed,
    table,
)
from streamconsumer.models.resource import StreamConsumerSpec


class CheckpointsError(Exception):
    """What to tell the user, in their words."""


def _consumer(namespace: str, name: str) -> dict[str, Any] | None:
    """The consumer with its lease table inline (lease groups read); None if absent."""
    try:
        return read_consumer(k8s.ApiClient(), namespace, name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    except STATUS_ERRORS as error:
        raise CheckpointsError(f"the lease table of {namespace}/{name}: {error}") from None


def _kept(namespace: str, name: str) -> Any | None:
    """The ConfigMap `<name>-checkpoints`, ours or not; None if absent."""
    try:
        return k8s.CoreV1Api().read_namespaced_config_map(kept_checkpoints(name), namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def export(namespace: str, name: str) -> tuple[str, str]:
    """The table as JSON, and a note on where it came from."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    body = _consumer(namespace, name)
    if body is not None:
        spec = StreamConsumerSpec.model_validate(body.get("spec") or {})
        if spec.end is not None:
            raise CheckpointsError(
                f"{namespace}/{name} is a bounded consumer (spec.end): its shards are finished "
                "at its end, and a consumer resuming from them would skip what came after"
            )
        exported = table(namespace, name, spec, body, now, drained=False)
        note = (
            f"exported from the running {namespace}/{name}: records processed after this "
            "are processed again by a consumer that resumes from it (at-least-once)"
        )
        return exported.model_dump_json(by_alias=True, indent=2), note
    found = _kept(namespace, name)
    data = kept_data(found.data, found.binary_data) if found is not None else {}
    if found is None or not kept_for(found.metadata, name) or TABLE_KEY not in data:
        raise CheckpointsError(f"neither {namespace}/{name} nor checkpoints kept of it")
    try:
        kept = KeptTable.model_validate_json(data[TABLE_KEY])
    except ValidationError as error:
        where = f"ConfigMap {namespace}/{kept_checkpoints(name)}"
        raise CheckpointsError(f"{where} holds no table this release reads: {error}") from None
    note = f"exported from ConfigMap {kept_checkpoints(name)}, kept at {kept.taken.isoformat()}"
    return kept.model_dump_json(by_alias=True, indent=2), note


def import_(text: str, namespace: str, name: str | None, days: int) -> str:
    """Keeps the table for a new StreamConsumer `name` (by default the table's own) of
    `namespace`; says what happens next."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    kept, manifest = importable(text, namespace, name, days, now)
    target = kept.consumer
    existing = _consumer(namespace, target)
    if existing is not None and (existing.get("status") or {}).get("term") is not None:
        raise CheckpointsError(
            f"{namespace}/{target} exists and has checkpoints of its own: delete it first "
            "(they are kept) or use `streamconsumer reset`"
        )
    found = _kept(namespace, target)
    if found is not None and not kept_for(found.metadata, target):
        raise CheckpointsError(f"ConfigMap {kept_checkpoints(target)} exists and is not ours")
    apply(
        k8s.CoreV1Api().patch_namespaced_config_map,
        manifest["metadata"]["name"],
        namespace,
        manifest,
        manager=CLI,
    )
    shards = len(kept.status.get("leases") or {})
    if existing is not None:
        when = "when the operator first loads it"
    else:
        when = f"if it is created before {kept.expires.isoformat()}"
    return (
        f"{shards} shards' checkpoints kept in ConfigMap {kept_checkpoints(target)}: "
        f"StreamConsumer {namespace}/{target} of the same stream resumes from them {when}"
    )


def importable(
    text: str, namespace: str, name: str | None, days: int, now: datetime.datetime
) -> tuple[KeptTable, dict[str, Any]]:
    """The table a file holds as it will be kept for `name` (by default its own) and the
    ConfigMap that keeps it; raises CheckpointsError for a file the operator would refuse
    to resume from, as it will read it. Reads nothing but `text`."""
    try:  # as the operator will resume from it: nobody's, and within bounds
        loaded = parsed(text)
        durable_from_status(loaded.status)
    except ValueError as error:  # KeptTableInvalid, TableOutOfBounds, pydantic's
        raise CheckpointsError(f"not an exported table: {error}") from None
    target = name or loaded.consumer
    kept = loaded.model_copy(
        update={
            "namespace": namespace,
            "consumer": target,
            "expires": now + datetime.timedelta(days=days),
        }
    )
    manifest = config_map(kept, kept_checkpoints(target))
    try:  # and as it will be written: an escape unescaped, a table past what inflates
        parsed(kept_data(manifest.get("data"), manifest.get("binaryData"))[TABLE_KEY])
    except ValueError as error:
        raise CheckpointsError(f"not a table the operator would read once kept: {error}") from None
    return kept, manifest
