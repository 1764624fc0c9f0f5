"""Generates the StreamConsumer CustomResourceDefinition from the pydantic models.

`python -m streamconsumer.crd` prints it; `make crds` writes `crds/streamconsumer.yaml`,
and a test fails when the file and the models drift apart."""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml

from streamconsumer.models import GROUP, KIND, PLURAL, VERSION, kubernetes_schemas
from streamconsumer.models.base import ADDED_SINCE
from streamconsumer.models.resource import StreamConsumerSpec, StreamConsumerStatus

# Keywords of pydantic's JSON Schema that OpenAPI v3 structural schemas do not take.
_DROPPED = {"title", "$defs"}


def _inner(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema of the property at the dotted `path` inside `schema`."""
    for name in path.split("."):
        schema = schema["properties"][name]
    return schema


def structural_schema(model: type[Any]) -> dict[str, Any]:
    """The model's JSON Schema, rewritten as a Kubernetes structural OpenAPI v3 schema:
    references inlined, optionals unwrapped, exclusive bounds in OpenAPI 3.0 form."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.get("$defs", {})

    def convert(node: dict[str, Any]) -> dict[str, Any]:
        if "x-kubernetes-schema" in node:  # a Pod field: Kubernetes' own schema
            kind = copy.deepcopy(kubernetes_schemas.schema(node["x-kubernetes-schema"]))
            for path, limit in node.get("x-kubernetes-max-items", {}).items():
                _inner(kind, path)["maxItems"] = limit
            field = {"type": "array", "items": kind} if node["x-kubernetes-many"] else dict(kind)
            field.update({k: node[k] for k in ("description", "maxItems") if k in node})
            return field
        if "$ref" in node:
            target = definitions[node["$ref"].split("/")[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return convert(merged)
        if "anyOf" in node:
            # `X | None`: optional fields are simply not required; None is never written.
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express a union in a structural schema: {node}")
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if rest.get("default", ...) is None:
                del rest["default"]
            return convert({**options[0], **rest})
        if node.get("x-kubernetes-preserve-unknown-fields"):
            free_form: dict[str, Any] = {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            }
            if "description" in node:
                free_form["description"] = node["description"]
            return free_form
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED or key == ADDED_SINCE:
                continue
            if key == "default" and ADDED_SINCE in node:
                # No default in the CRD: the apiserver would write it into every object,
                # and the previous release's operator, which refuses fields it does not
                # know, could not read a single StreamConsumer during a rolling upgrade
                # (docs/upgrades.md#operator-and-workers-of-different-versions). Our
                # model supplies the default.
                continue
            if key == "properties":
                out[key] = {name: convert(child) for name, child in value.items()}
            elif key == "items":
                out[key] = convert(value)
            elif key == "additionalProperties":
                if isinstance(value, dict):
                    out[key] = convert(value)
                # `false` (extra="forbid") is the structural default: unknown fields are pruned.
            elif key in ("exclusiveMinimum", "exclusiveMaximum"):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound] = value
                out[key] = True
            elif key == "const":
                out["enum"] = [value]
            else:  # a copy: a model used twice must not come out as a YAML alias
                out[key] = copy.deepcopy(value)
        return out

    return convert(schema)


def custom_resource_definition() -> dict[str, Any]:
    spec = structural_schema(StreamConsumerSpec)
    status = structural_schema(StreamConsumerStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                # Not "sc": kubectl resolves it to StorageClasses, a built-in.
                "shortNames": ["stc"],
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.labelSelector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Shards", "type": "integer", "jsonPath": ".status.shards"},
                        {"name": "Workers", "type": "integer", "jsonPath": ".status.replicas"},
                        {"name": "Lag(ms)", "type": "integer", "jsonPath": ".status.lagMillis"},
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {
                            "name": "Reason",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
                        },
                        {
                            # A bounded consumer's (spec.end); empty for the others.
                            "name": "Complete",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Complete")].status',
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A consumer of a sharded stream, run by worker pods.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


HEADER = "# Generated from operator/streamconsumer/models by `make crds`. Do not edit.\n"
CHART_TEMPLATE = "charts/streamconsumer/templates/crd.yaml"


def render() -> str:
    return HEADER + yaml.safe_dump(custom_resource_definition(), sort_keys=False, width=100)


# `crds.install` (charts/streamconsumer/templates/_helpers.tpl): true where the values
# have no `crds`, as a release upgraded with --reuse-values from 0.1.x has.
CRDS_INSTALL = '{{- if eq (include "streamconsumer.installCRD" .) "true" }}\n'


def chart_template() -> str:
    """The chart's copy: a template, not a file of the chart's crds/ folder, which
    `helm upgrade` never updates; kept by `helm uninstall`, since deleting the CRD would
    delete every StreamConsumer and its checkpoints (docs/upgrades.md)."""
    crd = custom_resource_definition()
    crd["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    body = yaml.safe_dump(crd, sort_keys=False, width=100)
    return HEADER + CRDS_INSTALL + body + "{{- end }}\n"


if __name__ == "__main__":
    sys.stdout.write(chart_template() if sys.argv[1:] == ["--chart"] else render())
