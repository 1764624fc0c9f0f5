"""Which streams and endpoints a namespace's StreamConsumers may have the operator call
AWS for (issue 24): by default none (issue 40); admins allow streams per namespace, or any
stream over AWS's own https endpoints for all (`allowAllNamespaces`). A refused source
sends nothing."""

from __future__ import annotations

import json
import os
import re

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError
from pydantic import ValidationError

from streamconsumer.controller.aws.access import (
    AccessPolicy,
    AccessRefused,
    AwsAccess,
    RefusedSource,
    guarded,
)
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.driver import failure
from streamconsumer.models.resource import Source
from streamconsumer.sources.aws import MAX_REMOTE_TEXT, NOT_AWS, aws_error
from streamconsumer.sources.factory import make_source
from streamconsumer.sources.registry import selected

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/team-a-clicks"


def kinesis(**fields: str) -> Source:
    """A Kinesis source; its endpointURL as given, even one the CRD would refuse (an
    object stored before the rule, or a CRD not yet upgraded)."""
    url = fields.pop("endpointURL", None)
    source = Source.model_validate({"kinesis": {"streamName": "clicks", **fields}})
    _, kinesis = selected(source)
    spec = kinesis.model_copy(update={"endpoint_url": url})
    return source.model_copy(update={"kinesis": spec})


ALL_NAMESPACES = AccessPolicy.model_validate({"allowAllNamespaces": True})
FAN_OUT = Source.model_validate({"kinesis": {"streamARN": ARN, "consumer": "fanOut"}})
TABLE_ARN = "arn:aws:dynamodb:eu-west-1:999999999999:table/orders/stream/2026-01-01T00:00:00.000"


def unconfigured_sources() -> list[tuple[Source, str]]:
    """A source of each spelling, and the pattern that would allow it."""
    table = Source.model_validate({"dynamodbStreams": {"tableName": "orders"}})
    table_arn = Source.model_validate({"dynamodbStreams": {"streamARN": TABLE_ARN}})
    return [(kinesis(), "clicks"), (FAN_OUT, ARN), (table, "orders"), (table_arn, TABLE_ARN)]


def test_with_nothing_configured_no_namespace_may_name_a_stream() -> None:
    """Issue 40: with the chart's defaults (`awsAccess: {}`, no STREAMCONSUMER_AWS_ACCESS)
    any namespace's StreamConsumer could name any stream, by name or by another account's
    ARN, fan-out included, and the operator listed and described it as itself."""
    policy = AccessPolicy()
    assert "STREAMCONSUMER_AWS_ACCESS" not in os.environ
    assert policy == OperatorConfig().aws_access
    for source, allowing in unconfigured_sources():
        refused = policy.refusal("team-a", source)
        assert refused is not None, source
        assert refused.startswith("no AWS access is configured for namespace team-a"), refused
        assert "is not one namespace" not in refused, "distinct from a pattern's refusal"
        assert f'{{"namespaces": {{"team-a": {{"streams": ["{allowing}"]}}}}}}' in refused
        assert "awsAccess.allowAllNamespaces: true" in refused
        assert "docs/security.md#aws-access" in refused
    assert policy.identity("team-a", kinesis()) is None


def test_the_refusal_says_what_an_admin_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The advice works as given: its JSON as the operator's setting allows the source
    (in that namespace only), and so does allowAllNamespaces."""
    for source, _ in unconfigured_sources():
        refused = AccessPolicy().refusal("team-a", source)
        assert refused is not None
        found = re.search(r"awsAccess: (\{.*?\]\}\}\})", refused)
        assert found is not None, refused
        assert "STREAMCONSUMER_AWS_ACCESS" in refused
        monkeypatch.setenv("STREAMCONSUMER_AWS_ACCESS", found.group(1))
        granted = OperatorConfig().aws_access
        assert granted.refusal("team-a", source) is None
        assert granted.refusal("team-b", source) is not None
        monkeypatch.setenv("STREAMCONSUMER_AWS_ACCESS", json.dumps({"allowAllNamespaces": True}))
        assert OperatorConfig().aws_access.refusal("team-b", source) is None


def test_a_consumer_refused_for_want_of_configuration_calls_nothing() -> None:
    made: list[Source] = []

    def make(source: Source, identity: object) -> object:
        made.append(source)
        return object()

    source = guarded(AccessPolicy(), "team-a", make)(kinesis())  # type: ignore[arg-type]
    assert isinstance(source, RefusedSource)
    with pytest.raises(AccessRefused):
        source.list_shards()
    assert made == []
    shown = failure(AccessRefused(source.reason), "listing shards", 30.0)
    assert shown.startswith("listing shards: no AWS access is configured for namespace team-a")


def test_allow_all_namespaces_is_one_value_and_not_a_second_default() -> None:
    assert ALL_NAMESPACES.access("anyone") == AwsAccess()
    entry = {"namespaces": {"team-a": {"streams": ["a-*"]}}, "allowAllNamespaces": True}
    both = AccessPolicy.model_validate(entry)
    assert both.refusal("team-a", kinesis()) is not None, "an entry still bounds its namespace"
    assert both.refusal("team-b", kinesis()) is None
    with pytest.raises(ValidationError, match="set one of the two"):
        AccessPolicy.model_validate({"default": {"streams": ["*"]}, "allowAllNamespaces": True})


def test_all_namespaces_get_aws_endpoints_only() -> None:
    policy = ALL_NAMESPACES
    assert policy.refusal("team-a", kinesis()) is None
    vpce = "https://vpce-0a1b-2c3d.kinesis.eu-west-1.vpce.amazonaws.com"
    assert policy.refusal("team-a", kinesis(endpointURL=vpce)) is None
    fips = "https://kinesis-fips.us-gov-west-1.amazonaws.com"
    assert policy.refusal("team-a", kinesis(endpointURL=fips)) is None
    arn = Source.model_validate({"kinesis": {"streamARN": ARN}})
    assert policy.refusal("team-a", arn) is None, "ARNs too"
    for url, reason in [
        # Found by review: urlsplit took the host after "@", urllib3 connected to the one
        # before the backslash, and the operator's signed request went there.
        ("https://127.0.0.1:8443\\@kinesis.us-east-1.amazonaws.com", "nothing else"),
        ("https://evil.example@kinesis.us-east-1.amazonaws.com", "nothing else"),
        ("https://kinesis.us-east-1.amazonaws.com?x=1", "nothing else"),
        # Hosts under amazonaws.com that a tenant controls (API Gateway, an S3 bucket).
        ("https://abc123.execute-api.us-east-1.amazonaws.com", "is not one"),
        ("https://kinesis.s3.us-east-1.amazonaws.com", "is not one"),
        ("https://internal.corp:8443/admin", "endpoint host internal.corp is not one"),
        ("https://169.254.169.254/latest", "endpoint host 169.254.169.254 is not one"),
        ("http://kinesis.eu-west-1.amazonaws.com", "endpointURL must be https://"),
        ("https://amazonaws.com.evil.example", "endpoint host amazonaws.com.evil.example"),
        ("https://[::1]:443", "nothing else"),
    ]:
        refused = policy.refusal("team-a", kinesis(endpointURL=url))
        assert refused is not None, url
        assert reason in refused, (url, refused)


def test_a_namespace_gets_only_the_streams_and_endpoints_its_entry_names() -> None:
    policy = AccessPolicy.model_validate(
        {
            "default": {"streams": []},
            "namespaces": {
                "team-a": {
                    "streams": ["team-a-*", "arn:aws:kinesis:eu-west-1:123456789012:stream/*"],
                    "endpoints": ["kinesis.internal:4567"],
                    "allowHttp": True,
                }
            },
        }
    )
    assert policy.refusal("team-a", kinesis(streamName="team-a-views")) is None
    refused = policy.refusal("team-a", kinesis(streamName="payments"))
    assert refused == "stream payments is not one namespace team-a may read"
    arn_source = Source.model_validate({"kinesis": {"streamARN": ARN}})
    assert policy.refusal("team-a", arn_source) is None
    elsewhere_arn = "arn:aws:kinesis:eu-west-1:999999999999:stream/team-a-clicks"
    refused_arn = policy.refusal(
        "team-a", Source.model_validate({"kinesis": {"streamARN": elsewhere_arn}})
    )
    assert refused_arn is not None, "a name pattern says nothing of another account's ARN"
    assert policy.refusal("team-b", arn_source) is not None, "no entry: the default"
    local = kinesis(streamName="team-a-x", endpointURL="http://kinesis.internal:4567")
    assert policy.refusal("team-a", local) is None
    elsewhere = kinesis(streamName="team-a-x", endpointURL="http://kinesis.internal:80")
    assert policy.refusal("team-a", elsewhere) is not None
    table = Source.model_validate({"dynamodbStreams": {"tableName": "orders"}})
    assert policy.refusal("team-a", table) == "table orders is not one namespace team-a may read"


def test_a_refused_source_calls_nothing() -> None:
    made: list[Source] = []

    def make(source: Source) -> object:
        made.append(source)
        return object()

    make_source = guarded(ALL_NAMESPACES, "team-a", make)  # type: ignore[arg-type]
    source = make_source(kinesis(endpointURL="https://internal.corp"))
    assert isinstance(source, RefusedSource)
    with pytest.raises(AccessRefused):
        source.list_shards()
    assert made == []
    assert "internal.corp is not one namespace team-a may use" in failure(
        AccessRefused(source.reason), "listing shards", 30.0
    )


def test_the_policy_comes_from_the_operators_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "STREAMCONSUMER_AWS_ACCESS",
        '{"namespaces": {"lab": {"endpoints": ["*"], "allowHttp": true}}}',
    )
    policy = OperatorConfig().aws_access
    assert policy.namespaces == {"lab": AwsAccess(endpoints=("*",), allow_http=True)}
    assert policy.default is None
    assert policy.refusal("lab", kinesis()) is None, "an entry without streams: any stream"
    assert policy.refusal("elsewhere", kinesis()) is not None


SECRET_WORD = "hunter2"
PAGE = "<html><body>admin console\n\x1b[31mpassword: hunter2</body></html>" + "x" * 5000


def test_an_endpoints_answer_is_shown_bounded_and_one_line_or_not_at_all() -> None:
    """The internal page (password and all) came back in Degraded and an Event."""
    answer = {"Error": {"Code": "Oops\n" + "C" * 500, "Message": PAGE}}
    code, message = aws_error(ClientError(answer, "ListShards"))  # type: ignore[arg-type]
    assert "\n" not in code + message
    assert "\x1b" not in message
    assert len(code) <= 64
    assert len(message) <= MAX_REMOTE_TEXT
    html = {"Error": {"Code": "400", "Message": PAGE}}  # botocore's reading of a non-AWS 400
    assert aws_error(ClientError(html, "ListShards")) == ("", f"HTTP 400: {NOT_AWS}")  # type: ignore[arg-type]
    unparsed = ResponseParserError(f"Unable to parse response, invalid XML received:\n{PAGE}")
    assert "hunter2" not in failure(unparsed, "listing shards", 30.0)
    assert len(failure(RuntimeError(PAGE), "listing shards", 30.0)) < MAX_REMOTE_TEXT + 20
    # Found by review: our own parse of an answer quoted it ("invalid literal for int()").
    parsed = ValueError(f"invalid literal for int() with base 10: '{SECRET_WORD}'")
    assert SECRET_WORD not in failure(parsed, "listing shards", 30.0)


# --- roleArn: the role the operator assumes for a namespace (docs/security.md#a-role-per-namespace)

ROLE = "arn:aws:iam::123456789012:role/streamconsumer-team-a"


@pytest.mark.parametrize(
    "arn",
    [
        ROLE,
        "arn:aws:iam::123456789012:role/teams/streamconsumer/team-a",  # with a path
        "arn:aws-cn:iam::123456789012:role/team-a",
        "arn:aws-us-gov:iam::123456789012:role/team+a=b,c.d@e_f-g",
        "arn:aws:iam::123456789012:role/" + "r" * 64,
    ],
)
def test_a_role_arn_is_an_iam_roles(arn: str) -> None:
    assert AwsAccess.model_validate({"roleArn": arn}).role_arn == arn


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:user/team-a",  # a user, not a role
        "arn:aws:sts::123456789012:assumed-role/team-a/session",
        "arn:aws:iam::12345678901:role/team-a",  # eleven digits
        "arn:aws:iam:eu-west-1:123456789012:role/team-a",  # IAM has no region
        "arn:aws:iam::123456789012:role/",
        "arn:aws:iam::123456789012:role/team a",
        "arn:aws:iam::123456789012:role/" + "r" * 65,
        "arn:aws:iam::123456789012:role/team-a\n",
        "arn:aws:iam::*:role/team-a",
        "team-a",
        "",
    ],
)
def test_anything_else_is_refused_as_a_role_arn(arn: str) -> None:
    with pytest.raises(ValidationError, match="roleArn"):
        AwsAccess.model_validate({"roleArn": arn})


def test_an_external_id_goes_with_a_role_and_sts_grammar() -> None:
    access = AwsAccess.model_validate({"roleArn": ROLE, "externalId": "team-a:7f3e/x"})
    assert access.external_id == "team-a:7f3e/x"
    with pytest.raises(ValidationError, match="externalId is only sent with a roleArn"):
        AwsAccess.model_validate({"externalId": "team-a"})
    for bad in ("x", "has space", "a" * 1225):
        with pytest.raises(ValidationError, match="externalId"):
            AwsAccess.model_validate({"roleArn": ROLE, "externalId": bad})


def test_without_a_role_the_operator_calls_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """No roleArn (the default): the source's clients are made as before, by boto3's
    own client (the process's identity), and no role is assumed."""
    made: list[tuple[Source, object]] = []

    def make(source: Source, identity: object) -> object:
        made.append((source, identity))
        return object()

    policy = AccessPolicy.model_validate(
        {"namespaces": {"team-a": {"roleArn": ROLE}}, "allowAllNamespaces": True}
    )
    assert AwsAccess().role_arn is None
    assert policy.identity("team-b", kinesis()) is None, "allowAllNamespaces names no role"
    guarded(policy, "team-b", make)(kinesis())  # type: ignore[arg-type]
    assert made == [(kinesis(), None)]

    clients: list[str] = []
    real = boto3.client

    def client(service: str, **options: object) -> object:
        clients.append(service)
        # A real client (it calls out only when asked to): the factory hooks it further.
        return real(service, region_name="us-east-1")  # type: ignore[call-overload]

    monkeypatch.setattr(boto3, "client", client)
    guarded(ALL_NAMESPACES, "team-a", make_source)(kinesis())
    assert clients == ["kinesis"]


def test_an_entry_replaces_the_default_role_and_all() -> None:
    policy = AccessPolicy.model_validate(
        {"default": {"roleArn": ROLE}, "namespaces": {"team-b": {"streams": ["b-*"]}}}
    )
    assert policy.access("team-c") == AwsAccess(role_arn=ROLE)
    assert policy.access("team-b") == AwsAccess(streams=("b-*",)), "no role"


def test_the_role_comes_from_the_operators_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "STREAMCONSUMER_AWS_ACCESS",
        f'{{"namespaces": {{"team-a": {{"roleArn": "{ROLE}", "externalId": "ext-1"}}}}}}',
    )
    access = OperatorConfig().aws_access.namespaces["team-a"]
    assert (access.role_arn, access.external_id) == (ROLE, "ext-1")
    monkeypatch.setenv("STREAMCONSUMER_AWS_ACCESS", '{"default": {"roleArn": "team-a"}}')
    with pytest.raises(ValidationError, match="roleArn"):
        OperatorConfig()
