"""The worker API's connection caps (`connection_limits`): the count itself, and a slot
released whichever way a connection ends, on the operator's real listeners over
loopback with real TLS from its serving context (a failed, reset or timed-out handshake
never reaches the app's protocol, so its slot must be released another way)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import http.client
import resource
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from streamconsumer.controller.certificates import tls
from streamconsumer.controller.certificates.serving import ManagedServing
from streamconsumer.controller.config import OperatorConfig
from streamconsumer.controller.worker_api.connection_limits import (
    ConnectionLimits,
    Slot,
    within_open_files,
)
from streamconsumer.controller.worker_api.listeners import SHUTDOWN_SECONDS, Listeners, listen
from testbed.processes import free_port

from .test_api_connections import PARTIAL_HELLO

HOST = "127.0.0.1"
PER_CLIENT, TOTAL = 2, 4
HEADER_TIMEOUT = 0.5
NOW = dt.datetime.now(dt.UTC)


def test_a_client_gets_its_share_and_all_together_the_total() -> None:
    limits = ConnectionLimits(total=3, per_client=2)
    a1, a2 = limits.admit("a"), limits.admit("a")
    assert isinstance(a1, Slot)
    assert isinstance(a2, Slot)
    assert limits.admit("a") == "client"
    b1 = limits.admit("b")
    assert isinstance(b1, Slot)
    assert limits.admit("c") == "total"
    a1.release()
    a1.release()  # a second release of one slot frees nothing more
    assert (limits.open_total, limits.open_from("a")) == (2, 1)
    assert isinstance(limits.admit("c"), Slot)


def test_clients_without_a_connection_are_forgotten() -> None:
    limits = ConnectionLimits(total=10, per_client=1)
    for client in range(1000):
        slot = limits.admit(str(client))
        assert isinstance(slot, Slot)
        slot.release()
    assert limits.open_total == 0
    assert limits.open_from("999") == 0


def test_the_total_is_kept_to_half_the_open_file_limit() -> None:
    assert within_open_files(4096, 1_048_576) == 4096
    assert within_open_files(4096, 1024) == 512
    assert within_open_files(4096, 1) == 1
    assert within_open_files(4096, resource.RLIM_INFINITY) == 4096


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[Listeners, ssl.SSLContext]]:
    """The operator's listeners (`listen`), HTTPS from a ManagedServing, a trusting client
    context."""
    config = OperatorConfig(
        api_host=HOST,
        api_port=free_port(),
        probe_port=0,
        api_header_timeout_seconds=HEADER_TIMEOUT,
        api_max_connections_per_client=PER_CLIENT,
        api_max_connections=TOTAL,
    )
    serving = ManagedServing(tls.make_ca(NOW), ["localhost", HOST], NOW)
    app = web.Application()
    app.router.add_get("/healthz", _ok)
    listeners = await listen(config, app, serving.context)
    trusting = ssl.create_default_context(cadata=serving.ca_pem.decode())
    try:
        yield listeners, trusting
    finally:
        await listeners.stop()


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def connect(port: int, source: str = HOST) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=5, source_address=(source, 0))


def until_closed(sock: socket.socket) -> None:
    """Reads until the server closes (or resets) the connection."""
    with contextlib.suppress(ConnectionResetError, ssl.SSLError):
        while sock.recv(4096):
            pass


def reset(sock: socket.socket) -> None:
    """Closes with a TCP RST, as a crashed or hostile client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def silent(port: int, trusting: ssl.SSLContext) -> None:
    with connect(port) as sock:  # never says hello: the handshake times out
        until_closed(sock)


def reset_in_handshake(port: int, trusting: ssl.SSLContext) -> None:
    sock = connect(port)
    sock.sendall(PARTIAL_HELLO)
    time.sleep(0.05)
    reset(sock)


def not_tls(port: int, trusting: ssl.SSLContext) -> None:
    with connect(port) as sock:  # the handshake fails at once
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        until_closed(sock)


def distrusting(port: int, trusting: ssl.SSLContext) -> None:
    other = ssl.create_default_context(cadata=tls.make_ca(NOW).cert_pem.decode())
    with connect(port) as sock, pytest.raises(ssl.SSLCertVerificationError):
        other.wrap_socket(sock, server_hostname=HOST)  # the client aborts the handshake


def reset_after_handshake(port: int, trusting: ssl.SSLContext) -> None:
    reset(trusting.wrap_socket(connect(port), server_hostname=HOST))


def idle_after_handshake(port: int, trusting: ssl.SSLContext) -> None:
    with trusting.wrap_socket(connect(port), server_hostname=HOST) as sock:
        until_closed(sock)  # no request: closed after the header timeout


def answered(port: int, trusting: ssl.SSLContext) -> None:
    connection = http.client.HTTPSConnection(HOST, port, timeout=5, context=trusting)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    connection.close()


async def released(listeners: Listeners, within: float = 2.0) -> int:
    """What the API still counts once the connections' ends have run (polled `within`)."""
    for _ in range(int(within / 0.02)):
        if listeners.api_limits.open_total == 0:
            break
        await asyncio.sleep(0.02)
    return listeners.api_limits.open_total


Client = Callable[[int, ssl.SSLContext], None]


@pytest.mark.parametrize(
    "client",
    [
        silent,
        reset_in_handshake,
        not_tls,
        distrusting,
        reset_after_handshake,
        idle_after_handshake,
        answered,
    ],
)
def test_a_connection_gives_its_slot_back_however_it_ends(client: Client) -> None:
    async def run() -> list[int]:
        async with serving() as (listeners, trusting):
            left = []
            for _ in range(2):  # a slot not given back would refuse the second round
                calls = [
                    asyncio.to_thread(client, listeners.api_port, trusting)
                    for _ in range(PER_CLIENT)
                ]
                await asyncio.gather(*calls)
                left.append(await released(listeners))
            return left

    assert asyncio.run(run()) == [0, 0]


def test_one_past_a_cap_is_closed_at_once_and_counts_nothing() -> None:
    async def run() -> tuple[float, int, float]:
        async with serving() as (listeners, trusting):
            port = listeners.api_port
            held = [connect(port) for _ in range(PER_CLIENT)]
            held += [connect(port, "127.0.0.2") for _ in range(TOTAL - PER_CLIENT)]
            await asyncio.sleep(0.1)
            began = time.monotonic()
            await asyncio.to_thread(until_closed, connect(port))  # its client's cap
            await asyncio.to_thread(until_closed, connect(port, "127.0.0.3"))  # the total
            refused_in = time.monotonic() - began
            counted = listeners.api_limits.open_total
            for sock in held:
                sock.close()
            await released(listeners)
            began = time.monotonic()
            await asyncio.to_thread(answered, port, trusting)
            return refused_in, counted, time.monotonic() - began

    refused_in, counted, answered_in = asyncio.run(run())
    # Held to the handshake timeout, the two would take 2 x HEADER_TIMEOUT at least.
    assert refused_in < 2 * HEADER_TIMEOUT, "closed at once, not at the handshake timeout"
    assert counted == TOTAL
    assert answered_in < 1


def test_a_client_that_never_answers_the_tls_close_is_let_go() -> None:
    """asyncio waits 30 s by default for the peer's close_notify before it closes the
    socket: a client that finishes its handshake and then reads nothing held its file
    30 s past the header timeout."""

    async def run() -> float:
        async with serving() as (listeners, trusting):
            port = listeners.api_port
            deaf = await asyncio.to_thread(
                trusting.wrap_socket, connect(port), server_hostname=HOST
            )
            began = time.monotonic()
            await released(listeners, within=5.0)
            deaf.close()
            return time.monotonic() - began

    held = asyncio.run(run())
    print(f"a deaf client's slot given back after {held:.2f} s")
    assert held < HEADER_TIMEOUT + SHUTDOWN_SECONDS + 0.5


def test_stopping_gives_back_every_slot() -> None:
    async def run() -> tuple[int, int]:
        async with serving() as (listeners, trusting):
            port = listeners.api_port
            handshaking = connect(port)
            connected = await asyncio.to_thread(
                trusting.wrap_socket, connect(port), server_hostname=HOST
            )
            await asyncio.sleep(0.1)
            held = listeners.api_limits.open_total
            await listeners.stop()
            left = await released(listeners)
            handshaking.close()
            connected.close()
            return held, left

    assert asyncio.run(run()) == (2, 0)
