"""The role a namespace's `roleArn` names, as the operator holds it: one Session per
role and region whatever the number of threads asking, credentials that call STS only
when first used, STS of the source's region (or botocore's AWS_ENDPOINT_URL_STS), and a
session name STS takes. The calls themselves: tests/integration/test_assumed_role.py."""

from __future__ import annotations

import gc
import re
import threading
import weakref

import pytest

from streamconsumer.controller.aws import assumed_role
from streamconsumer.controller.aws.access import AccessPolicy
from streamconsumer.controller.aws.assumed_role import (
    SESSION_NAME_LIMIT,
    Role,
    RoleSessions,
    own_identity,
    session_name,
    sts_clients,
)
from streamconsumer.models.resource import Source

ROLE = "arn:aws:iam::123456789012:role/streamconsumer-team-a"
STS_NAME = re.compile(r"^[\w+=,.@-]{2,64}$")


@pytest.fixture(autouse=True)
def own_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's own, from the environment (no instance metadata is asked), and
    STS nowhere: any call to it would fail the test."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAOPERATOR")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")
    monkeypatch.setattr(assumed_role, "SESSIONS", RoleSessions())


def source(region: str = "eu-west-1") -> Source:
    return Source.model_validate({"kinesis": {"streamName": "clicks", "region": region}})


def test_session_names_are_the_namespaces_within_sts_limits() -> None:
    assert session_name("team-a") == "streamconsumer-team-a"
    longest = [session_name("n" * 62 + last) for last in "ab"]
    assert all(len(name) <= SESSION_NAME_LIMIT and STS_NAME.match(name) for name in longest)
    assert longest[0] != longest[1], "cut names stay unique"
    assert STS_NAME.match(session_name("not/a:namespace"))


def test_one_session_per_role_and_region_for_every_client_and_thread() -> None:
    policy = AccessPolicy.model_validate(
        {"default": {"roleArn": ROLE}, "namespaces": {"team-x": {"roleArn": ROLE}}}
    )
    sessions: list[object] = []
    ready = threading.Barrier(8)

    def ask() -> None:
        ready.wait()
        sessions.append(policy.identity("team-a", source()))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(s) for s in sessions}) == 1, "one Session, so one refresh"
    first = sessions[0]
    assert policy.identity("team-a", source()) is first
    assert policy.identity("team-b", source()) is not first, "its own session name"
    assert policy.identity("team-a", source("us-east-1")) is not first, "its own STS"


def test_the_credentials_assume_the_role_when_first_used() -> None:
    """Made without a call to STS (which is nowhere): botocore's refreshing credentials,
    shared by every client of the Session."""
    session = assumed_role.SESSIONS.session(Role(ROLE, "ext", session_name("team-a")), "eu-west-1")
    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.method == "assume-role"
    assert session.client("kinesis").meta.region_name == "eu-west-1"
    assert session.get_credentials() is credentials


def test_sts_is_the_sources_region_unless_botocore_is_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = {"aws_access_key_id": "a", "aws_secret_access_key": "b"}
    told = sts_clients(own_identity(), "eu-west-1")("sts", **keys)
    assert told.meta.endpoint_url == "http://127.0.0.1:9"
    monkeypatch.delenv("AWS_ENDPOINT_URL_STS")
    monkeypatch.setenv("AWS_STS_REGIONAL_ENDPOINTS", "legacy")
    regional = sts_clients(own_identity(), "eu-west-1")("sts", **keys)
    assert regional.meta.endpoint_url == "https://sts.eu-west-1.amazonaws.com"
    assert regional.meta.config.read_timeout == 10, "calls that end in seconds"


def test_a_tenant_naming_ever_new_regions_cannot_grow_the_sessions_held() -> None:
    """Found by review: a Session was kept for good per role and region, and the region
    is the tenant's to write (any text, 64 characters): StreamConsumers created and
    deleted with ever new regions grew the operator by ~9 MB each (a Session's own
    botocore data once a client is made) until it ran out of memory, for every tenant."""
    policy = AccessPolicy.model_validate({"namespaces": {"team-a": {"roleArn": ROLE}}})
    held = weakref.WeakSet[object]()
    for index in range(600):
        held.add(policy.identity("team-a", source(f"zz-tenant-{index}")))
    gc.collect()
    assert len(held) <= 256, "the sessions no consumer holds are let go"
    first = policy.identity("team-a", source())
    assert policy.identity("team-a", source()) is first, "one Session while in use"


def test_a_cut_session_name_is_never_another_namespaces_whole_one() -> None:
    """Found by review: a 63-character namespace's cut name (prefix, '-', hash) was itself
    a valid 49-character namespace's whole name, so two namespaces could show one session
    name to STS and CloudTrail (where a role's trust policy may require it)."""
    long = "team-a-" + "x" * 56
    cut = session_name(long)
    lookalike = cut.removeprefix("streamconsumer-")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", lookalike) is None or (
        session_name(lookalike) != cut
    ), f"namespace {lookalike} would be named {cut} too"
