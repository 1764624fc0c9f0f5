"""How many connections the worker API holds (docs/security.md#connection-bounds): at most
so many from one client address and so many in all; one more is closed as it is accepted,
before any TLS work, and a TLS handshake has a deadline.

`ConnectionLimits` counts (pure). `LimitedSite`, an aiohttp site, accepts connections
itself (asyncio's server would run TLS on each before anyone could look at its address)
and hands the ones admitted to `loop.connect_accepted_socket`. A connection's `Slot` is
released exactly once whichever way it ends: a handshake that fails, times out or is
reset raises from `connect_accepted_socket` (the app's protocol never heard of it); one
that succeeded ends in the app protocol's `connection_lost`, which `_Counted` passes on."""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from typing import Literal

from aiohttp import web

from streamconsumer.controller import metrics

log = logging.getLogger(__name__)

Refusal = Literal["total", "client"]
# After EMFILE (a file limit reached elsewhere in the process): waits, as asyncio's own
# server does, rather than spin.
ACCEPT_RETRY_SECONDS = 1.0
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Slot:
    """One admitted connection's place."""

    def __init__(self, free: Callable[[], None]) -> None:
        self._free: Callable[[], None] | None = free

    def release(self) -> None:
        """Idempotent: a connection may be seen ending by more than one path."""
        free, self._free = self._free, None
        if free is not None:
            free()


class ConnectionLimits:
    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self._open: Counter[str] = Counter()  # only clients with a connection: <= total keys

    @property
    def open_total(self) -> int:
        return self._open.total()

    def open_from(self, client: str) -> int:
        return self._open[client]

    def admit(self, client: str) -> Slot | Refusal:
        if self.open_total >= self.total:
            return "total"
        if self._open[client] >= self.per_client:
            return "client"
        self._open[client] += 1
        return Slot(functools.partial(self._release, client))

    def _release(self, client: str) -> None:
        self._open[client] -= 1
        if self._open[client] <= 0:
            del self._open[client]


def within_open_files(wanted: int, soft_limit: int) -> int:
    """The total cap, kept to half the process' open-file limit (`soft_limit`, negative
    if none): the rest is for the probes, the Kubernetes and AWS clients, kopf and the
    process' own files."""
    if soft_limit < 0:  # RLIM_INFINITY
        return wanted
    return max(1, min(wanted, soft_limit // 2))


class _Counted(asyncio.Protocol):
    """The app's protocol, passed every event; its slot released when it is lost."""

    def __init__(self, app: asyncio.Protocol, slot: Slot) -> None:
        self._app, self._slot = app, slot

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._app.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._app.connection_lost(exc)
        finally:
            self._slot.release()

    def data_received(self, data: bytes) -> None:
        self._app.data_received(data)

    def eof_received(self) -> bool | None:
        return self._app.eof_received()

    def pause_writing(self) -> None:
        self._app.pause_writing()

    def resume_writing(self) -> None:
        self._app.resume_writing()


class LimitedSite(web.BaseSite):
    """A TCP site of `runner` whose connections `limits` bounds. With `ssl_context`, a
    handshake not done within `handshake_timeout` is abandoned, and a closing connection
    waits no longer than `shutdown_timeout` for the client's TLS close (asyncio's default
    is 30 s, a file held that long by a client that reads nothing). `listener` names it
    in the refusals metric."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        limits: ConnectionLimits,
        listener: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
        shutdown_timeout: float | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        factory = runner.server
        assert factory is not None  # BaseSite refuses a runner not set up
        self._factory: Callable[[], asyncio.Protocol] = factory
        self._host, self._port, self._queue = host, port, backlog
        self._tls = ssl_context
        self._handshake_timeout, self._shutdown_timeout = handshake_timeout, shutdown_timeout
        self.limits, self.listener = limits, listener
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port once started (`port` 0 binds any)."""
        return int(self._socket.getsockname()[1]) if self._socket else self._port

    @property
    def accepting(self) -> bool:
        """Whether it accepts connections: started, not stopped, its accept loop alive."""
        return self._accepting is not None and not self._accepting.done()

    async def start(self) -> None:
        await super().start()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listening = socket.create_server(
            (self._host, self._port), family=family, backlog=self._queue
        )
        listening.setblocking(False)
        self._socket = listening
        self._accepting = asyncio.create_task(self._accept(listening))

    async def stop(self) -> None:
        tasks = [t for t in (self._accepting, *self._handshakes) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._socket is not None:
            self._socket.close()
        await super().stop()

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, address = await loop.sock_accept(listening)
            except OSError as error:
                if error.errno in _OUT_OF_RESOURCES:
                    log.error("%s: cannot accept: %s", self.name, error)
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            self._admit(connection, str(address[0]))

    def _admit(self, connection: socket.socket, client: str) -> None:
        slot = self.limits.admit(client)
        if isinstance(slot, Slot):
            task = asyncio.create_task(self._connect(connection, client, slot))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)
            return
        metrics.API_CONNECTIONS_REFUSED.labels(self.listener, slot).inc()
        connection.close()  # at once: no TLS work, no file held

    async def _connect(self, connection: socket.socket, client: str, slot: Slot) -> None:
        """Hands an admitted connection to asyncio (TLS first, if any). If that fails,
        the app's protocol never saw the connection: its slot is released here."""
        connected = False
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Counted(self._factory(), slot),
                connection,
                ssl=self._tls,
                ssl_handshake_timeout=self._handshake_timeout if self._tls else None,
                ssl_shutdown_timeout=self._shutdown_timeout if self._tls else None,
            )
            connected = True
        except (OSError, ssl.SSLError, TimeoutError) as error:  # its end, not ours
            log.debug("%s: a connection from %s ended early: %r", self.name, client, error)
        finally:
            if not connected:
                connection.close()
                slot.release()
