"""A namespace's `roleArn` (docs/security.md#a-role-per-namespace), across real HTTP:
moto's STS (checking the operator's own signature and IAM policy) hands out the role's
credentials, and a forwarder in front of the Kinesis emulator notes which access key
signed each of the operator's calls: the role's for a namespace that names one, the
operator's own for one that does not; a refused AssumeRole fails the listing with STS's
bounded words, and nothing reaches Kinesis."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core import enable_iam_authentication
from moto.sts.models import AssumedRole, sts_backends

from streamconsumer.controller.aws import assumed_role, fanout
from streamconsumer.controller.aws.access import AccessPolicy, AwsAccess, guarded
from streamconsumer.controller.consumer.driver import failure
from streamconsumer.models.api import StartPosition, StartPositionType
from streamconsumer.models.resource import Source
from streamconsumer.sources.factory import make_source
from streamconsumer.sources.kinds.kinesis import ERRORS
from streamconsumer.sources.kinesis_consumer import consumer_name
from testbed.kinesis import REGION, KinesisEmulator, create_stream
from testbed.moto import InProcessMoto
from testbed.wiretap import Wiretap

ACCOUNT = "123456789012"  # moto's
OPERATOR = "streamconsumer-operator"
TEAM_A_ROLE = f"arn:aws:iam::{ACCOUNT}:role/streamconsumer/team-a-reader"
TEAM_C_ROLE = f"arn:aws:iam::{ACCOUNT}:role/team-c-reader"  # the operator may not assume it
EXTERNAL_ID = "team-a-7f3e"
TRIM_HORIZON = StartPosition(type=StartPositionType.TRIM_HORIZON)
OPEN = {"endpoints": ("*",), "allow_http": True}
POLICY = AccessPolicy(
    default=AwsAccess(**OPEN),
    namespaces={
        "team-a": AwsAccess(**OPEN, role_arn=TEAM_A_ROLE, external_id=EXTERNAL_ID),
        "team-c": AwsAccess(**OPEN, role_arn=TEAM_C_ROLE),
    },
)


@dataclass(frozen=True)
class Operator:
    access_key: str
    secret_key: str


@pytest.fixture(scope="module")
def moto() -> Iterator[InProcessMoto]:
    server = InProcessMoto.start()
    yield server
    server.stop()


@pytest.fixture
def operator(moto: InProcessMoto, monkeypatch: pytest.MonkeyPatch) -> Iterator[Operator]:
    """The operator's own identity: an IAM user of moto's that may assume team-a's role
    and nothing else, its keys in the environment, STS at moto (botocore's
    AWS_ENDPOINT_URL_STS), moto checking signatures and IAM policies; no session made
    before (boto3's default one included) that could hold other credentials."""
    iam = moto.client("iam")
    iam.create_user(UserName=OPERATOR)
    key = iam.create_access_key(UserName=OPERATOR)["AccessKey"]
    allow = {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": TEAM_A_ROLE}
    iam.put_user_policy(
        UserName=OPERATOR,
        PolicyName="assume-team-a",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [allow]}),
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.endpoint_url)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setattr(assumed_role, "SESSIONS", assumed_role.RoleSessions())
    try:
        with enable_iam_authentication():
            yield Operator(key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        iam.delete_user_policy(UserName=OPERATOR, PolicyName="assume-team-a")
        iam.delete_access_key(UserName=OPERATOR, AccessKeyId=key["AccessKeyId"])
        iam.delete_user(UserName=OPERATOR)


@pytest.fixture
def wiretap(kinesis: KinesisEmulator) -> Iterator[Wiretap]:
    with Wiretap(kinesis.port) as tap:
        yield tap


def assumed(role_arn: str) -> list[AssumedRole]:
    """moto's record of the AssumeRole calls it answered for `role_arn`."""
    return [r for r in sts_backends[ACCOUNT]["aws"].assumed_roles if r.role_arn == role_arn]


def kinesis_source(stream: str, wiretap: Wiretap, **fields: str) -> Source:
    where = {"region": REGION, "endpointURL": wiretap.endpoint_url}
    return Source.model_validate({"kinesis": {"streamName": stream, **where, **fields}})


def test_a_namespace_with_a_role_calls_kinesis_as_that_role(
    kinesis: KinesisEmulator,
    stream_name: str,
    operator: Operator,
    wiretap: Wiretap,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_stream(kinesis.client, stream_name, shards=2)
    caplog.set_level(logging.DEBUG)  # botocore's too: every request and answer
    before = len(assumed(TEAM_A_ROLE))
    lister = guarded(POLICY, "team-a", make_source)(kinesis_source(stream_name, wiretap))
    shards = lister.list_shards()
    assert len(shards) == 2
    assert lister.backlog(shards[0].id, TRIM_HORIZON) is None  # GetShardIterator, GetRecords
    arn = asyncio.run(
        fanout.register(
            POLICY, "team-a", "clicks", kinesis_source(stream_name, wiretap, consumer="fanOut")
        )
    )
    assert arn is not None

    roles = assumed(TEAM_A_ROLE)[before:]
    assert len(roles) == 1, "one AssumeRole, shared by the lister's and fan-out's clients"
    (role,) = roles
    assert (role.session_name, role.external_id) == ("streamconsumer-team-a", EXTERNAL_ID)
    targets = {signed.target.rsplit(".", 1)[-1] for signed in wiretap.seen}
    assert {"ListShards", "GetShardIterator", "GetRecords", "RegisterStreamConsumer"} <= targets
    assert wiretap.signers() == {role.access_key_id}, "every call signed with the role's key"
    assert operator.access_key not in wiretap.signers()
    assert role.secret_access_key not in caplog.text, "the role's secret never logged"
    assert operator.secret_key not in caplog.text
    kinesis.client.deregister_stream_consumer(
        StreamARN=arn.split("/consumer/")[0], ConsumerName=consumer_name("team-a", "clicks")
    )


def test_a_namespace_without_a_role_calls_as_the_operator(
    kinesis: KinesisEmulator, stream_name: str, operator: Operator, wiretap: Wiretap
) -> None:
    create_stream(kinesis.client, stream_name, shards=1)
    before = len(sts_backends[ACCOUNT]["aws"].assumed_roles)
    lister = guarded(POLICY, "team-b", make_source)(kinesis_source(stream_name, wiretap))
    assert len(lister.list_shards()) == 1
    assert wiretap.signers() == {operator.access_key}
    assert len(sts_backends[ACCOUNT]["aws"].assumed_roles) == before, "no AssumeRole"


def test_a_refused_role_fails_the_listing_with_sts_words_and_calls_nothing(
    kinesis: KinesisEmulator, stream_name: str, operator: Operator, wiretap: Wiretap
) -> None:
    create_stream(kinesis.client, stream_name, shards=1)
    lister = guarded(POLICY, "team-c", make_source)(kinesis_source(stream_name, wiretap))
    with pytest.raises(ClientError, match="AccessDenied") as refused:
        lister.list_shards()
    degraded = failure(refused.value, "listing shards", 30.0, ERRORS)
    assert degraded.startswith("listing shards: AccessDenied: "), degraded
    assert "is not authorized to perform: sts:AssumeRole" in degraded
    assert "roleArn must trust the operator's role" in degraded, "the advice for a roleArn"
    assert operator.secret_key not in degraded
    assert "\n" not in degraded
    assert len(degraded) < 500
    assert wiretap.seen == [], "nothing reached Kinesis"
    assert assumed(TEAM_C_ROLE) == []
