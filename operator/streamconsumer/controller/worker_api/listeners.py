"""Where the operator listens: the worker API, and the probes, each on a listener of its
own (docs/security.md#connection-bounds). One function, `__main__`'s, so that tests
attack what a cluster runs.

Liveness (`LIVENESS_PATH`) is answered by the event loop alone: a loop that cannot answer
is wedged, and only a restart helps. Readiness (`READINESS_PATH`) is whether the worker API
accepts connections. Neither follows leadership: a standby must be Ready, or a
RollingUpdate would wait for ever (docs/high-availability.md).

The probes have their own port rather than a slot kept for them on the API's: the API's
caps cannot tell the kubelet from a tenant before a request is read, and what fills them
must never fail the liveness probe (a restart would drop every worker's leases). The
probes' listener has a small cap of its own, so it cannot be used to exhaust files
either; the NetworkPolicy admits no pod to it."""

from __future__ import annotations

import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from streamconsumer.controller import metrics
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.worker_api.connection_limits import (
    ConnectionLimits,
    LimitedSite,
    within_open_files,
)

# The kubelet probes one at a time per probe, on a connection each.
PROBE_CONNECTIONS = 8
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
# A short shutdown (of the server, and of a TLS connection being closed): workers retry,
# and reach the next leader.
SHUTDOWN_SECONDS = 1.0


@dataclass(frozen=True)
class Listeners:
    api_port: int
    # Where the chart's liveness and readiness probes ask, and how.
    probe_port: int
    probe_scheme: str
    api_limits: ConnectionLimits
    api_site: LimitedSite
    runners: tuple[web.AppRunner, ...]

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


async def _alive(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _readiness(ready: Callable[[], bool]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ok": ok}, status=200 if ok else 503)

    return answer


def probe_app(ready: Callable[[], bool]) -> web.Application:
    """`ready`: whether the worker API accepts connections."""
    app = web.Application()
    app.router.add_get(LIVENESS_PATH, _alive)
    app.router.add_get(READINESS_PATH, _readiness(ready))
    return app


async def _runner(app: web.Application, config: OperatorConfig) -> web.AppRunner:
    # aiohttp's keep-alive timeout also closes a connection whose request headers are not
    # all in by then.
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=SHUTDOWN_SECONDS,
        keepalive_timeout=config.api_header_timeout_seconds,
    )
    await runner.setup()
    return runner


async def listen(
    config: OperatorConfig, api: web.Application, ssl_context: ssl.SSLContext | None
) -> Listeners:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limits = ConnectionLimits(
        within_open_files(config.api_max_connections, soft),
        config.api_max_connections_per_client,
    )
    metrics.API_CONNECTIONS.set_function(lambda: limits.open_total)
    runner = await _runner(api, config)
    site = LimitedSite(
        runner,
        config.api_host,
        config.api_port,
        limits,
        "api",
        ssl_context=ssl_context,
        handshake_timeout=config.api_header_timeout_seconds,
        shutdown_timeout=SHUTDOWN_SECONDS,
    )
    await site.start()
    scheme = "https" if ssl_context else "http"
    if not config.probe_port:
        return Listeners(site.port, site.port, scheme, limits, site, (runner,))
    probes = await _runner(probe_app(lambda: site.accepting), config)
    probe_site = LimitedSite(
        probes,
        config.api_host,
        config.probe_port,
        ConnectionLimits(PROBE_CONNECTIONS, PROBE_CONNECTIONS),
        "probes",
    )
    await probe_site.start()
    return Listeners(site.port, probe_site.port, "http", limits, site, (runner, probes))
