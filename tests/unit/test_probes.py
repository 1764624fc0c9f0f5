"""The operator's probes: liveness asks whether the process' event loop answers,
readiness whether the worker API accepts connections, so the two fail for different
things (and neither on leadership: a standby is Ready, docs/high-availability.md)."""

from __future__ import annotations

import asyncio
import http.client

from aiohttp import web

from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.worker_api.listeners import LIVENESS_PATH, READINESS_PATH, listen
from testbed.processes import free_port

HOST = "127.0.0.1"


def status_of(port: int, path: str) -> int:
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_ready_while_the_api_accepts_and_alive_while_the_loop_answers() -> None:
    async def run() -> list[tuple[int, int]]:
        config = OperatorConfig(api_host=HOST, api_port=free_port(), probe_port=free_port())
        listeners = await listen(config, web.Application(), None)
        seen = []
        try:
            for step in ("serving", "api stopped"):
                if step == "api stopped":
                    await listeners.api_site.stop()  # accepts no more connections
                seen.append(
                    (
                        await asyncio.to_thread(status_of, listeners.probe_port, LIVENESS_PATH),
                        await asyncio.to_thread(status_of, listeners.probe_port, READINESS_PATH),
                    )
                )
        finally:
            await listeners.stop()
        return seen

    assert LIVENESS_PATH != READINESS_PATH
    assert asyncio.run(run()) == [(200, 200), (200, 503)]
