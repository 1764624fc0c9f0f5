"""The worker API's real aiohttp app under arbitrary input (issue 40): bodies of any JSON
shape (huge numbers, deep nesting, wrong types, unknown fields), raw bytes, oversize,
any headers, to this worker's consumer, another's or none. Whatever comes, the answer is
one the API documents (api.py), JSON with a message, never a 500 or a traceback, within
a deadline and bounded memory, and no other consumer changes."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.core.lineage import Shard
from streamconsumer.models import HeartbeatRequest
from streamconsumer.models.api import (
    MIN_HEARTBEAT_BYTES,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
)
from testbed.specs import consumer_spec

from .fenced import fenced_consumer
from .moments import CREATED
from .test_worker_api import Accepting, Clock

# What api.py documents (200 for a body that happens to be a valid call).
DOCUMENTED = {200, 400, 401, 403, 404, 405, 408, 409, 413, 429, 503}
PEAK_BYTES = 16 * 2**20  # per call, the app's and the client's allocations together
MEMBERS = [
    "worker",
    "held",
    "shardId",
    "epoch",
    "sequenceNumber",
    "millisBehindLatest",
    "released",
    "finished",
    "failing",
    "passedOver",
    "count",
    "seconds",
    "padding",
]
MINE = [
    "/v1/namespaces/n/streamconsumers/c/heartbeat",
    "/v1/namespaces/n/streamconsumers/c/checkpoint",
]
# Mostly this worker's own consumer, with the headers a worker sends: what reaches the
# body's parsing and the coordinator.
PATHS = st.sampled_from(
    [
        *MINE * 6,
        "/v1/namespaces/n/streamconsumers/other/heartbeat",  # another consumer's
        "/v1/namespaces/n/streamconsumers/other/checkpoint",
        "/v1/namespaces/x/streamconsumers/c/heartbeat",  # no such consumer
        "/v1/namespaces/n/streamconsumers/c/%00",
        "/healthz",
        "/",
    ]
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**200),
    st.floats(allow_nan=False),
    st.just(-(2**64)),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=40))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.one_of(st.sampled_from(MEMBERS), st.text(max_size=8)), inner, max_size=5
        ),
    ),
    max_leaves=30,
)


def nested(depth: int) -> bytes:
    return b'{"worker":' + b"[" * depth + b"]" * depth + b"}"


BODIES = st.one_of(
    JSON.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"worker": st.just("w")}, optional={m: JSON for m in MEMBERS if m != "worker"}
    ).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.integers(min_value=1, max_value=MIN_HEARTBEAT_BYTES).map(nested),
    st.integers(min_value=4000, max_value=6000).map(lambda n: b'{"epoch":' + b"9" * n + b"}"),
    st.integers(min_value=1, max_value=4).map(
        lambda k: b'{"worker":"' + b"x" * (k * 2**20) + b'"}'
    ),
)
HEADER_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
VALID = {"Authorization": "Bearer t", WIRE_VERSION_HEADER: str(WIRE_VERSION)}
OVERRIDES = st.fixed_dictionaries(
    {},
    optional={
        "Authorization": st.one_of(st.just("Bearer t"), HEADER_VALUES),
        WIRE_VERSION_HEADER: st.one_of(st.just(str(WIRE_VERSION)), HEADER_VALUES),
        "Content-Type": st.one_of(st.just("application/json"), HEADER_VALUES),
        "X-Anything": HEADER_VALUES,
    },
)
HEADERS = st.one_of(st.just({}), st.just({}), OVERRIDES).map(lambda o: VALID | o)


def consumer(clock: Clock, worker_holds: bool) -> LeaseCoordinator:
    coordinator = LeaseCoordinator(consumer_spec(), DurableState(), now=clock.now, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1")])
    if worker_holds:
        coordinator.heartbeat(HeartbeatRequest(worker="w"), clock.now)
        coordinator.step(clock.now)
        coordinator.persisted(coordinator.snapshot(clock.now), coordinator.version)
    return coordinator


def state(coordinator: LeaseCoordinator, now: float) -> object:
    return (
        coordinator.version,
        repr(coordinator.snapshot(now)),
        sorted(coordinator.workers),
        coordinator.lag_millis(),
        len(coordinator.passed_over.pending),
    )


async def send(
    api: WorkerApi, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    async with TestClient(TestServer(api.app())) as client:
        response = await client.request(method, path, data=body, headers=headers)
        return response.status, await response.read()


@settings(
    max_examples=150,
    deadline=timedelta(seconds=3),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    method=st.sampled_from(["POST"] * 8 + ["GET", "PUT"]),
    path=PATHS,
    body=BODIES,
    headers=HEADERS,
    holds=st.booleans(),
)
def test_any_input_gets_a_documented_json_answer_and_leaves_others_alone(
    method: str, path: str, body: bytes, headers: dict[str, str], holds: bool
) -> None:
    clock = Clock()
    registry = Registry(clock, startup_grace=0.0)
    registry.leading()
    mine, other = consumer(clock, holds), consumer(clock, worker_holds=True)
    registry.add(fenced_consumer("n", "c", mine))
    registry.add(fenced_consumer("n", "other", other))
    api = WorkerApi(registry, Accepting(), clock, body_timeout=1.0)
    before, mine_before = state(other, clock.now), state(mine, clock.now)

    tracemalloc.start()
    try:
        status, raw = asyncio.run(send(api, method, path, body, headers))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    event(f"status {status}")
    assert status in DOCUMENTED, (status, raw[:300])
    answer: Any = json.loads(raw)
    if status >= 400:
        assert set(answer) == {"error", "message"}, answer
        assert "Traceback" not in answer["message"]
        assert state(mine, clock.now) == mine_before, "a refused call changed its consumer"
    assert peak < PEAK_BYTES, f"{peak} bytes for one call"
    assert state(other, clock.now) == before, "another consumer changed"
