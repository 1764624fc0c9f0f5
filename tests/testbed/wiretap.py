"""An HTTP forwarder in front of a service that notes who signed each request (the
access key of its SigV4 Authorization header) and what it asked (X-Amz-Target), then
passes it on as it came: which identity a client's calls reached the service as."""

from __future__ import annotations

import http.client
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Signed:
    access_key: str  # "" for an unsigned request
    target: str  # X-Amz-Target, e.g. Kinesis_20131202.ListShards


class Wiretap:
    """Listens on 127.0.0.1 (a free port) and forwards to `target_port` there."""

    def __init__(self, target_port: int) -> None:
        self.seen: list[Signed] = []
        lock = threading.Lock()
        seen = self.seen

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # botocore keeps its connections open

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                key = _CREDENTIAL.search(self.headers.get("Authorization", ""))
                with lock:
                    seen.append(
                        Signed(key.group(1) if key else "", self.headers.get("X-Amz-Target", ""))
                    )
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
                try:
                    upstream.request("POST", self.path, body, dict(self.headers.items()))
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test reads `seen`, not a log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def signers(self) -> set[str]:
        """The access keys that signed the requests seen so far."""
        return {signed.access_key for signed in self.seen}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
