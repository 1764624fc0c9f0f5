"""The worker API (docs/design.md#protocol), served by the operator process:

    POST /v1/namespaces/{namespace}/streamconsumers/{name}/heartbeat
    POST /v1/namespaces/{namespace}/streamconsumers/{name}/checkpoint

Bad input gets a 4xx with a JSON message (ErrorResponse), never a 500: 400 malformed or
a wire version not served, 401 no or invalid token, 403 not a worker of this consumer or
speaking for another, 404 unknown consumer, 409 lease lost (stale epoch), 413 a body
larger than any legal message. 503 with Retry-After means "come back soon": the token
could not be reviewed right now, the consumer is still being loaded, or a SHARD_END
waits for the first listing of the stream; 429 with Retry-After, too many new tokens
from one address; 408, a body that did not arrive in time. Every answer carries our
wire version. A 401 or 403 is counted, and logged at most once a minute per source
address and reason (`refusals.py`). A connection that does not finish its TLS handshake
or send its headers in time is closed (`OperatorConfig.api_header_timeout_seconds`), and
how many a client may hold is bounded (`connection_limits.py`).

What each request gets is decided in `answers.py` (sans-I/O, run by the simulation
too); this module serves it: the token reviewed before the body is read, the body read
no further than the consumer's limit (it grows with the consumer's shard count: a
heartbeat lists at most one item per shard), a held checkpoint answered once the status
holds it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from streamconsumer.controller import metrics
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.worker_api import answers
from streamconsumer.controller.worker_api.answers import ROUTES, Reply, Route
from streamconsumer.controller.worker_api.auth import ReviewUnavailable, TooManyReviews
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.controller.worker_api.listeners import LIVENESS_PATH, READINESS_PATH
from streamconsumer.controller.worker_api.refusals import RefusalLog
from streamconsumer.models.api import MAX_HELD_SHARDS, WIRE_VERSION_HEADER, heartbeat_body_limit

log = logging.getLogger(__name__)


class Reviewer(Protocol):
    async def review(self, token: str, source: str) -> Caller | None: ...


def _response(reply: Reply) -> web.Response:
    if reply.status in (401, 403):  # someone knocking: counted, logged at most once a minute
        metrics.REFUSED_CALLS.labels(str(reply.status)).inc()
    response = web.Response(
        body=reply.content(), status=reply.status, content_type="application/json"
    )
    response.headers.update(reply.headers())
    if reply.close:
        response.force_close()
    return response


@web.middleware
async def _wire(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own 4xx (no route, wrong method, too large) as JSON like ours; a bug of
    ours as a JSON 500, logged, never a stack trace to the caller."""
    try:
        return await handler(request)
    except web.HTTPException as raised:
        if raised.status < 400 or raised.status >= 500:
            raise
        return _response(answers.error(raised.status, raised.reason))
    except ConnectionResetError:  # the caller gave up mid-request: the answer goes nowhere
        log.info("%s %s: the caller went away", request.method, request.path)
        return _response(answers.error(500, "the caller went away", "internal"))
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return _response(answers.error(500, "the operator failed to answer; retry", "internal"))


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


def _always() -> bool:
    return True


# eq=False: equal only to itself and hashable, as the plain class it was.
@dataclass(eq=False)
class WorkerApi:
    """`leading`: whether this replica leads; a standby (or a leader whose Lease ran out)
    answers 503 at once, before anything reaches a coordinator."""

    registry: Registry
    reviewer: Reviewer
    clock: Callable[[], float]
    leading: Callable[[], bool] = _always
    body_timeout: float = 10.0
    refusals: RefusalLog = field(default_factory=RefusalLog, init=False)

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=heartbeat_body_limit(MAX_HELD_SHARDS), middlewares=[_wire]
        )
        base = "/v1/namespaces/{namespace}/streamconsumers/{name}"
        for path, route in ROUTES.items():
            app.router.add_post(f"{base}/{path}", self._serving(route))
        # The probes, when they have no listener of their own (local development): that
        # this app answers is what readiness asks.
        app.router.add_get(LIVENESS_PATH, self.healthz)
        app.router.add_get(READINESS_PATH, self.healthz)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    def _serving(self, route: Route[Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            reply = await self._answer(route, request)
            if reply.refusal is not None:
                consumer = f"{request.match_info['namespace']}/{request.match_info['name']}"
                source = request.remote or ""
                self.refusals.refused(reply.status, reply.refusal, source, consumer, self.clock())
            return _response(reply)

        return serve

    async def _answer(self, route: Route[Any], request: web.Request) -> Reply:
        headers = request.headers
        token = answers.front_door(
            self.leading(), headers.get(WIRE_VERSION_HEADER), headers.get("Authorization")
        )
        if isinstance(token, Reply):
            return token
        try:
            caller = await self.reviewer.review(token, request.remote or "")
        except TooManyReviews as error:
            return answers.throttled(str(error), error.retry_after)
        except ReviewUnavailable as error:
            return answers.unavailable(str(error))
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        consumer = answers.admit(
            caller, namespace, name, self.registry, headers.get(WIRE_VERSION_HEADER)
        )
        if isinstance(consumer, Reply):
            return consumer
        assert caller is not None  # admitted
        limit = route.body_limit(consumer)
        try:
            body = await asyncio.wait_for(_read_body(request, limit), self.body_timeout)
        except TimeoutError:
            return answers.too_slow(self.body_timeout)
        if body is None:
            return answers.too_large(limit)
        reply = route.receive(consumer, body, caller, self.clock(), self.leading())
        if reply.hold is None:
            return reply
        try:
            await asyncio.wait_for(consumer.persisted(reply.hold.version), reply.hold.seconds)
        except TimeoutError:
            return reply.settled(persisted=False)
        return reply.settled(persisted=True)
