"""bench/results.json: flat `name: number` pairs, merged across benchmark scripts."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"


def record(figures: dict[str, float]) -> None:
    current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    current.update(figures)
    RESULTS.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")


def percentile(values: list[float], p: float) -> float:
    """The value below which the fraction `p` of `values` lies (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]
