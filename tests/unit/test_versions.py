"""One version for the package, its images and its chart (issue 27): they disagreed
(package 0.1.0, chart 0.2.0, image tag 0.1.0)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import streamconsumer

ROOT = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def test_the_package_image_and_chart_share_one_semantic_version() -> None:
    version = streamconsumer.__version__
    assert SEMVER.match(version), version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"]["attr"] == (
        "streamconsumer.__version__"
    )
    chart = yaml.safe_load((ROOT / "charts/streamconsumer/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts/streamconsumer/values.yaml").read_text())
    assert (chart["version"], chart["appVersion"], values["image"]["tag"]) == (version,) * 3


def test_the_changelog_has_a_place_for_it() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog or f"## [{streamconsumer.__version__}]" in changelog


def test_every_image_reference_of_ours_names_the_version() -> None:
    """The examples' default base images and the worker image's usage said 0.1.0 after
    the version moved on: a user building them got the previous release's worker."""
    ours = re.compile(r"ghcr\.io/streamconsumer/[a-z-]+:([0-9][0-9A-Za-z.-]*)")
    found = [
        (path.relative_to(ROOT).as_posix(), tag)
        for path in [*ROOT.glob("**/Dockerfile*"), *ROOT.glob("*.md"), *ROOT.glob("docs/*.md")]
        if "node_modules" not in path.parts and "releases" not in path.parts
        for tag in ours.findall(path.read_text())
    ]
    assert found, "the worker image's usage names one"
    assert [(path, tag) for path, tag in found if tag != streamconsumer.__version__] == []
