"""Runs a call in a forked child under a memory and time limit, so that a reader of a
tenant's input that would build a trillion shard ids fails its test instead of taking
the machine: RLIMIT_AS for memory, a deadline for time."""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")


class LimitExceeded(AssertionError):
    """The call ran out of its memory or time."""


def within(call: Callable[[], T], seconds: float = 10.0, memory_mib: int = 1024) -> T:
    """call()'s result, or what it raised (both must pickle); LimitExceeded if it used
    more than `memory_mib` of address space more than the parent's, or `seconds`."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            used = _address_space()
            limit = used + memory_mib * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                outcome: tuple[bool, object] = (True, call())
            except MemoryError:
                outcome = (False, LimitExceeded(f"more than {memory_mib} MiB"))
            except BaseException as error:
                outcome = (False, error)
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(outcome, pipe)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], seconds)
        if not ready:
            os.kill(child, signal.SIGKILL)
            raise LimitExceeded(f"more than {seconds}s")
        with os.fdopen(read_end, "rb", closefd=False) as pipe:
            data = pipe.read()
    finally:
        os.close(read_end)
        os.waitpid(child, 0)
    if not data:
        raise LimitExceeded("the child died without an answer")
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    return cast(T, value)


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")
