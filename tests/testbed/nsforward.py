"""A TCP forwarder from inside a network namespace to this machine's loopback.

The apiserver listens on 127.0.0.1 only; the node's kubelet, kube-proxy and pods live in
a network namespace of their own. This process opens its listening socket inside that
namespace (setns, then back) and connects out from the machine's own, so the node
reaches the apiserver at LISTEN without the apiserver listening anywhere but loopback.

    python nsforward.py NETNS_PATH LISTEN_HOST:PORT TARGET_HOST:PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def listen_in(netns: Path, host: str, port: int) -> socket.socket:
    """A listening socket bound inside `netns`; the caller stays in its own namespace."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server((host, port), backlog=256)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def serve(listener: socket.socket, target: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    netns, listen, target = sys.argv[1:4]
    listener = listen_in(Path(netns), *_address(listen))
    print(f"forwarding {listen} in {netns} to {target}", flush=True)
    asyncio.run(serve(listener, _address(target)))


if __name__ == "__main__":
    main()
