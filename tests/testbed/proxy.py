"""A TCP proxy that a test can cut: the network partition between one worker and the
operator, on loopback. Its target may be chosen per connection, as a Service's endpoints
follow a label (the operator's leader)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from testbed.processes import free_port


class CuttableProxy:
    """`target`: a port, or a function naming the port for each new connection (None:
    nobody to send it to, the connection is refused)."""

    def __init__(self, target: int | Callable[[], int | None]) -> None:
        self._target = target if callable(target) else (lambda: target)
        self.port = free_port()
        self._cut = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """From now on every connection through the proxy is refused or dropped."""
        self._cut.set()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                target = self._target()
                if target is None:
                    raise ConnectionRefusedError("no endpoint")
                upstream = socket.create_connection(("127.0.0.1", target))
            except Exception:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
