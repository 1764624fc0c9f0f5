"""Which streams, tables and endpoints a namespace's StreamConsumers may have the operator
call with its own AWS identity (docs/security.md#aws-access).

The operator lists shards, probes backlogs and registers fan-out consumers for every
StreamConsumer, as itself: without a policy a tenant could point it at any stream its
role can read (another team's lag), use up a stream's fan-out slots, or make it send
signed requests to an internal URL. The default allows any stream name over AWS's own
endpoints (https, `*.amazonaws.com`) and no custom endpoint; platform admins widen it per
namespace in the operator's configuration (`STREAMCONSUMER_AWS_ACCESS`, the chart's
`awsAccess`), never tenants in their spec. A refused source costs no AWS call: its
listing fails with `AccessRefused`, shown in Degraded."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.models.resource import DynamoDBStreamsSource, KinesisSource, Source
from streamconsumer.sources.base import ShardReader, StreamSource
from streamconsumer.sources.registry import selected

# AWS's own endpoints, VPC interface endpoints included (vpce-*.kinesis.<region>.vpce...).
AWS_ENDPOINTS = ("*.amazonaws.com", "*.amazonaws.com.cn", "*.api.aws")


class _Settings(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class AwsAccess(_Settings):
    """What one namespace's StreamConsumers may name (`fnmatch` patterns)."""

    streams: tuple[str, ...] = Field(
        default=("*",),
        description="Kinesis stream and DynamoDB table names; a pattern starting with "
        "arn: matches the ARN a spec names instead.",
    )
    endpoints: tuple[str, ...] = Field(
        default=AWS_ENDPOINTS,
        description="Hosts (host or host:port) a custom endpointURL may name.",
    )
    allow_http: bool = Field(default=False, description="Plain-HTTP endpoints (test beds).")


class AccessPolicy(_Settings):
    default: AwsAccess = AwsAccess()
    namespaces: dict[str, AwsAccess] = Field(default_factory=dict)

    def refusal(self, namespace: str, source: Source) -> str | None:
        """Why the operator must not call AWS for this source; None if it may."""
        access = self.namespaces.get(namespace, self.default)
        _, spec = selected(source)
        assert isinstance(spec, KinesisSource | DynamoDBStreamsSource)
        names = _names(spec)
        if not any(_matches(pattern, names) for pattern in access.streams):
            what = "table" if isinstance(spec, DynamoDBStreamsSource) else "stream"
            return f"{what} {names[0]} is not one namespace {namespace} may read"
        if spec.endpoint_url is not None:
            return _endpoint_refusal(spec.endpoint_url, access, namespace)
        return None


def _names(spec: KinesisSource | DynamoDBStreamsSource) -> tuple[str, str | None]:
    """The stream's (or table's) name, and the ARN the spec names, if any."""
    if isinstance(spec, KinesisSource):
        arn = spec.stream_arn
        return (spec.stream_name or str(arn).rsplit("/", 1)[-1]), arn
    arn = spec.stream_arn
    return (spec.table_name or str(arn).split(":table/", 1)[-1].split("/", 1)[0]), arn


def _matches(pattern: str, names: tuple[str, str | None]) -> bool:
    name, arn = names
    if pattern.startswith("arn:"):
        return arn is not None and fnmatch.fnmatchcase(arn, pattern)
    return fnmatch.fnmatchcase(name, pattern)


def _endpoint_refusal(url: str, access: AwsAccess, namespace: str) -> str | None:
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or ""), parts.port
    except ValueError:
        return "endpointURL is not a URL"
    if parts.scheme != "https" and not (parts.scheme == "http" and access.allow_http):
        return "endpointURL must be https://"
    named = [host] + ([f"{host}:{port}"] if port is not None else [])
    if not any(fnmatch.fnmatchcase(n, p) for p in access.endpoints for n in named):
        # The host only: never more of what the spec wrote than needed to find it.
        return f"endpoint host {host[:253]} is not one namespace {namespace} may use"
    return None


class AccessRefused(Exception):
    """The access policy refuses this source; nothing was sent."""


class RefusedSource:
    """The StreamSource of a refused spec: every call fails at once, without I/O."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def list_shards(self) -> list[Shard]:
        raise AccessRefused(self.reason)

    def open_reader(self, shard_id: str, start: StartPosition) -> ShardReader:
        raise AccessRefused(self.reason)

    def backlog(self, shard_id: str, start: StartPosition) -> int | None:
        raise AccessRefused(self.reason)


def guarded(
    policy: AccessPolicy, namespace: str, make_source: Callable[[Source], StreamSource]
) -> Callable[[Source], StreamSource]:
    """`make_source` for one namespace, under the policy."""

    def make(source: Source) -> StreamSource:
        reason = policy.refusal(namespace, source)
        return make_source(source) if reason is None else RefusedSource(reason)

    return make
