"""A TCP forwarder from this machine's loopback into a network namespace: the reverse of
tests/testbed/nsforward.py. DynamoDB Local has no bind-address option and listens on every
interface, so it runs in a namespace that has only a loopback; KCL reaches it through this
process, which listens on 127.0.0.1 and opens each upstream socket inside the namespace.

    python -m bench.peers.forward NETNS_PATH LISTEN_PORT TARGET_PORT
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from testbed.nsforward import _pump, _setns


def socket_in(netns: str) -> socket.socket:
    """A TCP socket made inside `netns` (it stays there); the caller stays in its own."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


async def serve(listen_port: int, netns: str, target_port: int) -> None:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = socket_in(netns)
        upstream.setblocking(False)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await loop.sock_connect(upstream, ("127.0.0.1", target_port))
        except OSError:
            upstream.close()
            writer.close()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(sock=upstream)
        await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=256)
    async with server:
        await server.serve_forever()


def main() -> None:
    netns, listen, target = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(f"forwarding 127.0.0.1:{listen} to 127.0.0.1:{target} in {netns}", flush=True)
    asyncio.run(serve(listen, netns, target))


if __name__ == "__main__":
    main()
