"""A small HTTP endpoint speaking a stream service's JSON protocol, just enough for one
shard reader, whose GetRecords is throttled a set number of times: botocore's real retry
loop runs against it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import cast

from .reader_kinds import ReaderKind


class ThrottlingEndpoint(ThreadingHTTPServer):
    def __init__(self, kind: ReaderKind) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.kind = kind
        self.throttles = 0  # GetRecords calls still to throttle
        self.calls: list[str] = []  # the operations called, in order
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> ThrottlingEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()

    def answer(self, operation: str) -> tuple[int, dict[str, object]]:
        self.calls.append(operation)
        if operation != "GetRecords":
            return 200, {"ShardIterator": "it-1"}
        if self.throttles > 0:
            self.throttles -= 1
            return 400, {"__type": self.kind.wire_error_type}
        return 200, self.kind.wire_page(1)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        endpoint = cast(ThrottlingEndpoint, self.server)
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body = endpoint.answer(self.headers["X-Amz-Target"].split(".")[-1])
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", endpoint.kind.content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass
