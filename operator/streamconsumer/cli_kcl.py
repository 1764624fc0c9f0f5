"""`streamconsumer checkpoints import --from-kcl-table TABLE --for consumer.yaml`: a KCL
application's lease table (DynamoDB) kept as the checkpoints the StreamConsumer of that
manifest starts from (docs/migrating-from-kcl.md). The table is read twice, some
seconds apart: a lease whose counter moved is held by a KCL worker still running.

Reads with your own AWS credentials and configuration (the DynamoDB endpoint too:
`AWS_ENDPOINT_URL_DYNAMODB`); the stream as the manifest's `spec.source` names it."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import boto3
import yaml
from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from streamconsumer.cli_checkpoints import CheckpointsError
from streamconsumer.core import kcl_leases
from streamconsumer.core.kcl_leases import KclTableRefused
from streamconsumer.models.base import first_error
from streamconsumer.models.kept import STREAM, KeptTable
from streamconsumer.models.resource import StreamConsumerSpec
from streamconsumer.sources.aws import aws_error
from streamconsumer.sources.factory import make_source
from streamconsumer.sources.registry import selected

WATCH_SECONDS = 12.0  # KCL renews every third of failoverTimeMillis (10 s by default)
MAX_MANIFEST_BYTES = 1024 * 1024


class Declared(NamedTuple):
    """The StreamConsumer a manifest declares."""

    name: str
    spec: StreamConsumerSpec
    namespace: str | None  # as metadata says, if it does


def consumer_of(text: str) -> Declared:
    """The StreamConsumer a manifest declares: its name, spec and namespace."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise CheckpointsError("the manifest is larger than 1 MiB")
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CheckpointsError(f"the manifest is not YAML: {error}") from None
    if not isinstance(body, dict) or body.get("kind") != "StreamConsumer":
        raise CheckpointsError("the manifest is not one StreamConsumer")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise CheckpointsError("the manifest's metadata is not a mapping")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise CheckpointsError("the manifest's StreamConsumer has no metadata.name")
    try:
        spec = StreamConsumerSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        raise CheckpointsError(f"the manifest's spec.{first_error(error)}") from None
    namespace = metadata.get("namespace")
    return Declared(name, spec, str(namespace) if namespace else None)


def scanned(client: Any, table: str) -> Iterator[dict[str, Any]]:
    """The table's items, deserialized; no more than kcl_leases.MAX_KCL_ITEMS + 1."""
    deserializer = TypeDeserializer()
    count = 0
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            yield {key: deserializer.deserialize(value) for key, value in item.items()}
            count += 1
            if count > kcl_leases.MAX_KCL_ITEMS:
                return


def stream_name(spec: StreamConsumerSpec) -> str:
    """The name KCL's multi-stream keys carry: the stream's (or the table's)."""
    kind, source = selected(spec.source)
    if kind.access is None:
        raise CheckpointsError(f"a {kind.title} stream has no KCL lease tables to import")
    return kind.access.names(source)[0]


def kcl_table(
    table: str,
    manifest: str,
    namespace: str,
    days: int,
    at_timestamp: datetime.datetime | None = None,
    watch_seconds: float = WATCH_SECONDS,
    say: Callable[[str], None] = print,
) -> tuple[str, str]:
    """The kept table (exported JSON, as `checkpoints import` takes it) the manifest's
    consumer starts from, and its name; raises CheckpointsError with what to do."""
    name, spec, _ = consumer_of(manifest)
    named = stream_name(spec)
    region = getattr(selected(spec.source)[1], "region", None)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    try:
        dynamodb = boto3.client("dynamodb", region_name=region)
        stream = make_source(spec.source)
        before = kcl_leases.of_stream(scanned(dynamodb, table), named)
        say(
            f"{len(before)} leases of {named} in {table}; watching them "
            f"{watch_seconds:.0f} s for a KCL worker still renewing them"
        )
        time.sleep(watch_seconds)
        after = kcl_leases.of_stream(scanned(dynamodb, table), named)
        renewed = kcl_leases.held(before, after)
        if renewed:
            owners = sorted({lease.owner or "?" for lease in renewed})
            raise CheckpointsError(
                f"{len(renewed)} leases are held by KCL workers still running "
                f"({', '.join(owners[:3])}): stop the KCL application first"
            )
        shards = stream.list_shards()
        aggregate_at = getattr(stream, "aggregate_at", None)  # Kinesis: KPL aggregates
        if aggregate_at is not None:
            say(f"reading the record at each of {len(after)} checkpoints (KPL aggregates)")
        status = kcl_leases.durable_status(after, shards, now, aggregate_at, at_timestamp)
        incarnation = stream.incarnation()
    except KclTableRefused as error:
        raise CheckpointsError(f"KCL table {table}: {error}") from None
    except (ClientError, BotoCoreError, LookupError) as error:
        raise CheckpointsError(f"KCL table {table}: {_said(error)}") from None
    if incarnation is not None:
        status[STREAM] = incarnation
    kept = KeptTable(
        namespace=namespace,
        consumer=name,
        source=spec.source,
        created=now,
        taken=now,
        expires=now + datetime.timedelta(days=days),
        drained=False,  # KCL may have processed past its last checkpoints: replayed
        status=status,
    )
    return kept.model_dump_json(by_alias=True), name


def _said(error: Exception) -> str:
    code, message = aws_error(error)
    return f"{code}: {message}" if code else message
