"""Simulated time and network: one event queue, one seeded random generator, so a run
is a pure function of its seed and its fault schedule."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

Callback = Callable[[], None]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The wall-clock instant of simulated time 0: when the StreamConsumer was created."""


def wall(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def simulated(instant: datetime) -> float:
    return (instant - EPOCH).total_seconds()


class World:
    def __init__(self, seed: int) -> None:
        self.now = 0.0
        self.rng = random.Random(seed)
        self._queue: list[tuple[float, int, Callback]] = []
        self._order = itertools.count()
        self.steps = 0
        self.after_each: list[Callback] = []

    def at(self, when: float, callback: Callback) -> None:
        heapq.heappush(self._queue, (max(when, self.now), next(self._order), callback))

    def after(self, delay: float, callback: Callback) -> None:
        self.at(self.now + delay, callback)

    def run_until(self, until: float) -> None:
        while self._queue and self._queue[0][0] <= until:
            when, _, callback = heapq.heappop(self._queue)
            self.now = when
            callback()
            self.steps += 1
            for check in self.after_each:
                check()
        self.now = max(self.now, until)


def run_in_process(
    world: World,
    delay: float,
    callback: Callback,
    alive: Callable[[], bool],
    paused_until: Callable[[], float],
) -> None:
    """Runs `callback` after `delay` in a process that may die (then never) or be frozen
    (then once it resumes): a worker or an operator replica."""

    def run() -> None:
        if not alive():
            return
        if world.now < paused_until():
            world.at(paused_until(), run)
            return
        callback()

    world.after(delay, run)


@dataclass
class Link:
    """The network between one worker and the operator."""

    cut_until: float = -1.0  # partitioned: every message in either direction is lost


@dataclass
class Network:
    """Message delays and losses, per worker. A request is delivered after a delay, or
    lost; so is its answer. Lost or late answers time out at the caller."""

    world: World
    delay: tuple[float, float] = (0.001, 0.02)
    loss: float = 0.0
    slow_until: float = -1.0  # during a slow window delays reach `slow_delay`
    slow_delay: float = 1.0
    lossy_until: float = -1.0
    links: dict[str, Link] = field(default_factory=dict)

    def link(self, worker: str) -> Link:
        return self.links.setdefault(worker, Link())

    def transit(self, worker: str) -> float | None:
        """The delay of one message of `worker`'s, None if it is lost."""
        world = self.world
        if world.now < self.link(worker).cut_until:
            return None
        if world.now < self.lossy_until and world.rng.random() < self.loss:
            return None
        high = self.slow_delay if world.now < self.slow_until else self.delay[1]
        return world.rng.uniform(self.delay[0], high)
