"""The operator's listeners in a process of their own, with few open files, for
tests/unit/test_api_connections.py: `python listening_operator.py <open-file limit>`.

Serves the worker API as `listeners.listen` does, over HTTPS from a `ManagedServing`
context (the operator's own), with the settings in the STREAMCONSUMER_* environment;
prints one JSON line (its ports, the probes' URL, the CA), then serves until its stdin
closes. Tokens are all refused: this side of the API is about connections."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import resource
import sys
import time

from streamconsumer.controller.certificates import tls
from streamconsumer.controller.certificates.serving import ManagedServing
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.consumer.registry import Registry
from streamconsumer.controller.worker_api.api import WorkerApi
from streamconsumer.controller.worker_api.caller import Caller
from streamconsumer.controller.worker_api.listeners import listen


class Refusing:
    async def review(self, token: str, source: str) -> Caller | None:
        return None


async def serve(config: OperatorConfig) -> None:
    now = dt.datetime.now(dt.UTC)
    serving = ManagedServing(tls.make_ca(now), ["localhost", "127.0.0.1"], now)
    registry = Registry(time.monotonic, 0.0)
    registry.leading()
    api = WorkerApi(registry, Refusing(), time.monotonic)
    listeners = await listen(config, api.app(), serving.context)
    host = config.api_host
    ready = {
        "api": listeners.api_port,
        "probe": f"{listeners.probe_scheme}://{host}:{listeners.probe_port}/healthz",
        "ca": serving.ca_pem.decode(),
    }
    print(json.dumps(ready), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await listeners.stop()


if __name__ == "__main__":
    limit = int(sys.argv[1])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    asyncio.run(serve(OperatorConfig()))
