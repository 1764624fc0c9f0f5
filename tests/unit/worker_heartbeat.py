"""One heartbeat to the operator's worker API, in process (aiohttp's test server)."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from streamconsumer.controller.worker_api.api import WorkerApi


def heartbeat_answer(api: WorkerApi, token: str = "t") -> tuple[int, str | None]:
    """Worker w's heartbeat to consumer n/c, with `token`: the answer's status and its
    Retry-After."""

    async def call() -> tuple[int, str | None]:
        async with TestClient(TestServer(api.app())) as client:
            response = await client.post(
                "/v1/namespaces/n/streamconsumers/c/heartbeat",
                json={"worker": "w"},
                headers={"Authorization": f"Bearer {token}"},
            )
            return response.status, response.headers.get("Retry-After")

    return asyncio.run(call())
