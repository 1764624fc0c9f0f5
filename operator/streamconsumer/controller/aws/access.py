"""Which streams, tables and endpoints a namespace's StreamConsumers may have the operator
call with its own AWS identity (docs/security.md#aws-access).

The operator lists shards, probes backlogs and registers fan-out consumers for every
StreamConsumer, as itself: without a policy a tenant could point it at any stream its
role can read (another team's lag), use up a stream's fan-out slots, or make it send
signed requests to an internal URL. So by default no namespace may name any stream:
platform admins allow streams per namespace (or for all, `default`) in the operator's
configuration (`STREAMCONSUMER_AWS_ACCESS`, the chart's `awsAccess`), never tenants in
their spec; a single-tenant cluster opts in with `allowAllNamespaces` (any stream over
AWS's own https endpoints). A refused source costs no AWS call: its listing fails with
`AccessRefused`, shown in Degraded, which says what an admin must configure. An entry may
also name an IAM role the operator assumes for that namespace's calls (`roleArn`,
`controller/aws/assumed_role.py`)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from streamconsumer.controller.aws import assumed_role
from streamconsumer.controller.aws.assumed_role import (
    EXTERNAL_ID_PATTERN,
    ROLE_ARN_PATTERN,
    Role,
    session_name,
)
from streamconsumer.core.lineage import Shard
from streamconsumer.models.api import StartPosition
from streamconsumer.models.base import ENDPOINT_URL_PATTERN
from streamconsumer.models.resource import Source
from streamconsumer.models.source import AwsStreamSource
from streamconsumer.sources.base import Identity, ShardReader, StreamSource
from streamconsumer.sources.kind import Access
from streamconsumer.sources.registry import selected

# In `endpoints`: AWS's own endpoints of the services a kind names (`Access.services`),
# FIPS, dual-stack and VPC interface endpoints included. Not a host pattern:
# `*.amazonaws.com` would also take API Gateway, S3 buckets and other hosts a tenant
# controls.
AWS = "aws"


def aws_host(services: tuple[str, ...]) -> re.Pattern[str]:
    """AWS's own host names of these services (host labels such as "kinesis")."""
    service = "(" + "|".join(re.escape(name) for name in services) + ")(-fips)?"
    return re.compile(
        rf"^({service}\.[a-z0-9-]+\.(amazonaws\.com|amazonaws\.com\.cn|api\.aws)"
        rf"|vpce-[a-z0-9-]+\.{service}\.[a-z0-9-]+\.vpce\.amazonaws\.com(\.cn)?)$"
    )


_ENDPOINT = re.compile(ENDPOINT_URL_PATTERN)


class _Settings(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class AwsAccess(_Settings):
    """What one namespace's StreamConsumers may name (`fnmatch` patterns)."""

    streams: tuple[str, ...] = Field(
        default=("*", "arn:*"),
        description="Kinesis stream and DynamoDB table names a spec names by name; "
        "patterns starting with arn: match the ARNs a spec names by ARN (account and "
        "region included).",
    )
    endpoints: tuple[str, ...] = Field(
        default=(AWS,),
        description='Hosts (host or host:port) a custom endpointURL may name; "aws" '
        "stands for AWS's own endpoints of the stream's service (Kinesis, DynamoDB).",
    )
    allow_http: bool = Field(default=False, description="Plain-HTTP endpoints (test beds).")
    role_arn: str | None = Field(
        default=None,
        pattern=ROLE_ARN_PATTERN,
        description="An IAM role the operator assumes (STS AssumeRole) for its own calls "
        "for these StreamConsumers; none: the operator's own identity.",
    )
    external_id: str | None = Field(
        default=None,
        pattern=EXTERNAL_ID_PATTERN,
        description="The ExternalId the role's trust policy asks for, if any.",
    )

    @model_validator(mode="after")
    def _external_id_needs_a_role(self) -> AwsAccess:
        if self.external_id is not None and self.role_arn is None:
            raise ValueError("externalId is only sent with a roleArn")
        return self


# What `allowAllNamespaces` gives a namespace without an entry: an entry's own defaults.
_ANY_STREAM = AwsAccess()


class AccessPolicy(_Settings):
    """Secure by default: a namespace with no entry, when there is no `default` either,
    may name no stream (docs/security.md#aws-access)."""

    default: AwsAccess | None = Field(
        default=None, description="What namespaces without an entry may name; none: nothing."
    )
    namespaces: dict[str, AwsAccess] = Field(default_factory=dict)
    allow_all_namespaces: bool = Field(
        default=False,
        description="Namespaces without an entry may name any stream (by name or ARN) "
        "over AWS's own https endpoints, as the operator: single-tenant clusters.",
    )

    @model_validator(mode="after")
    def _one_rule_for_the_rest(self) -> AccessPolicy:
        if self.allow_all_namespaces and self.default is not None:
            raise ValueError(
                "allowAllNamespaces gives namespaces without an entry any stream, and "
                "default gives them its own: set one of the two"
            )
        return self

    def access(self, namespace: str) -> AwsAccess | None:
        """The namespace's entry, else the default (never a mix of the two); None when
        nothing is configured for it."""
        entry = self.namespaces.get(namespace, self.default)
        return _ANY_STREAM if entry is None and self.allow_all_namespaces else entry

    def refusal(self, namespace: str, source: Source) -> str | None:
        """Why the operator must not call AWS for this source; None if it may."""
        access = self.access(namespace)
        kind, spec = selected(source)
        if kind.access is None:  # a kind that calls no AWS: nothing to allow
            return None
        names = kind.access.names(spec)
        if access is None:
            return _unconfigured(namespace, names)
        if not any(_matches(pattern, names) for pattern in access.streams):
            return f"{kind.access.noun} {names[0]} is not one namespace {namespace} may read"
        if isinstance(spec, AwsStreamSource) and spec.endpoint_url is not None:
            return _endpoint_refusal(spec.endpoint_url, access, namespace, kind.access)
        return None

    def identity(self, namespace: str, source: Source) -> Identity:
        """Whom the operator calls AWS as for this source: the namespace's role, in the
        source's region; None for its own identity (no roleArn, or a kind that calls no
        AWS)."""
        access = self.access(namespace)
        _, spec = selected(source)
        if access is None or access.role_arn is None or not isinstance(spec, AwsStreamSource):
            return None
        role = Role(access.role_arn, access.external_id, session_name(namespace))
        return assumed_role.SESSIONS.session(role, spec.region)


def _unconfigured(namespace: str, names: tuple[str, str | None]) -> str:
    """The refusal when no access is configured for the namespace: what an admin sets to
    allow this stream (by the name or ARN the spec gives), or every one."""
    name, arn = names
    grant = {"namespaces": {namespace: {"streams": [arn or name]}}}
    return (
        f"no AWS access is configured for namespace {namespace}, so the operator calls AWS "
        "for none of its StreamConsumers. An admin allows this one with the chart value "
        f"awsAccess: {json.dumps(grant)} (the operator's STREAMCONSUMER_AWS_ACCESS), or, "
        "on a single-tenant cluster, any stream in every namespace with "
        "awsAccess.allowAllNamespaces: true (docs/security.md#aws-access)"
    )


def _matches(pattern: str, names: tuple[str, str | None]) -> bool:
    """A spec naming its stream by ARN is matched by arn: patterns only: the name's
    pattern says nothing of the account or region an ARN points into."""
    name, arn = names
    if arn is not None:
        return pattern.startswith("arn:") and fnmatch.fnmatchcase(arn, pattern)
    return not pattern.startswith("arn:") and fnmatch.fnmatchcase(name, pattern)


def _endpoint_refusal(
    url: str, access: AwsAccess, namespace: str, kind: Access[BaseModel]
) -> str | None:
    if not _ENDPOINT.match(url):  # as the CRD says; a spec from before it may differ
        return "endpointURL must be scheme://host[:port][/path], nothing else"
    parts = urlsplit(url)
    host, port = (parts.hostname or ""), parts.port
    if parts.scheme != "https" and not (parts.scheme == "http" and access.allow_http):
        return "endpointURL must be https://"
    named = [host] + ([f"{host}:{port}"] if port is not None else [])
    own = aws_host(kind.services)

    def allows(pattern: str, name: str) -> bool:
        return bool(own.match(name)) if pattern == AWS else fnmatch.fnmatchcase(name, pattern)

    if not any(allows(p, n) for p in access.endpoints for n in named):
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

    def incarnation(self) -> str | None:
        raise AccessRefused(self.reason)


def guarded(
    policy: AccessPolicy,
    namespace: str,
    make_source: Callable[[Source, Identity], StreamSource],
) -> Callable[[Source], StreamSource]:
    """`make_source` for one namespace, under the policy, as the namespace's identity."""

    def make(source: Source) -> StreamSource:
        reason = policy.refusal(namespace, source)
        if reason is not None:
            return RefusedSource(reason)
        return make_source(source, policy.identity(namespace, source))

    return make
