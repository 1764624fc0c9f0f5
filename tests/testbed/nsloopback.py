"""Runs a server that cannot be told where to listen so that only this machine's loopback
reaches it.

DynamoDB Local listens on every interface and has no option to change that. This program
is started under `unshare --net` (plus `--user --map-root-user` when not root), so it and
the server it starts live in a network namespace of their own that has nothing but its
own loopback. It inherits a socket that its parent bound to 127.0.0.1 in the machine's
namespace (a socket stays in the namespace it was made in), and forwards what arrives
there to the server's port on the namespace's loopback. Nothing else can reach the
server; when the server exits, so does this program, and the kernel frees the namespace.

    unshare --net -- python -m testbed.nsloopback LISTEN_FD TARGET_PORT -- ARGV...
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import signal
import socket
import struct
import subprocess
import sys

from testbed.nsforward import serve

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up() -> None:
    """`ip link set lo up` in this namespace, without needing iproute2."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


async def run(listener: socket.socket, target_port: int, child: subprocess.Popen[bytes]) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    forwarding = asyncio.create_task(serve(listener, ("127.0.0.1", target_port)))
    while child.poll() is None and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
    forwarding.cancel()
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def main() -> None:
    listen_fd, target_port, separator, *argv = sys.argv[1:]
    if separator != "--" or not argv:
        sys.exit(__doc__)
    loopback_up()
    listener = socket.socket(fileno=int(listen_fd))
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    sys.exit(asyncio.run(run(listener, int(target_port), child)))


if __name__ == "__main__":
    main()
