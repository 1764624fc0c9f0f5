"""The worker API's answers where the apiserver or the operator is not ready: 503 with
Retry-After (come back) versus 4xx (stop), TokenReview's audience and cache."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from kubernetes import client as k8s

from streamconsumer.controller.api import WorkerApi
from streamconsumer.controller.auth import AUDIENCE, Caller, TokenReviewer
from streamconsumer.controller.registry import Registry

WORKER = Caller(namespace="n", service_account="c-worker", pod_name="w")


class Accepting:
    async def review(self, token: str) -> Caller | None:
        return WORKER


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def post(api: WorkerApi) -> tuple[int, str | None]:
    async def call() -> tuple[int, str | None]:
        async with TestClient(TestServer(api.app())) as client:
            response = await client.post(
                "/v1/namespaces/n/streamconsumers/c/heartbeat",
                json={"worker": "w"},
                headers={"Authorization": "Bearer t"},
            )
            return response.status, response.headers.get("Retry-After")

    return asyncio.run(call())


def test_an_unknown_consumer_is_503_while_the_operator_starts_then_404() -> None:
    clock = Clock()
    registry = Registry(clock, startup_grace=30.0)
    registry.leading()
    api = WorkerApi(registry, Accepting(), clock)
    assert post(api) == (503, "1"), "right after start: maybe not loaded yet"
    clock.now += 31
    assert post(api)[0] == 404, "well after start: not ours"
    registry.loading("n", "c")
    assert post(api) == (503, "1"), "being loaded"


def test_a_standby_answers_come_back_later_without_reviewing_the_token() -> None:
    class Refusing:
        async def review(self, token: str) -> Caller | None:
            raise AssertionError("a standby must not review tokens")

    clock = Clock()
    leads = [False]
    api = WorkerApi(Registry(clock, startup_grace=0.0), Refusing(), clock, lambda: leads[0])
    assert post(api) == (503, "1")


def test_a_promoted_standby_counts_its_grace_from_when_it_leads() -> None:
    """Issue 22.9: the grace counted from process start, so a standby promoted after
    30 s answered 404 to every worker while kopf was still loading the consumers."""
    clock = Clock()
    registry = Registry(clock, startup_grace=30.0)
    api = WorkerApi(registry, Accepting(), clock)
    clock.now += 600  # a standby for ten minutes
    registry.leading()
    assert post(api) == (503, "1"), "just promoted: come back"
    clock.now += 31
    assert post(api)[0] == 404


def test_a_consumer_whose_fence_has_not_landed_is_503() -> None:
    """Issue 22.1: a new term answers nobody from the status it only read."""
    from streamconsumer.controller.loop import ConsumerLoop, LoopSettings
    from streamconsumer.controller.registry import ManagedConsumer
    from streamconsumer.controller.state import Coordinator, DurableState
    from streamconsumer.models.resource import StreamConsumerSpec

    from .moments import CREATED

    spec = StreamConsumerSpec.model_validate(
        {
            "source": {"kinesis": {"streamName": "s"}},
            "processor": {"image": "i", "entrypoint": "m:f"},
        }
    )
    clock = Clock()
    registry = Registry(clock, startup_grace=0.0)
    registry.leading()
    loop = ConsumerLoop(
        "c", Coordinator(spec, DurableState(), clock(), created=CREATED), LoopSettings(), lambda: 1
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
            extra={"authentication.kubernetes.io/pod-name": ["w"]},
        ),
    )


def reviewer(answers: list[k8s.V1TokenReviewStatus]) -> tuple[TokenReviewer, FakeAuthentication]:
    fake = FakeAuthentication(answers)
    return TokenReviewer(fake, timeout=2.5), fake  # type: ignore[arg-type]  # the boundary


def test_a_refused_token_is_asked_again_and_an_accepted_one_is_cached() -> None:
    tokens, fake = reviewer(
        [reviewed([AUDIENCE], authenticated=False), reviewed([AUDIENCE]), reviewed([AUDIENCE])]
    )
    assert asyncio.run(tokens.review("t")) is None
    assert asyncio.run(tokens.review("t")) == WORKER, "a refusal is not cached"
    assert asyncio.run(tokens.review("t")) == WORKER
    assert len(fake.calls) == 2, "an acceptance is"
    assert fake.calls[0] == {"_request_timeout": 2.5}


def test_a_token_not_meant_for_us_is_refused() -> None:
    """An authenticator that ignores audiences returns none of ours: refuse."""
    tokens, _ = reviewer([reviewed(["https://kubernetes.default.svc"]), reviewed([])])
    assert asyncio.run(tokens.review("t1")) is None
    assert asyncio.run(tokens.review("t2")) is None
