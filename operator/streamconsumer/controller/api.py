"""The worker API (docs/design.md#protocol), served by the operator process:

    POST /v1/namespaces/{namespace}/streamconsumers/{name}/heartbeat
    POST /v1/namespaces/{namespace}/streamconsumers/{name}/checkpoint

Bad input gets a 4xx with a JSON message (ErrorResponse), never a 500: 400 malformed or
a wire version not served, 401 no or invalid token, 403 not a worker of this consumer or
speaking for another, 404 unknown consumer, 409 lease lost (stale epoch), 413 a body
larger than any legal message. 503 with Retry-After means "come back soon": the token
could not be reviewed right now, the consumer is still being loaded, or a SHARD_END
waits for the first listing of the stream. Every answer carries our wire version.

Checks run cheapest and least trusting first: the token before the body is read, the
body's size before it is parsed (the limit grows with the consumer's shard count: a
heartbeat lists at most one item per shard)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from streamconsumer.controller import metrics
from streamconsumer.controller.auth import Caller, ReviewUnavailable
from streamconsumer.controller.names import worker_service_account
from streamconsumer.controller.registry import ManagedConsumer, Registry
from streamconsumer.core.leases import CheckpointDeferred, CheckpointRefused
from streamconsumer.models import (
    CheckpointRequest,
    CheckpointResponse,
    ErrorResponse,
    HeartbeatRequest,
)
from streamconsumer.models.api import (
    CHECKPOINT_BODY_BYTES,
    MAX_HELD_SHARDS,
    OLDEST_WIRE_VERSION,
    WIRE_VERSION,
    WIRE_VERSION_HEADER,
    checkpoint_hold_seconds,
    heartbeat_body_limit,
)

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 1


class Reviewer(Protocol):
    async def review(self, token: str) -> Caller | None: ...


_ERRORS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "lease_lost",
    413: "too_large",
}


def _error(status: int, error: str, message: str) -> web.Response:
    body = ErrorResponse.model_validate({"error": error, "message": message})
    return web.json_response(body.wire(), status=status)


@web.middleware
async def _wire(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Our wire version on every answer; aiohttp's own 4xx (no route, wrong method, too
    large) as JSON like ours."""
    try:
        response = await handler(request)
    except web.HTTPException as raised:
        if raised.status < 400 or raised.status >= 500:
            raise
        response = _error(raised.status, _ERRORS.get(raised.status, "bad_request"), raised.reason)
    response.headers[WIRE_VERSION_HEADER] = str(WIRE_VERSION)
    return response


def _wire_version(request: web.Request) -> int | None:
    """The caller's wire version (no header: 1, the wire before versions); None if the
    header is not a number."""
    raw = request.headers.get(WIRE_VERSION_HEADER, "1").strip()
    return int(raw) if raw.isdigit() else None


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, or None if it is longer than `limit` (read no further than that)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    while len(body) <= limit:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
    return None


def _unavailable(message: str) -> web.Response:
    body = ErrorResponse(error="unavailable", message=message)
    return web.json_response(
        body.wire(), status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


def _validation_message(error: ValidationError) -> str:
    parts = []
    for issue in error.errors()[:5]:
        where = ".".join(str(p) for p in issue["loc"]) or "body"
        parts.append(f"{where}: {issue['msg']}")
    return "; ".join(parts)


Handler = Callable[[web.Request, Any, Caller], Awaitable[web.Response]]
BodyLimit = Callable[[ManagedConsumer], int]  # the largest body accepted, for a consumer


def _always() -> bool:
    return True


class WorkerApi:
    """`leading`: whether this replica leads; a standby (or a leader whose Lease ran out)
    answers 503 at once, before anything reaches a coordinator."""

    def __init__(
        self,
        registry: Registry,
        reviewer: Reviewer,
        clock: Callable[[], float],
        leading: Callable[[], bool] = _always,
    ) -> None:
        self.registry = registry
        self.reviewer = reviewer
        self.clock = clock
        self.leading = leading

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=heartbeat_body_limit(MAX_HELD_SHARDS), middlewares=[_wire]
        )
        base = "/v1/namespaces/{namespace}/streamconsumers/{name}"
        app.router.add_post(
            f"{base}/heartbeat",
            self._guarded(HeartbeatRequest, self.heartbeat, _heartbeat_limit),
        )
        app.router.add_post(
            f"{base}/checkpoint",
            self._guarded(CheckpointRequest, self.checkpoint, lambda _: CHECKPOINT_BODY_BYTES),
        )
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.serve_metrics)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def serve_metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _guarded(
        self, model: type[Any], handler: Handler, body_limit: BodyLimit
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def guarded(request: web.Request) -> web.Response:
            if not self.leading():
                # Close the connection too: a worker's keep-alive would otherwise stay on
                # this pod (a Service keeps established connections where they are).
                response = _unavailable("this operator replica does not lead; the leader serves")
                response.force_close()
                return response
            version = _wire_version(request)
            if version is None or version < OLDEST_WIRE_VERSION:
                return _error(
                    400,
                    "bad_request",
                    f"{WIRE_VERSION_HEADER} {request.headers.get(WIRE_VERSION_HEADER)!r} is "
                    f"not served: this operator serves versions {OLDEST_WIRE_VERSION} to "
                    f"{WIRE_VERSION} (and ignores what a newer one adds)",
                )
            namespace = request.match_info["namespace"]
            name = request.match_info["name"]
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer ") or not header[7:].strip():
                return _error(401, "unauthorized", "a Bearer ServiceAccount token is required")
            try:
                caller = await self.reviewer.review(header[7:].strip())
            except ReviewUnavailable as error:
                return _unavailable(str(error))
            if caller is None:
                return _error(401, "unauthorized", "the token was not accepted by TokenReview")
            if caller.namespace != namespace or caller.service_account != worker_service_account(
                name
            ):
                return _error(
                    403, "forbidden", f"not a worker of streamconsumer {namespace}/{name}"
                )
            consumer = self.registry.get(namespace, name)
            if consumer is None:
                if self.registry.starting(namespace, name):
                    return _unavailable(f"streamconsumer {namespace}/{name} is being loaded")
                return _error(
                    404, "not_found", f"streamconsumer {namespace}/{name} is not managed here"
                )
            if not consumer.serving:
                return _unavailable(
                    f"streamconsumer {namespace}/{name}: this term's status is not saved yet"
                )
            limit = body_limit(consumer)
            body = await _read_body(request, limit)
            if body is None:
                return _error(413, "too_large", f"the body is larger than {limit} bytes")
            try:
                message = model.model_validate_json(body)
            except ValidationError as error:
                return _error(400, "bad_request", _validation_message(error))
            if caller.pod_name is None or caller.pod_name != message.worker:
                return _error(
                    403, "forbidden", f"this token cannot speak for worker {message.worker}"
                )
            return await handler(request, message, caller)

        return guarded

    async def heartbeat(
        self, request: web.Request, message: HeartbeatRequest, caller: Caller
    ) -> web.Response:
        consumer = self.registry.get(request.match_info["namespace"], request.match_info["name"])
        assert consumer is not None
        response = consumer.coordinator.heartbeat(message, self.clock())
        consumer.wake()
        return web.json_response(response.wire())

    async def checkpoint(
        self, request: web.Request, message: CheckpointRequest, caller: Caller
    ) -> web.Response:
        consumer = self.registry.get(request.match_info["namespace"], request.match_info["name"])
        assert consumer is not None
        try:
            lease = consumer.coordinator.checkpoint(message)
        except CheckpointDeferred as deferred:
            return _unavailable(str(deferred))
        except CheckpointRefused as refused:
            result = "lease_lost" if refused.lease_lost else "invalid"
            metrics.CHECKPOINTS.labels(consumer.namespace, consumer.name, result).inc()
            if refused.lease_lost:
                return _error(409, "lease_lost", str(refused))
            return _error(400, "bad_request", str(refused))
        metrics.CHECKPOINTS.labels(consumer.namespace, consumer.name, "ok").inc()
        consumer.wake()
        persisted = False
        if message.wait:
            try:
                await asyncio.wait_for(
                    consumer.persisted(consumer.coordinator.version),
                    checkpoint_hold_seconds(consumer.coordinator.lease_duration),
                )
                persisted = True
            except TimeoutError:
                persisted = False
        body = CheckpointResponse(
            shard_id=message.shard_id,
            epoch=lease.epoch,
            checkpoint=lease.checkpoint,
            persisted=persisted,
        )
        return web.json_response(body.wire())


def _heartbeat_limit(consumer: ManagedConsumer) -> int:
    """A heartbeat lists at most the shards the operator knows of this consumer."""
    return heartbeat_body_limit(consumer.coordinator.claimable_shards())
