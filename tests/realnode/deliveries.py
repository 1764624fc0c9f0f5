"""Clickstream events that say who they are, and the checks on what the workers logged.

Each event has a page of its own, `/<key>/<n>` (n counts up per partition key, and so per
shard), and a timestamp that grows with n. The example's processor logs one JSON line per
(minute, page) it counted before each checkpoint, so its logs are the record of which
events were processed, by which container, in which order."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from testbed.podlogs import Stream

_VIEW = re.compile(r"logger=clickstream (\{.*\})\s*$")
START = datetime(2026, 11, 22, 14, 0, tzinfo=UTC)

Event = tuple[str, int]  # (partition key, n)


def page(key: str, n: int) -> str:
    return f"/{key}/{n:06d}"


def payload(key: str, n: int) -> bytes:
    ts = (START + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"page": page(key, n), "user": f"u-{n % 97}", "ts": ts}).encode()


@dataclass
class Producer:
    keys: list[str]
    produced: list[Event] = field(default_factory=list)
    _next: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def batch(self, count: int) -> list[tuple[str, bytes]]:
        """`count` more events, round-robin over the keys: (partition key, data)."""
        records = []
        for i in range(count):
            key = self.keys[i % len(self.keys)]
            n = self._next[key]
            self._next[key] += 1
            self.produced.append((key, n))
            records.append((key, payload(key, n)))
        return records


def processed(lines: list[str]) -> list[Event]:
    """The events a container's log says were counted, in log order (a count above one
    is the same event delivered again within one batch)."""
    events: list[Event] = []
    for line in lines:
        match = _VIEW.search(line)
        if not match:
            continue
        view = json.loads(match.group(1))
        _, key, n = str(view["page"]).split("/")
        events += [(key, int(n))] * int(view["views"])
    return events


@dataclass
class Verdict:
    lost: list[Event]
    out_of_order: list[str]
    duplicates: Counter[Event]
    by_stream: dict[Stream, list[Event]]


def judge(produced: list[Event], streams: dict[Stream, list[str]]) -> Verdict:
    """Nothing lost; within each container run, each key's events in order, each once."""
    by_stream = {stream: processed(lines) for stream, lines in streams.items()}
    seen: Counter[Event] = Counter()
    out_of_order = []
    for stream, events in by_stream.items():
        seen.update(events)
        last: dict[str, int] = {}
        for key, n in events:
            if key in last and n <= last[key]:
                out_of_order.append(f"{stream.pod}#{stream.restart}: {key} {n} after {last[key]}")
            last[key] = n
    lost = [event for event in produced if event not in seen]
    duplicates = Counter({event: count - 1 for event, count in seen.items() if count > 1})
    return Verdict(lost, out_of_order, duplicates, by_stream)
