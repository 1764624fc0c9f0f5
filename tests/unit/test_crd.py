"""The CRD in crds/ is generated from the pydantic models and must not drift from them."""

from __future__ import annotations

from pathlib import Path

import yaml

from streamconsumer import admission
from streamconsumer.crd import (
    CHART_TEMPLATE,
    chart_template,
    custom_resource_definition,
    render,
    structural_schema,
)
from streamconsumer.models.resource import StreamConsumerSpec

REPO = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    for path, text in (
        (REPO / "crds/streamconsumer.yaml", render()),
        (REPO / CHART_TEMPLATE, chart_template()),
    ):
        assert path.read_text() == text, f"{path}: run `make crds` and commit the result"


def test_the_committed_admission_policy_matches_its_generator() -> None:
    path = REPO / admission.TEMPLATE
    assert path.read_text() == admission.render(), f"{path}: run `make crds` and commit it"


def test_schema_is_structural() -> None:
    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs"):
                assert forbidden not in node, f"{forbidden} at {path}"
            if "properties" in node:
                assert node.get("type") == "object", f"untyped object at {path}"
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")

    walk(custom_resource_definition(), "crd")


def test_cel_rules_reach_the_schema() -> None:
    spec = structural_schema(StreamConsumerSpec)
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert any("AT_TIMESTAMP" in rule for rule in rules)
    kinesis = spec["properties"]["source"]["properties"]["kinesis"]
    assert (
        kinesis["x-kubernetes-validations"][0]["rule"]
        == "has(self.streamName) != has(self.streamARN)"
    )
    assert yaml.safe_load(render())["spec"]["versions"][0]["subresources"]["scale"]
