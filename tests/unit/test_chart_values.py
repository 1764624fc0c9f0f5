"""tests/helm/every-option.yaml sets every value the chart has, so the chart's rendering
with each option on is validated against every Kubernetes minor
(tests/integration/test_chart_kubernetes_versions.py): a new value must be added there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted paths of the settings: a non-empty map's keys are settings of their own."""
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths |= leaves(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_every_option_sets_every_value_of_the_chart() -> None:
    defaults = yaml.safe_load((REPO / "charts" / "streamconsumer" / "values.yaml").read_text())
    every = yaml.safe_load((REPO / "tests" / "helm" / "every-option.yaml").read_text())
    set_paths = leaves(every)
    missing = {
        path
        for path in leaves(defaults)
        if path not in set_paths and not any(p.startswith(f"{path}.") for p in set_paths)
    }
    assert not missing, f"tests/helm/every-option.yaml does not set: {sorted(missing)}"
