"""Kubernetes' own schemas for the pod template fields of a StreamConsumer, so the CRD
validates them exactly as the apiserver validates a Pod (rather than by hand-written
copies). `kubernetes-v1.34.json` beside this file holds them, extracted from Kubernetes'
published OpenAPI v3 document and made structural (references inlined, descriptions
dropped to keep the CRD small):

    python -m streamconsumer.models.kubernetes_schemas \\
        ~/go/pkg/mod/k8s.io/kubernetes@v1.34.4/api/openapi-spec/v3/api__v1_openapi.json

(`make controlplane` fetches that module.) The CRD generator reads the file; nothing at
run time does."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

VERSION = "v1.34"
PATH = Path(__file__).with_name(f"kubernetes-{VERSION}.json")
CORE = "io.k8s.api.core.v1."
ROOTS = [
    CORE + name
    for name in (
        "Affinity",
        "EnvFromSource",
        "EnvVarSource",
        "LocalObjectReference",
        "PodSecurityContext",
        "Toleration",
        "TopologySpreadConstraint",
        "Volume",
        "VolumeMount",
    )
]
_KEPT = {
    "type",
    "format",
    "enum",
    "required",
    "items",
    "properties",
    "additionalProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}
_INT_OR_STRING = {"x-kubernetes-int-or-string": True}


def structural(definitions: dict[str, Any], name: str, seen: tuple[str, ...] = ()) -> Any:
    """One definition, references inlined, reduced to what a structural schema takes."""
    if name in seen:  # a recursive type: accept what the apiserver would (none in a pod)
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return _convert(definitions, definitions[name], (*seen, name))


def _convert(definitions: dict[str, Any], node: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if "$ref" in node:
        return structural(definitions, node["$ref"].rsplit("/", 1)[-1], seen)
    if "allOf" in node:
        (only,) = node["allOf"]
        return _convert(definitions, only, seen)
    if "oneOf" in node or node.get("format") == "int-or-string":
        return dict(_INT_OR_STRING)  # IntOrString, Quantity
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEPT:
            continue
        if key == "properties":
            out[key] = {k: _convert(definitions, v, seen) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(definitions, value, seen)
        else:
            out[key] = value
    if "properties" in out or "additionalProperties" in out:
        out.setdefault("type", "object")
    return out


@functools.cache
def schemas() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PATH.read_text())
    return loaded


def schema(name: str) -> Any:
    """The structural schema of a core/v1 type, e.g. "Toleration"."""
    return schemas()[CORE + name]


def main(openapi: str) -> None:
    definitions = json.loads(Path(openapi).read_text())["components"]["schemas"]
    extracted = {name: structural(definitions, name) for name in ROOTS}
    PATH.write_text(json.dumps(extracted, indent=1, sort_keys=True) + "\n")
    print(f"{PATH}: {len(extracted)} schemas, {PATH.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main(sys.argv[1])
