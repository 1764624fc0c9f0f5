"""Clickstream events as a producer would send them, for the demo and the tests."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup")


def make_events(count: int, seed: int, start: datetime | None = None) -> list[bytes]:
    """`count` events spread over a few minutes from `start`: page, user, timestamp."""
    rng = random.Random(seed)
    start = start or datetime(2026, 11, 22, 14, 0, tzinfo=UTC)
    return [
        json.dumps(
            {
                "page": rng.choice(PAGES),
                "user": f"u-{rng.randrange(1000)}",
                "ts": (start + timedelta(seconds=rng.randrange(300))).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            }
        ).encode()
        for _ in range(count)
    ]


def expected_page_views(events: list[bytes]) -> Counter[tuple[str, str]]:
    """What a correct pipeline reports: views per (minute, page), each event once."""
    views: Counter[tuple[str, str]] = Counter()
    for raw in events:
        event = json.loads(raw)
        views[(event["ts"][:16], event["page"])] += 1
    return views
