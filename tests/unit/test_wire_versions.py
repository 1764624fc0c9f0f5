"""Operator and workers of different releases (issue 22.8; docs/design.md#versions-differ):
over real HTTP, the current operator serves a worker of the previous wire
(version 1: no version header, strict models) and the current worker reads a newer
operator's answers (unknown fields, a higher version). An answer that does not parse is
a failed call, never an exception that ends the thread making it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.leases.lease_coordinator import LeaseCoordinator
from streamconsumer.controller.leases.state import DurableState
from streamconsumer.controller.worker_api import answers
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.core.lineage import Shard
from streamconsumer.models import CheckpointRequest, CheckpointResponse, HeartbeatRequest, HeldShard
from streamconsumer.models.api import (
    HEARTBEAT_ENVELOPE_BYTES,
    HELD_SHARD_BYTES,
    MAX_MILLIS_BEHIND,
    MAX_WIRE_INT,
    OLDEST_WIRE_VERSION,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
    Failing,
    PassedOver,
    wire_version,
)
from streamconsumer.worker.client import (
    OperatorClient,
    OperatorRefused,
    OperatorUnavailable,
    checkpoint_answer,
    checkpoint_outcome,
    heartbeat_answer,
)
from streamconsumer.worker.shard import Answer
from testbed.specs import consumer_spec

from .fenced import fenced_consumer
from .moments import CREATED

SPEC = consumer_spec(lease_seconds=10)
BASE = "/v1/namespaces/n/streamconsumers/c"


# --- the previous wire, as its workers parse answers: strict, no version ------------------


class V1(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class V1StartPosition(V1):
    type: str
    sequence_number: str | None = None
    timestamp: str | None = None


class V1Assignment(V1):
    shard_id: str
    epoch: int = Field(ge=1)
    start: V1StartPosition
    parents: list[str] = []


class V1Revocation(V1):
    shard_id: str
    epoch: int = Field(ge=1)
    reason: str


class V1HeartbeatResponse(V1):
    lease_duration_ms: int = Field(ge=1)
    assignments: list[V1Assignment] = []
    revocations: list[V1Revocation] = []
    next_heartbeat_ms: int | None = None


class V1CheckpointResponse(V1):
    shard_id: str
    epoch: int
    checkpoint: str | None
    persisted: bool


# --- servers on loopback, in a thread of their own ----------------------------------------


class Accepting:
    async def review(self, token: str, source: str = "") -> Caller | None:
        return Caller(
            namespace="n",
            service_account="c-worker",
            pod_name="w",
            consumer="c",
            consumer_account="c-worker",
        )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def serving(app: Callable[[], web.Application]) -> Iterator[str]:
    """Serves the app on 127.0.0.1 (a free port) from another thread; yields its URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    url: list[str] = []
    runner: list[web.AppRunner] = []

    async def start() -> None:
        runner.append(web.AppRunner(app()))
        await runner[0].setup()
        site = web.TCPSite(runner[0], "127.0.0.1", 0)
        await site.start()
        host, port = runner[0].addresses[0][:2]
        url.append(f"http://{host}:{port}")
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield url[0]
    finally:
        asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def current_operator() -> Iterator[tuple[str, LeaseCoordinator]]:
    clock = Clock()
    coordinator = LeaseCoordinator(SPEC, DurableState(), now=clock.now, created=CREATED)
    coordinator.set_shards([Shard("s0"), Shard("s1", closed=True)])

    def app() -> web.Application:
        registry = Registry(clock, startup_grace=0.0)
        registry.add(fenced_consumer("n", "c", coordinator))
        return WorkerApi(registry, Accepting(), clock).app()

    with serving(app) as url:
        yield url, coordinator


def granted(coordinator: LeaseCoordinator) -> None:
    coordinator.heartbeat(HeartbeatRequest(worker="w"), 100.0)
    coordinator.step(100.0)
    coordinator.persisted(coordinator.snapshot(100.0), coordinator.version)


def client(url: str, tmp_path: Path) -> OperatorClient:
    token = tmp_path / "token"
    token.write_text("t")
    return OperatorClient(url, "n", "c", str(token))


# --- the current operator, a worker of the previous wire -----------------------------------


def test_the_current_operator_serves_a_previous_wire_worker() -> None:
    with current_operator() as (url, coordinator):
        granted(coordinator)
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer t"}) as old:
            beat = old.post(f"{BASE}/heartbeat", json={"worker": "w", "held": []})
            assert beat.status_code == 200, beat.text
            assert beat.headers[WIRE_VERSION_HEADER] == str(WIRE_VERSION)
            answer = V1HeartbeatResponse.model_validate_json(beat.content)  # strict: parses
            assert sorted(a.shard_id for a in answer.assignments) == ["s0", "s1"]
            done = old.post(
                f"{BASE}/checkpoint",
                json={"worker": "w", "shardId": "s0", "epoch": 1, "sequenceNumber": "7"},
            )
            assert done.status_code == 200, done.text
            assert V1CheckpointResponse.model_validate_json(done.content).checkpoint == "7"


def test_the_current_operator_ignores_fields_it_does_not_know() -> None:
    """A newer worker's additions, at every level of the message."""
    with current_operator() as (url, coordinator):
        granted(coordinator)
        newer = {WIRE_VERSION_HEADER: str(WIRE_VERSION + 1), "Authorization": "Bearer t"}
        with httpx.Client(base_url=url, headers=newer) as worker:
            beat = worker.post(
                f"{BASE}/heartbeat",
                json={
                    "worker": "w",
                    "zone": "eu-west-1a",
                    "held": [
                        {
                            "shardId": "s0",
                            "epoch": 1,
                            "readerKind": "fanOut",
                            "millisBehindLatest": 7,
                            "failing": {
                                "attempts": 1,
                                "seconds": 1,
                                "error": "x",
                                "blocked": False,
                                "stack": "...",
                            },
                        }
                    ],
                },
            )
            assert beat.status_code == 200, beat.text
            assert coordinator.lag_millis() == {"s0": 7}
            done = worker.post(
                f"{BASE}/checkpoint",
                json={
                    "worker": "w",
                    "shardId": "s0",
                    "epoch": 1,
                    "sequenceNumber": "9",
                    "subSequence": 3,
                },
            )
            assert done.status_code == 200, done.text
            assert coordinator.leases["s0"].checkpoint == "9"


def test_a_wire_version_not_served_is_refused_in_json() -> None:
    with current_operator() as (url, _):
        for version in ("0", "two"):
            with httpx.Client(base_url=url) as worker:
                answer = worker.post(
                    f"{BASE}/heartbeat",
                    json={"worker": "w"},
                    headers={"Authorization": "Bearer t", WIRE_VERSION_HEADER: version},
                )
            assert answer.status_code == 400
            assert answer.json()["error"] == "bad_request"
            served = f"serves versions {OLDEST_WIRE_VERSION} to {WIRE_VERSION}"
            assert served in answer.json()["message"]


def test_the_current_worker_and_operator_end_to_end(tmp_path: Path) -> None:
    with current_operator() as (url, coordinator):
        granted(coordinator)
        operator = client(url, tmp_path)
        answer = operator.heartbeat(HeartbeatRequest(worker="w"))
        assert sorted(a.shard_id for a in answer.assignments) == ["s0", "s1"]
        assert operator.operator_wire_version == WIRE_VERSION
        ended = operator.checkpoint(
            CheckpointRequest(worker="w", shard_id="s1", epoch=1, sequence_number="SHARD_END")
        )
        assert ended.checkpoint == "SHARD_END"
        operator.close()


# --- the current worker, a newer operator (or a broken answer) -----------------------------


@contextmanager
def operator_answering(
    heartbeat: Callable[[], web.Response], checkpoint: Callable[[], web.Response] | None = None
) -> Iterator[tuple[str, list[str | None]]]:
    """A stand-in operator; yields its URL and the wire versions the calls carried."""
    versions: list[str | None] = []

    def route(answer: Callable[[], web.Response]) -> Callable[[web.Request], Awaitable[Any]]:
        async def handle(request: web.Request) -> web.Response:
            versions.append(request.headers.get(WIRE_VERSION_HEADER))
            return answer()

        return handle

    def app() -> web.Application:
        application = web.Application()
        application.router.add_post(f"{BASE}/heartbeat", route(heartbeat))
        application.router.add_post(f"{BASE}/checkpoint", route(checkpoint or heartbeat))
        return application

    with serving(app) as url:
        yield url, versions


def newer(body: dict[str, Any]) -> Callable[[], web.Response]:
    return lambda: web.json_response(body, headers={WIRE_VERSION_HEADER: str(WIRE_VERSION + 1)})


def test_the_current_worker_reads_a_newer_operators_answers(tmp_path: Path) -> None:
    heartbeat = {
        "leaseDurationMs": 10000,
        "region": "eu-west-1",
        "assignments": [
            {
                "shardId": "s0",
                "epoch": 2,
                "start": {"type": "TRIM_HORIZON", "hint": "fast"},
                "priority": 1,
            }
        ],
        "revocations": [{"shardId": "s1", "epoch": 1, "reason": "handoff", "deadlineMs": 5}],
    }
    checkpoint = {
        "shardId": "s0",
        "epoch": 2,
        "checkpoint": "5",
        "persisted": True,
        "savedAt": "now",
    }
    with operator_answering(newer(heartbeat), newer(checkpoint)) as (url, versions):
        operator = client(url, tmp_path)
        answer = operator.heartbeat(HeartbeatRequest(worker="w"))
        assert [a.shard_id for a in answer.assignments] == ["s0"]
        assert [r.shard_id for r in answer.revocations] == ["s1"]
        assert operator.operator_wire_version == WIRE_VERSION + 1
        saved = operator.checkpoint(
            CheckpointRequest(worker="w", shard_id="s0", epoch=2, sequence_number="5")
        )
        assert saved.persisted
        operator.close()
    assert versions == [str(WIRE_VERSION)] * 2, "every call says our version"


def test_a_previous_operator_without_a_version_is_version_1(tmp_path: Path) -> None:
    with operator_answering(lambda: web.json_response({"leaseDurationMs": 10000})) as (url, _):
        operator = client(url, tmp_path)
        operator.heartbeat(HeartbeatRequest(worker="w"))
        assert operator.operator_wire_version == 1
        operator.close()


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"leaseDurationMs": "soon"}',
        b'{"leaseDurationMs": 10000, "assignments": [{"shardId": "s0"}]}',
        b"[]",
    ],
)
def test_an_answer_that_does_not_parse_is_a_failed_call(tmp_path: Path, body: bytes) -> None:
    """Not an exception that ends the heartbeat thread (a crash loop) or a shard's thread
    with a checkpoint in flight (the shard stalls while heartbeats renew it)."""

    def answer() -> web.Response:
        return web.Response(body=body, content_type="application/json")

    with operator_answering(answer) as (url, _):
        operator = client(url, tmp_path)
        with pytest.raises(OperatorUnavailable, match="does not parse"):
            operator.heartbeat(HeartbeatRequest(worker="w"))
        with pytest.raises(OperatorUnavailable, match="does not parse"):
            operator.checkpoint(
                CheckpointRequest(worker="w", shard_id="s0", epoch=1, sequence_number="5")
            )
        operator.close()


def test_an_error_that_is_not_our_json_still_reads_as_a_refusal(tmp_path: Path) -> None:
    def answer() -> web.Response:
        return web.Response(status=400, body=b'["not", "ours"]', content_type="application/json")

    with operator_answering(answer) as (url, _):
        operator = client(url, tmp_path)
        with pytest.raises(Exception, match="not") as refused:
            operator.heartbeat(HeartbeatRequest(worker="w"))
        assert type(refused.value).__name__ == "OperatorRefused"
        operator.close()


# --- the size of the largest legal heartbeat ----------------------------------------------


def test_the_body_limits_hold_the_largest_message_a_current_worker_sends() -> None:
    """HELD_SHARD_BYTES and the envelope are what the worker sends at every bound, texts
    in 4-byte characters (after the worker shortens them)."""
    wide = "\U0001f600" * 2000
    note = PassedOver(
        action="skip",
        first_sequence="1" * 128,
        last_sequence="9" * 128,
        count=MAX_WIRE_INT,
        error=wide,
    )
    held = HeldShard(
        shard_id="s" * 128,
        epoch=MAX_WIRE_INT,
        sequence_number="9" * 128,
        millis_behind_latest=MAX_MILLIS_BEHIND,
        failing=Failing(attempts=MAX_WIRE_INT, seconds=1e9, error=wide, blocked=True),
        passed_over=[note, note.model_copy(update={"action": "deadLetter"})],
    )
    item = len(json.dumps(held.wire(), ensure_ascii=False).encode())
    assert item <= HELD_SHARD_BYTES
    assert item > HELD_SHARD_BYTES * 0.75, "the figure is not loose"
    empty = HeartbeatRequest(worker="\U0001f600" * 253, draining=True)
    assert len(json.dumps(empty.wire(), ensure_ascii=False).encode()) <= HEARTBEAT_ENVELOPE_BYTES


@pytest.mark.parametrize("header", ["\u00b2", "\u2460", "\u0663", "9" * 5000, "-1", " ", "2 x"])
def test_a_wire_version_that_is_no_ascii_number_is_a_json_400(header: str) -> None:
    """Found by an adversarial review: `str.isdigit` takes "²" and "٣", which `int`
    refuses (or reads as 3), and 5,000 digits are past Python's int-parsing limit: a 500
    in plain text. Both sides read the header the same way now."""
    reply = answers.front_door(True, header, "Bearer t")
    assert isinstance(reply, answers.Reply)
    assert (reply.status, reply.body["error"]) == (400, "bad_request")
    assert wire_version(header) is None


@pytest.mark.parametrize("status", [409, 429, 502, 302, 404])
def test_no_answer_ends_a_workers_thread_however_odd(status: int) -> None:
    """An error body nested past the JSON parser's depth, from a proxy or a hostile
    peer, is a failed call like any other (it was a RecursionError out of the thread)."""
    nested = b"[" * 1000
    for read in (heartbeat_answer, checkpoint_answer):
        with pytest.raises((OperatorUnavailable, OperatorRefused)):
            read(status, nested)
    assert checkpoint_outcome("s0", lambda: checkpoint_answer(status, nested)) in set(Answer)


def test_a_release_before_any_checkpoint_is_answered_in_a_form_every_worker_reads() -> None:
    """Found by an e2e run: a release of a shard never checkpointed was answered without
    the `checkpoint` key, which workers required; the release was sent again and again
    until the operator went away, and its records were read twice."""
    answer = CheckpointResponse(shard_id="s0", epoch=3, checkpoint=None, persisted=True)
    content = json.dumps(answer.wire()).encode()
    assert json.loads(content)["checkpoint"] is None, "the key, for workers of earlier releases"
    assert checkpoint_answer(200, content) == answer
    assert checkpoint_answer(200, b'{"shardId": "s0", "epoch": 3, "persisted": true}') == answer
