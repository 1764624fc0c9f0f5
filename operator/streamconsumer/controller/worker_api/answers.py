"""What the worker API answers, sans-I/O (docs/design.md#protocol): a request's headers
and body bytes in, a `Reply` (status, JSON body, headers) out. `api.py` serves it over
aiohttp; the simulation calls the same functions with the same bytes, so the wire it
checks is the one workers meet.

Checks run cheapest and least trusting first: leadership and the wire version, then the
token (reviewed by the caller of `front_door`, the only step that does I/O), then the
consumer, then the body's size before it is parsed. A `wait: true` checkpoint's reply
is `held`: its host waits for the status write (at most `Hold.seconds`), then calls
`Reply.settled`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from streamconsumer.controller import metrics
from streamconsumer.controller.consumer.registry import ManagedConsumer, Registry
from streamconsumer.controller.names import worker_service_account
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.core.leases import CheckpointDeferred, CheckpointRefused
from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    ErrorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from streamconsumer.models.api import (
    CHECKPOINT_BODY_BYTES,
    ENDS_WIRE_VERSION,
    OLDEST_WIRE_VERSION,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
    checkpoint_hold_seconds,
    heartbeat_body_limit,
    worker_process,
)
from streamconsumer.models.api import wire_version as read_wire_version
from streamconsumer.models.base import WireModel
from streamconsumer.models.resource import MAX_PROCESSES

RETRY_AFTER_SECONDS = 1

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "lease_lost",
    413: "too_large",
}


# Why a call was refused (401, 403): a code for the log, finer than the status.
NO_TOKEN = "no_token"  # no Bearer token
TOKEN_REFUSED = "token_refused"  # not a token of ours (or TokenReview said no)
OTHER_ACCOUNT = "other_account"  # a ServiceAccount other than this consumer's workers'
NOT_A_WORKER = "not_a_worker"  # the workers' ServiceAccount in a pod not of their Deployment
OTHER_WORKER = "other_worker"  # a worker's token speaking for another worker


@dataclass(frozen=True)
class Refusal:
    """Why a caller was refused, and who it is or claims to be where that is known, for
    the log (`refusals.py`): never the token, nor the body beyond the worker it names."""

    reason: str
    account: str | None = None  # the reviewed token's ServiceAccount, namespace/name
    pod: str | None = None  # the pod the reviewed token is bound to
    worker: str | None = None  # the worker the body speaks for


@dataclass(frozen=True)
class Hold:
    """A `wait: true` checkpoint: answer once the status holds `version`, or after
    `seconds` (the worker then sends it again)."""

    version: int
    seconds: float


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    retry_after: int | None = None  # 503, 429: come back after this many seconds
    close: bool = False  # end the keep-alive connection
    hold: Hold | None = None
    refusal: Refusal | None = None  # a 401 or 403's why, for the log

    def settled(self, persisted: bool) -> Reply:
        """A held reply once its wait is over."""
        return replace(self, body={**self.body, "persisted": persisted}, hold=None)

    def headers(self) -> dict[str, str]:
        headers = {WIRE_VERSION_HEADER: str(WIRE_VERSION)}
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers

    def content(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


def error(
    status: int, message: str, code: str | None = None, refusal: Refusal | None = None
) -> Reply:
    body = ErrorResponse.model_validate(
        {"error": code or ERROR_CODES.get(status, "bad_request"), "message": message}
    )
    return Reply(status, body.wire(), refusal=refusal)


def unavailable(message: str, close: bool = False) -> Reply:
    body = ErrorResponse(error="unavailable", message=message)
    return Reply(503, body.wire(), retry_after=RETRY_AFTER_SECONDS, close=close)


def throttled(message: str, retry_after: float) -> Reply:
    """429: this caller asked too often; it may come back after `retry_after` seconds."""
    body = ErrorResponse(error="unavailable", message=message)
    return Reply(429, body.wire(), retry_after=max(1, math.ceil(retry_after)))


def too_slow(seconds: float) -> Reply:
    """408: the body did not arrive in time; the connection is closed."""
    body = ErrorResponse(error="unavailable", message=f"the body took over {seconds:g} s")
    return Reply(408, body.wire(), close=True)


def not_leading() -> Reply:
    # Close the connection too: a worker's keep-alive would otherwise stay on this pod (a
    # Service keeps established connections where they are).
    return unavailable("this operator replica does not lead; the leader serves", close=True)


def front_door(leading: bool, wire_version: str | None, authorization: str | None) -> Reply | str:
    """The checks before the token is reviewed: the bearer token, or the reply."""
    if not leading:
        return not_leading()
    version = read_wire_version(wire_version)
    if version is None or version < OLDEST_WIRE_VERSION:
        return error(
            400,
            f"{WIRE_VERSION_HEADER} {wire_version!r:.40} is not served: this operator serves "
            f"versions {OLDEST_WIRE_VERSION} to {WIRE_VERSION} (and ignores what a newer one "
            "adds)",
        )
    header = authorization or ""
    if not header.startswith("Bearer ") or not header[7:].strip():
        return error(401, "a Bearer ServiceAccount token is required", refusal=Refusal(NO_TOKEN))
    return header[7:].strip()


def admit(
    caller: Caller | None,
    namespace: str,
    name: str,
    registry: Registry,
    wire_version: str | None = None,
) -> Reply | ManagedConsumer:
    """The consumer a reviewed caller speaks to, or the reply. `wire_version`: the
    caller's header, already served by `front_door`."""
    if caller is None:
        refused = Refusal(TOKEN_REFUSED)
        return error(401, "the token was not accepted by TokenReview", refusal=refused)
    account = f"{caller.namespace}/{caller.service_account}"
    consumer = registry.get(namespace, name)
    # A worker is a pod its Deployment controls (the owner chain), running as the
    # ServiceAccount the StreamConsumer read in that chain names. Outside it, the account
    # the loaded spec names only tells the two refusals apart.
    if caller.consumer == name:
        expected = caller.consumer_account
    else:
        named = consumer.coordinator.spec.processor.service_account_name if consumer else None
        expected = worker_service_account(name, named)
    if caller.namespace != namespace or caller.service_account != expected:
        refused = Refusal(OTHER_ACCOUNT, account, caller.pod_name)
        return error(403, f"not a worker of streamconsumer {namespace}/{name}", refusal=refused)
    if caller.consumer != name:  # the workers' ServiceAccount, in a pod not of our workers
        return error(
            403,
            f"pod {caller.pod_name} is not one of streamconsumer {namespace}/{name}'s workers",
            refusal=Refusal(NOT_A_WORKER, account, caller.pod_name),
        )
    if consumer is None:
        if registry.starting(namespace, name):
            return unavailable(f"streamconsumer {namespace}/{name} is being loaded")
        return error(404, f"streamconsumer {namespace}/{name} is not managed here")
    if not consumer.serving:
        return unavailable(
            f"streamconsumer {namespace}/{name}: this term's status is not saved yet"
        )
    version = read_wire_version(wire_version) or OLDEST_WIRE_VERSION
    if consumer.coordinator.spec.end is not None and version < ENDS_WIRE_VERSION:
        # An older worker would ignore the end and deliver what comes after it.
        return error(
            400,
            f"streamconsumer {namespace}/{name} has an end, which workers of wire version "
            f"{version} do not keep: its workers need wire version {ENDS_WIRE_VERSION} "
            "(release 0.2.0) or later",
        )
    return consumer


Message = TypeVar("Message", bound=WireModel)


@dataclass(frozen=True)
class Route(Generic[Message]):
    """One call of the worker API: its message, the largest body a consumer accepts for
    it, and what it does."""

    path: str
    model: type[Message]
    body_limit: Callable[[ManagedConsumer], int]
    handle: Callable[[ManagedConsumer, Message, float], Reply]

    def receive(
        self, consumer: ManagedConsumer, body: bytes, caller: Caller, now: float, leading: bool
    ) -> Reply:
        """The reply to an admitted caller's body (already cut at `body_limit`). `leading`:
        whether this replica leads now; it did at the front door, but a term can end while
        the token is reviewed or the body read (a process frozen there, resumed after a
        takeover), and a replica that no longer leads must never act on a call."""
        if not leading:
            return not_leading()
        try:
            message = self.model.model_validate_json(body)
        except ValidationError as invalid:
            return error(400, _validation_message(invalid))
        worker = getattr(message, "worker", None)
        if caller.pod_name is None or not speaks_for(caller.pod_name, worker):
            account = f"{caller.namespace}/{caller.service_account}"
            return error(
                403,
                f"this token cannot speak for worker {worker}",
                refusal=Refusal(OTHER_WORKER, account, caller.pod_name, worker),
            )
        return self.handle(consumer, message, now)


def speaks_for(pod: str, worker: str | None) -> bool:
    """Whether a pod's token speaks for `worker`: the pod itself (a worker of any release),
    or one of its processes (`pod#0`...; processor.processes)."""
    if worker is None:
        return False
    of, index = worker_process(worker)
    return of == pod and (index is None or index < MAX_PROCESSES)


def beyond_processes(worker: str, consumer: ManagedConsumer) -> bool:
    """A process the spec no longer gives its pod: a rollout to fewer processes whose old
    pod still runs. It takes nothing new and hands off what it holds."""
    index = worker_process(worker)[1]
    return index is not None and index >= consumer.coordinator.spec.processor.processes


def too_large(limit: int) -> Reply:
    return error(413, f"the body is larger than {limit} bytes")


def heartbeat(consumer: ManagedConsumer, message: HeartbeatRequest, now: float) -> Reply:
    coordinator = consumer.coordinator
    if beyond_processes(message.worker, consumer):
        if not message.held and message.worker not in coordinator.workers:
            # Nothing to hand off: answered, never counted (a worker, a status write).
            promise = int(coordinator.lease_duration * 1000)
            return Reply(200, HeartbeatResponse(lease_duration_ms=promise).wire())
        message = message.model_copy(update={"draining": True})
    response = coordinator.heartbeat(message, now)
    consumer.wake()
    return Reply(200, response.wire())


def checkpoint(consumer: ManagedConsumer, message: CheckpointRequest, now: float) -> Reply:
    coordinator = consumer.coordinator
    try:
        lease = coordinator.checkpoint(message)
    except CheckpointDeferred as deferred:
        consumer.wake()  # a listing is wanted
        return unavailable(str(deferred))
    except CheckpointRefused as refused:
        result = "lease_lost" if refused.lease_lost else "invalid"
        metrics.CHECKPOINTS.labels(consumer.namespace, consumer.name, result).inc()
        return error(409 if refused.lease_lost else 400, str(refused))
    metrics.CHECKPOINTS.labels(consumer.namespace, consumer.name, "ok").inc()
    metrics.LAST_CHECKPOINT.labels(consumer.namespace, consumer.name).set_to_current_time()
    consumer.wake()
    body = CheckpointResponse(
        shard_id=message.shard_id, epoch=lease.epoch, checkpoint=lease.checkpoint, persisted=False
    )
    reply = Reply(200, body.wire())
    if not message.wait:
        return reply
    hold = Hold(coordinator.version, checkpoint_hold_seconds(coordinator.lease_duration))
    return replace(reply, hold=hold)


def _heartbeat_limit(consumer: ManagedConsumer) -> int:
    """A heartbeat lists at most the shards the operator knows of this consumer."""
    return heartbeat_body_limit(consumer.coordinator.claimable_shards())


HEARTBEAT = Route("heartbeat", HeartbeatRequest, _heartbeat_limit, heartbeat)
CHECKPOINT = Route("checkpoint", CheckpointRequest, lambda _: CHECKPOINT_BODY_BYTES, checkpoint)
ROUTES: dict[str, Route[Any]] = {route.path: route for route in (HEARTBEAT, CHECKPOINT)}


def _validation_message(invalid: ValidationError) -> str:
    parts = []
    for issue in invalid.errors()[:5]:
        where = ".".join(str(p) for p in issue["loc"]) or "body"
        parts.append(f"{where}: {issue['msg']}")
    return "; ".join(parts)
