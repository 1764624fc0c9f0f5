"""The worker API's answers where the apiserver or the operator is not ready: 503 with
Retry-After (come back) versus 4xx (stop), TokenReview's audience and cache; and bad
input from a worker, refused in JSON before anything changes (issue 22)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from multidict import CIMultiDictProxy

from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api.answers import Reply, admit
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.auth import (
    AUDIENCE,
    KubePodOwners,
    ReviewBudget,
    ReviewUnavailable,
    TokenReviewer,
    TooManyReviews,
    WorkerOf,
)
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.core.leases import ACTIVE, ShardLease
from streamconsumer.core.lineage import SHARD_END, Shard
from streamconsumer.models import HeartbeatRequest
from streamconsumer.models.api import (
    MAX_MILLIS_BEHIND,
    MIN_HEARTBEAT_BYTES,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
    heartbeat_body_limit,
)
from testbed.specs import consumer_spec
from testbed.tokens import token

from .fenced import fenced_consumer
from .moments import CREATED
from .worker_heartbeat import heartbeat_answer

WORKER = Caller(
    "n", "c-worker", pod_name="w", pod_uid="u", consumer="c", consumer_account="c-worker"
)
NOTE = {"action": "skip", "firstSequence": "1", "lastSequence": "2", "count": 2, "error": "e"}


class Accepting:
    async def review(self, token: str, source: str = "") -> Caller | None:
        return WORKER


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_unknown_consumer_is_503_while_the_operator_starts_then_404() -> None:
    clock = Clock()
    registry = Registry(clock, startup_grace=30.0)
    registry.leading()
    api = WorkerApi(registry, Accepting(), clock)
    assert heartbeat_answer(api) == (503, "1"), "right after start: maybe not loaded yet"
    clock.now += 31
    assert heartbeat_answer(api)[0] == 404, "well after start: not ours"
    registry.loading("n", "c")
    assert heartbeat_answer(api) == (503, "1"), "being loaded"


def test_a_standby_answers_come_back_later_without_reviewing_the_token() -> None:
    class Refusing:
        async def review(self, token: str, source: str = "") -> Caller | None:
            raise AssertionError("a standby must not review tokens")

    clock = Clock()
    leads = [False]
    api = WorkerApi(Registry(clock, startup_grace=0.0), Refusing(), clock, lambda: leads[0])
    assert heartbeat_answer(api) == (503, "1")


def test_a_promoted_standby_counts_its_grace_from_when_it_leads() -> None:
    """Issue 22.9: the grace counted from process start, so a standby promoted after
    30 s answered 404 to every worker while kopf was still loading the consumers."""
    clock = Clock()
    registry = Registry(clock, startup_grace=30.0)
    api = WorkerApi(registry, Accepting(), clock)
    clock.now += 600  # a standby for ten minutes
    registry.leading()
    assert heartbeat_answer(api) == (503, "1"), "just promoted: come back"
    clock.now += 31
    assert heartbeat_answer(api)[0] == 404


def test_a_consumer_whose_fence_has_not_landed_is_503() -> None:
    """Issue 22.1: a new term answers nobody from the status it only read."""
    from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings
    from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
    from streamconsumer.controller.leases.state import DurableState

    from .moments import CREATED

    spec = consumer_spec()
    clock = Clock()
    registry = Registry(clock, startup_grace=0.0)
    registry.leading()
    loop = ConsumerLoop(
        "c",
        LeaseCoordinator(spec, DurableState(), clock(), created=CREATED),
        LoopSettings(),
        lambda: 1,
    )

    async def call() -> tuple[int, int]:
        registry.add(ManagedConsumer("n", "c", loop))
        api = WorkerApi(registry, Accepting(), clock)
        async with TestClient(TestServer(api.app())) as client:
            statuses = []
            for _ in range(2):
                response = await client.post(
                    "/v1/namespaces/n/streamconsumers/c/heartbeat",
                    json={"worker": "w"},
                    headers={"Authorization": "Bearer t"},
                )
                statuses.append(response.status)
                if fence := loop.write_due(clock()):  # due at once, unchanged or not
                    loop.write_succeeded(fence, clock())
            return statuses[0], statuses[1]

    assert asyncio.run(call()) == (503, 200)


def test_a_replica_that_does_not_lead_closes_keep_alive_connections() -> None:
    """Issue 22.2: a Service keeps established connections where they are, so a worker
    kept talking to a deposed replica; it must reconnect (to the leader)."""
    clock = Clock()
    api = WorkerApi(Registry(clock), Accepting(), clock, lambda: False)

    async def call() -> str | None:
        async with TestClient(TestServer(api.app())) as client:
            response = await client.post(
                "/v1/namespaces/n/streamconsumers/c/heartbeat",
                json={"worker": "w"},
                headers={"Authorization": "Bearer t"},
            )
            assert response.status == 503
            return response.headers.get("Connection")

    assert asyncio.run(call()) == "close"


class OwnedBy:
    """The owner of the pod named in a token (consumer c's worker w, uid u, by default)."""

    def __init__(self, consumer: str | None = "c") -> None:
        self.consumer = consumer

    def consumer_of(self, namespace: str, pod_name: str, pod_uid: str) -> WorkerOf | None:
        if self.consumer is None or (namespace, pod_name, pod_uid) != ("n", "w", "u"):
            return None
        return WorkerOf(self.consumer, f"{self.consumer}-worker")


class FakeAuthentication:
    """AuthenticationV1Api.create_token_review, answering from a list."""

    def __init__(self, answers: list[k8s.V1TokenReviewStatus]) -> None:
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    def create_token_review(self, body: k8s.V1TokenReview, **kwargs: Any) -> k8s.V1TokenReview:
        self.calls.append(kwargs)
        return k8s.V1TokenReview(spec=body.spec, status=self.answers.pop(0))


def reviewed(audiences: list[str], authenticated: bool = True) -> k8s.V1TokenReviewStatus:
    return k8s.V1TokenReviewStatus(
        authenticated=authenticated,
        audiences=audiences,
        user=k8s.V1UserInfo(
            username="system:serviceaccount:n:c-worker",
            extra={
                "authentication.kubernetes.io/pod-name": ["w"],
                "authentication.kubernetes.io/pod-uid": ["u"],
            },
        ),
    )


class Ticking:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reviewer(
    answers: list[k8s.V1TokenReviewStatus], clock: Ticking | None = None
) -> tuple[TokenReviewer, FakeAuthentication]:
    fake = FakeAuthentication(answers)
    tokens = TokenReviewer(fake, OwnedBy(), timeout=2.5, clock=clock or Ticking())  # type: ignore[arg-type]
    return tokens, fake


def test_a_refusal_is_remembered_briefly_and_an_acceptance_longer() -> None:
    clock = Ticking()
    tokens, fake = reviewer(
        [reviewed([AUDIENCE], authenticated=False), reviewed([AUDIENCE]), reviewed([AUDIENCE])],
        clock,
    )
    t = token()
    assert asyncio.run(tokens.review(t)) is None
    clock.now = 1.0
    assert asyncio.run(tokens.review(t)) is None, "a repeated refusal costs no review"
    clock.now = 2.5
    assert asyncio.run(tokens.review(t)) == WORKER, "asked again: the pod may be new"
    clock.now = 20.0
    assert asyncio.run(tokens.review(t)) == WORKER
    assert len(fake.calls) == 2, "an acceptance is remembered"
    assert fake.calls[0] == {"_request_timeout": 2.5}


def test_an_acceptance_is_remembered_for_minutes_never_past_the_tokens_expiry() -> None:
    """bench-many: remembered 30 s, 400 workers' tokens needed 13 reviews a second, more
    than a loaded apiserver answered, and most calls were turned away (503, 429)."""
    clock = Ticking()
    tokens, fake = reviewer([reviewed([AUDIENCE])] * 3, clock)
    lasting = token()
    assert asyncio.run(tokens.review(lasting)) == WORKER
    clock.now = 100.0
    assert asyncio.run(tokens.review(lasting)) == WORKER
    assert len(fake.calls) == 1, "as the apiserver's webhook token cache: 2 minutes"
    clock.now = 121.0
    assert asyncio.run(tokens.review(lasting)) == WORKER
    assert len(fake.calls) == 2, "then reviewed again"
    expiring = token(jti="expiring", exp=time.time() + 5)
    assert asyncio.run(tokens.review(expiring)) == WORKER
    tokens.wall_clock = lambda: time.time() + 120  # past its expiry and the clock skew
    clock.now = 125.0
    assert asyncio.run(tokens.review(expiring)) is None, "expired: never from the cache"
    assert len(fake.calls) == 3


def test_a_token_not_meant_for_us_is_refused() -> None:
    """An authenticator that ignores audiences returns none of ours: refuse."""
    tokens, _ = reviewer([reviewed(["https://kubernetes.default.svc"]), reviewed([])])
    assert asyncio.run(tokens.review(token())) is None
    assert asyncio.run(tokens.review(token(jti="other"))) is None


JUNK = [
    "t",
    "a.b.c",
    "x" * 20_000,
    token(aud=["https://kubernetes.default.svc"]),
    token(aud="someone-else"),
    token(exp=time.time() - 3600),
    token(exp="tomorrow"),
    token(sub="system:node:worker-1"),
    token(sub="alice"),
    "eyJhbGciOiJSUzI1NiJ9." + "W" * 100 + ".c2ln",  # not JSON
    "eyJhbGciOiJSUzI1NiJ9." + base64.urlsafe_b64encode(b"[" * 2000).decode() + ".c2ln",
]


def test_junk_tokens_cost_no_token_review() -> None:
    """Issue 24: every junk bearer token cost one TokenReview on a small shared pool;
    1,000 of them delayed unrelated calls and, kept up, cost the leader its Lease."""
    tokens, fake = reviewer([])

    async def thousand() -> list[Caller | None]:
        return [await tokens.review(JUNK[index % len(JUNK)]) for index in range(1000)]

    assert set(asyncio.run(thousand())) == {None}
    assert fake.calls == []


def test_each_address_gets_a_burst_of_reviews_then_a_rate() -> None:
    """Well-formed forged tokens reach TokenReview: one address may cost a burst, then
    a few a second; another address is not held back by it."""
    clock = Ticking()
    tokens, fake = reviewer([reviewed([AUDIENCE], authenticated=False)] * 30, clock)
    tokens.budget = ReviewBudget(rate=2.0, burst=3)
    for jti in range(3):
        assert asyncio.run(tokens.review(token(jti=jti), "10.0.0.1")) is None
    with pytest.raises(TooManyReviews) as throttled:
        asyncio.run(tokens.review(token(jti="more"), "10.0.0.1"))
    assert throttled.value.retry_after == pytest.approx(0.5)
    assert asyncio.run(tokens.review(token(jti="elsewhere"), "10.0.0.2")) is None
    clock.now = 0.5
    assert asyncio.run(tokens.review(token(jti="later"), "10.0.0.1")) is None
    assert len(fake.calls) == 5


def test_a_deleted_pods_token_is_reviewed_again_not_taken_from_the_cache() -> None:
    tokens, fake = reviewer([reviewed([AUDIENCE]), reviewed([AUDIENCE], authenticated=False)])
    t = token()
    assert asyncio.run(tokens.review(t)) == WORKER
    tokens.forget_pod("another-uid")
    assert asyncio.run(tokens.review(t)) == WORKER, "another pod's deletion changes nothing"
    tokens.forget_pod("u")
    assert asyncio.run(tokens.review(t)) is None, "the apiserver refuses a dead pod's token"
    assert len(fake.calls) == 2


def test_a_pod_the_consumer_does_not_own_is_not_its_worker() -> None:
    """Any pod running as `<name>-worker` could take shards (issue 24)."""
    nobodys = Caller("n", "c-worker", "intruder", "u2", consumer=None)
    registry = Registry(Clock(), startup_grace=0.0)
    refused = admit(nobodys, "n", "c", registry)
    assert isinstance(refused, Reply)
    assert refused.status == 403
    assert "intruder is not one of streamconsumer n/c's workers" in refused.body["message"]
    tokens, _ = reviewer([reviewed([AUDIENCE])])
    tokens.owners = OwnedBy(None)
    assert asyncio.run(tokens.review(token())) == Caller("n", "c-worker", "w", "u", None)


def test_a_pod_deleted_while_its_token_is_under_review_is_not_cached_as_accepted() -> None:
    """Found by review: the review under way when the pod watch said DELETED put the
    dead pod's acceptance back in the cache for the whole ttl."""
    tokens, fake = reviewer([reviewed([AUDIENCE]), reviewed([AUDIENCE], authenticated=False)])
    deleted_meanwhile = fake.create_token_review

    def slow(body: k8s.V1TokenReview, **kwargs: Any) -> k8s.V1TokenReview:
        tokens.forget_pod("u")  # the watch's event lands while the apiserver answers
        return deleted_meanwhile(body, **kwargs)

    fake.create_token_review = slow  # type: ignore[method-assign]
    assert asyncio.run(tokens.review(token())) is None
    fake.create_token_review = deleted_meanwhile  # type: ignore[method-assign]
    assert asyncio.run(tokens.review(token())) is None, "asked again, not taken from a cache"
    assert len(fake.calls) == 2


def test_refusals_never_push_an_accepted_token_out_and_stay_bounded() -> None:
    """Found by review: 10,000 refused 16 KiB tokens held 158 MiB, then a clear() made
    every worker's token go back to TokenReview at once."""
    answers = [reviewed([AUDIENCE])] + [reviewed([AUDIENCE], authenticated=False)] * 300
    tokens, fake = reviewer(answers)
    tokens.overall = ReviewBudget(rate=1e6, burst=1e6)
    tokens.max_refusals = 100
    worker = token()
    assert asyncio.run(tokens.review(worker)) == WORKER
    padding = "p" * 10_000  # tokens of about 13 KiB
    for index in range(300):
        junk = token(jti=f"{index}{padding}")
        assert asyncio.run(tokens.review(junk, f"10.0.{index // 250}.{index % 250}")) is None
    assert asyncio.run(tokens.review(worker)) == WORKER
    assert len(fake.calls) == 301, "the worker's token was not reviewed again"


def test_many_addresses_add_up_to_one_overall_budget_and_bounded_buckets() -> None:
    clock = Ticking()
    tokens, fake = reviewer([reviewed([AUDIENCE], authenticated=False)] * 50, clock)
    tokens.overall = ReviewBudget(rate=1.0, burst=10)
    tokens.budget = ReviewBudget(rate=5.0, burst=20, max_sources=100)
    refused = 0
    for index in range(500):
        try:
            asyncio.run(tokens.review(token(jti=index), f"2001:db8::{index:x}"))
        except TooManyReviews:
            refused += 1
    assert len(fake.calls) == 10, "the overall burst, whatever the number of addresses"
    assert refused == 490
    assert tokens.budget.sources == 100


class FakeApi:
    """The reads KubePodOwners makes, answered from a table of objects by name."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def _read(self, name: str, namespace: str, **_: Any) -> Any:
        if name not in self.objects:
            raise ApiException(status=404)
        return self.objects[name]

    read_namespaced_pod = read_namespaced_replica_set = read_namespaced_deployment = _read

    def get_namespaced_custom_object(self, *args: str, **_: Any) -> Any:
        return self._read(args[-1], args[2])


def owned(name: str, uid: str, api_version: str, kind: str, owner: str, owner_uid: str) -> Any:
    ref = k8s.V1OwnerReference(
        api_version=api_version, kind=kind, name=owner, uid=owner_uid, controller=True
    )
    return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, uid=uid, owner_references=[ref]))


@pytest.mark.parametrize(
    ("consumer_ref", "consumer_uid", "expected"),
    [
        (("streamconsumer.io/v1alpha1", "sc-uid"), "sc-uid", WorkerOf("c", "c-worker")),
        (("streamconsumer.io/v1alpha1", "made-up"), "sc-uid", None),  # a namesake's uid
        (("evil.example/v1", "sc-uid"), "sc-uid", None),  # another group's kind
    ],
)
def test_the_owner_chain_ends_at_the_streamconsumer_itself(
    consumer_ref: tuple[str, str], consumer_uid: str, expected: WorkerOf | None
) -> None:
    """Found by review: the last link was taken on its kind alone, so a tenant's own
    Deployment `c-workers` claiming any StreamConsumer `c` made its pods workers."""
    objects = {
        "p": owned("p", "u", "apps/v1", "ReplicaSet", "rs", "rs-uid"),
        "rs": owned("rs", "rs-uid", "apps/v1", "Deployment", "c-workers", "d-uid"),
        "c-workers": owned(
            "c-workers", "d-uid", consumer_ref[0], "StreamConsumer", "c", consumer_ref[1]
        ),
        "c": {"metadata": {"name": "c", "uid": consumer_uid}},
    }
    api = FakeApi(objects)
    owners = KubePodOwners(api, api, api)  # type: ignore[arg-type]  # the boundary
    assert owners.consumer_of("n", "p", "u") == expected
    assert owners.consumer_of("n", "p", "another-uid") is None, "a pod of the same name"


def test_the_owner_chain_reads_the_workers_account_from_the_streamconsumer() -> None:
    """processor.serviceAccountName: the account a worker must run as is the one the
    StreamConsumer read in the chain names, not `<name>-worker`."""
    objects = {
        "p": owned("p", "u", "apps/v1", "ReplicaSet", "rs", "rs-uid"),
        "rs": owned("rs", "rs-uid", "apps/v1", "Deployment", "c-workers", "d-uid"),
        "c-workers": owned(
            "c-workers", "d-uid", "streamconsumer.io/v1alpha1", "StreamConsumer", "c", "sc-uid"
        ),
        "c": {
            "metadata": {"name": "c", "uid": "sc-uid"},
            "spec": {"processor": {"serviceAccountName": "clicks-reader"}},
        },
    }
    api = FakeApi(objects)
    owners = KubePodOwners(api, api, api)  # type: ignore[arg-type]  # the boundary
    assert owners.consumer_of("n", "p", "u") == WorkerOf("c", "clicks-reader")


def test_a_worker_runs_as_the_account_its_streamconsumer_names() -> None:
    """A pod of the consumer's Deployment is a worker only as the account the consumer
    names: as `<name>-worker` (the old default) it is refused when another is named."""
    registry = Registry(Clock(), startup_grace=0.0)
    named = Caller("n", "clicks-reader", "w", "u", consumer="c", consumer_account="clicks-reader")
    stale = Caller("n", "c-worker", "w", "u", consumer="c", consumer_account="clicks-reader")
    admitted = admit(named, "n", "c", registry)
    assert isinstance(admitted, Reply)
    assert admitted.status == 503, "past the identity checks: only not loaded yet"
    refused = admit(stale, "n", "c", registry)
    assert isinstance(refused, Reply)
    assert refused.status == 403
    assert refused.body["message"] == "not a worker of streamconsumer n/c"


def test_too_many_reviews_waiting_is_503_at_once() -> None:
    tokens, fake = reviewer([])
    tokens.max_pending = 0
    with pytest.raises(ReviewUnavailable, match="too many tokens waiting"):
        asyncio.run(tokens.review(token()))
    assert fake.calls == []


def test_a_failed_review_says_nothing_of_the_apiservers_answer() -> None:
    """The 503 carried the apiserver's response headers and body to the caller."""

    class Failing:
        def create_token_review(self, body: Any, **kwargs: Any) -> Any:
            raise ApiException(status=500, reason="boom")

    tokens = TokenReviewer(Failing(), OwnedBy())  # type: ignore[arg-type]  # the boundary
    with pytest.raises(ReviewUnavailable) as failed:
        asyncio.run(tokens.review(token()))
    assert str(failed.value) == "TokenReview failed: HTTP 500"


# --- bad input from a worker: judged before anything changes, answered in JSON ------------

SPEC = consumer_spec(lease_seconds=10)
BASE = "/v1/namespaces/n/streamconsumers/c"


def managed(listed: bool = True) -> tuple[WorkerApi, LeaseCoordinator]:
    clock = Clock()
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=clock.now, created=CREATED)
    if listed:
        coordinator.set_shards([Shard("s0"), Shard("s1")])
    registry = Registry(clock, startup_grace=0.0)
    registry.add(fenced_consumer("n", "c", coordinator))
    return WorkerApi(registry, Accepting(), clock), coordinator


def granted(api: WorkerApi, coordinator: LeaseCoordinator) -> None:
    """Worker w holds s0 and s1 under epoch 1, saved."""
    coordinator.heartbeat(HeartbeatRequest(worker="w"), api.clock())
    coordinator.step(api.clock())
    coordinator.persisted(coordinator.snapshot(api.clock()), coordinator.version)


def call(
    api: WorkerApi,
    path: str,
    body: object = None,
    *,
    raw: bytes | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, CIMultiDictProxy[str]]:
    async def run() -> tuple[int, Any, CIMultiDictProxy[str]]:
        async with TestClient(TestServer(api.app())) as client:
            response = await client.request(
                method,
                path,
                data=raw if raw is not None else json.dumps(body).encode(),
                headers={"Authorization": "Bearer t", "Content-Type": "application/json"}
                | (headers or {}),
            )
            text = await response.text()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = text
            return response.status, answer, response.headers

    return asyncio.run(run())


def test_a_claim_under_epoch_0_is_400_and_changes_nothing() -> None:
    """Issue 22.11: it was a 500, after the heartbeat had extended the worker's expiry."""
    api, coordinator = managed()
    version = coordinator.version
    status, answer, _ = call(
        api, f"{BASE}/heartbeat", {"worker": "w", "held": [{"shardId": "s0", "epoch": 0}]}
    )
    assert status == 400
    assert answer["error"] == "bad_request"
    assert "epoch" in answer["message"]
    assert "w" not in coordinator.workers, "no worker joined, no expiry extended"
    assert coordinator.version == version


@pytest.mark.parametrize(
    ("held", "field"),
    [
        ({"millisBehindLatest": 2**63}, "millisBehindLatest"),
        ({"millisBehindLatest": MAX_MILLIS_BEHIND + 1}, "millisBehindLatest"),
        ({"epoch": 2**64}, "epoch"),
        ({"failing": {"attempts": 1, "seconds": 1e300, "error": "x", "blocked": True}}, "seconds"),
        ({"passedOver": [{**NOTE, "count": 2**63}]}, "count"),
        ({"shardId": "s0\n"}, "shardId"),
    ],
)
def test_numbers_and_ids_past_their_bounds_are_400(held: dict[str, Any], field: str) -> None:
    api, coordinator = managed()
    granted(api, coordinator)
    claim = {"shardId": "s0", "epoch": 1} | held
    status, answer, _ = call(api, f"{BASE}/heartbeat", {"worker": "w", "held": [claim]})
    assert status == 400
    assert field in answer["message"]
    assert coordinator.lag_millis() == {}


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("POST", "/v1/nowhere", 404, "not_found"),
        ("GET", f"{BASE}/heartbeat", 405, "method_not_allowed"),
    ],
)
def test_every_4xx_is_json_and_says_our_wire_version(
    method: str, path: str, status: int, error: str
) -> None:
    api, _ = managed()
    got, answer, headers = call(api, path, {"worker": "w"}, method=method)
    assert (got, answer["error"]) == (status, error)
    assert headers[WIRE_VERSION_HEADER] == str(WIRE_VERSION)


def test_a_body_past_the_consumers_limit_is_413_in_json_before_it_is_parsed() -> None:
    api, coordinator = managed()
    limit = heartbeat_body_limit(coordinator.claimable_shards())
    assert limit == MIN_HEARTBEAT_BYTES, "two shards: the floor"
    padding = {"worker": "w", "padding": "x" * limit}  # an unknown field: ignored if read
    status, answer, headers = call(api, f"{BASE}/heartbeat", padding)
    assert (status, answer["error"]) == (413, "too_large")
    assert headers[WIRE_VERSION_HEADER] == str(WIRE_VERSION)
    assert "w" not in coordinator.workers
    status, answer, _ = call(api, f"{BASE}/checkpoint", {"padding": "x" * 5000})
    assert (status, answer["error"]) == (413, "too_large")
    just_under = {"worker": "w", "padding": "x" * (limit - 100)}
    assert call(api, f"{BASE}/heartbeat", just_under)[0] == 200


def test_a_shard_end_before_the_first_listing_is_503_and_changes_nothing() -> None:
    """Issue 22.12: after a restart the operator cannot tell an open shard from a closed
    one; the worker is told to come back, and its lease stays as it was."""
    api, coordinator = managed(listed=False)
    coordinator.leases["s0"] = ShardLease("s0", "w", 1, "5", ACTIVE)
    request = {"worker": "w", "shardId": "s0", "epoch": 1, "sequenceNumber": SHARD_END}
    status, answer, headers = call(api, f"{BASE}/checkpoint", request)
    assert (status, answer["error"], headers["Retry-After"]) == (503, "unavailable", "1")
    assert coordinator.leases["s0"] == ShardLease("s0", "w", 1, "5", ACTIVE)


def test_a_shard_end_on_a_listed_open_shard_is_400() -> None:
    api, coordinator = managed()
    granted(api, coordinator)
    request = {"worker": "w", "shardId": "s0", "epoch": 1, "sequenceNumber": SHARD_END}
    status, _, _ = call(api, f"{BASE}/checkpoint", request)
    assert status == 503, "the listing may predate a reshard: come back"
    coordinator.set_shards([Shard("s0"), Shard("s1")])  # listed again: still open
    status, answer, _ = call(api, f"{BASE}/checkpoint", request)
    assert (status, answer["error"]) == (400, "bad_request")
    assert "open" in answer["message"]
    assert coordinator.leases["s0"].state is ACTIVE


def test_a_waiting_checkpoint_is_answered_before_the_worker_gives_up_on_it() -> None:
    """A `wait: true` checkpoint whose status write does not come is answered unsaved
    (the worker sends it again) well within the lease: a worker waits for it no longer
    (WorkerCore.waiting_timeout), so one that went to a frozen replica is sent again to
    the new leader before the shard's fence runs out."""
    spec = SPEC.model_copy(
        update={"leases": SPEC.leases.model_copy(update={"duration_seconds": 3})}
    )
    clock = Clock()
    coordinator = LeaseCoordinator(spec, DurableState(), now=clock.now, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    registry = Registry(clock, startup_grace=0.0)
    registry.add(fenced_consumer("n", "c", coordinator))
    api = WorkerApi(registry, Accepting(), clock)
    granted(api, coordinator)
    request = {"worker": "w", "shardId": "s0", "epoch": 1, "sequenceNumber": "7", "wait": True}

    async def run() -> dict[str, Any]:
        async with TestClient(TestServer(api.app())) as client:
            response = await client.post(
                f"{BASE}/checkpoint",
                json=request,
                headers={"Authorization": "Bearer t"},
                timeout=aiohttp.ClientTimeout(total=spec.leases.duration_seconds),
            )
            answer: dict[str, Any] = await response.json()
            return answer

    answer = asyncio.run(run())  # a timeout here: held past the lease
    assert (answer["checkpoint"], answer["persisted"]) == ("7", False)


def test_a_call_whose_term_ends_while_its_token_is_reviewed_changes_nothing() -> None:
    """Found by the freeze test (e2e test_operator_freeze): a call admitted at the front
    door while this replica led, whose TokenReview outlived the term (the process frozen
    there, resumed after a standby took over), was still acted on: the deposed replica
    accepted a checkpoint. It is refused, the connection closed, nothing changed."""
    leads = [True]
    reviewing, term_over = asyncio.Event(), asyncio.Event()

    class ReviewedAcrossTheTermsEnd:
        async def review(self, token: str, source: str = "") -> Caller | None:
            reviewing.set()
            await term_over.wait()
            return WORKER

    api, coordinator = managed()
    granted(api, coordinator)
    api = WorkerApi(api.registry, ReviewedAcrossTheTermsEnd(), api.clock, lambda: leads[0])
    before = (coordinator.leases["s0"], coordinator.version)
    request = {"worker": "w", "shardId": "s0", "epoch": 1, "sequenceNumber": "7"}

    async def run() -> tuple[int, dict[str, Any]]:
        async with TestClient(TestServer(api.app())) as client:
            sent = asyncio.create_task(
                client.post(
                    f"{BASE}/checkpoint", json=request, headers={"Authorization": "Bearer t"}
                )
            )
            await reviewing.wait()
            leads[0] = False  # the Lease ran out while the review was out
            term_over.set()
            response = await sent
            return response.status, await response.json()

    status, answer = asyncio.run(run())
    assert status == 503, f"a replica that no longer leads answered {answer}"
    assert answer["error"] == "unavailable"
    assert (coordinator.leases["s0"], coordinator.version) == before


def test_a_caller_gone_mid_body_is_logged_as_such_not_as_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker (or a proxy) that gives up while sending its body leaves an INFO line,
    not an ERROR with a stack trace: at 200 consumers those buried the real failures."""
    from streamconsumer.controller.consumer.loop import ConsumerLoop, LoopSettings

    from .moments import CREATED

    clock = Clock()
    registry = Registry(clock, startup_grace=0.0)
    registry.leading()
    coordinator = LeaseCoordinator(consumer_spec(), DurableState(), clock(), created=CREATED)
    loop = ConsumerLoop("c", coordinator, LoopSettings(), lambda: 1)
    fence = loop.write_due(clock())
    assert fence is not None
    loop.write_succeeded(fence, clock())

    async def call() -> None:
        registry.add(ManagedConsumer("n", "c", loop))
        api = WorkerApi(registry, Accepting(), clock)
        async with TestServer(api.app()) as server:
            _, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(
                b"POST /v1/namespaces/n/streamconsumers/c/heartbeat HTTP/1.1\r\n"
                b"Host: x\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"worker"'
            )
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()  # gone before the other 990 bytes
            await asyncio.sleep(0.3)

    with caplog.at_level("INFO"):
        asyncio.run(call())
    assert "the caller went away" in caplog.text
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
