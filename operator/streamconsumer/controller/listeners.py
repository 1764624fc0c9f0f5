"""Where the operator listens: the worker API, served as `__main__` serves it, and the
/healthz its probes ask. One function, so that tests attack what a cluster runs."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from aiohttp import web

from streamconsumer.controller.config import OperatorConfig


@dataclass(frozen=True)
class Listeners:
    api_port: int
    # Where the chart's liveness and readiness probes ask /healthz, and how.
    probe_port: int
    probe_scheme: str
    runner: web.AppRunner

    async def stop(self) -> None:
        await self.runner.cleanup()


async def listen(
    config: OperatorConfig, api: web.Application, ssl_context: ssl.SSLContext | None
) -> Listeners:
    # A short shutdown: workers retry, and reach the next leader. aiohttp's keep-alive
    # timeout also closes a connection whose request headers are not all in by then.
    runner = web.AppRunner(
        api,
        access_log=None,
        shutdown_timeout=1.0,
        keepalive_timeout=config.api_header_timeout_seconds,
    )
    await runner.setup()
    site = web.TCPSite(runner, config.api_host, config.api_port, ssl_context=ssl_context)
    await site.start()
    return Listeners(site.port, site.port, "https" if ssl_context else "http", runner)
