"""The release (issue 27) without running it: the tag check, the images' labels and base
pins, and that .github/workflows/release.yml builds what `make release-dry-run` checks.
actionlint runs on the workflows in tests/integration/test_release.py; the whole dry run
is `make release-dry-run`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import streamconsumer
from release import dry_run, sbom, version

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
DOCKERFILES = ["operator/Dockerfile", "worker-image/Dockerfile", "worker-image/Dockerfile.spark"]
DIGEST_PIN = re.compile(r"^ARG PYTHON=(\S+:\S+@sha256:[0-9a-f]{64})$", re.M)


def _release() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    return loaded


def _steps(job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _release()["jobs"][job]["steps"]
    return steps


def _needs(job: dict[str, Any]) -> set[str]:
    need = job.get("needs") or []
    return {need} if isinstance(need, str) else set(need)


def test_the_version_check_takes_the_tag_of_the_version_only() -> None:
    tag = f"v{streamconsumer.__version__}"
    ok = subprocess.run(
        [sys.executable, "-m", "release.version", "--tag", tag],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (ok.returncode, ok.stdout.strip()) == (0, streamconsumer.__version__), ok.stderr
    other = subprocess.run(
        [sys.executable, "-m", "release.version", "--tag", tag + ".1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert other.returncode == 1
    assert f"is not {tag}" in other.stderr


def test_the_version_check_sees_a_chart_of_another_version(tmp_path: Path) -> None:
    for relative in (version.PACKAGE, version.CHART):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    chart = tmp_path / version.CHART
    chart.write_text(re.sub(r"(?m)^appVersion:.*$", 'appVersion: "9.9.9"', chart.read_text()))
    tag = f"v{streamconsumer.__version__}"
    assert version.problems(tag, ROOT) == []
    assert version.problems(tag, tmp_path) == [
        f"{version.CHART} has appVersion 9.9.9, not {streamconsumer.__version__}"
    ]


def test_the_images_pin_one_base_by_digest_and_carry_the_oci_labels() -> None:
    pins = set()
    for dockerfile in DOCKERFILES:
        text = (ROOT / dockerfile).read_text()
        pins.update(DIGEST_PIN.findall(text))
        for arg in ("VERSION", "REVISION", "SOURCE"):
            assert f"\nARG {arg}\n" in text, (dockerfile, arg)
        labels = dict(re.findall(r'org\.opencontainers\.image\.(\w+)="([^"]*)"', text))
        assert set(labels) == set(dry_run.LABELS), dockerfile
        assert (labels["version"], labels["revision"], labels["source"]) == (
            "${VERSION}",
            "${REVISION}",
            "${SOURCE}",
        )
        assert all(labels.values()), dockerfile
        # Last: a new revision rebuilds no layer.
        assert text.index("ARG VERSION") > text.rindex("RUN "), dockerfile
    assert len(pins) == 1, pins


def test_the_workflow_builds_the_images_the_dry_run_checks_with_their_build_args() -> None:
    images = _release()["jobs"]["images"]
    matrix = {m["image"]: m["dockerfile"] for m in images["strategy"]["matrix"]["include"]}
    assert matrix == dry_run.IMAGES
    (build,) = [s for s in _steps("images") if str(s.get("uses", "")).startswith("docker/build-")]
    given = build["with"]
    assert given["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    assert (given["push"], given["sbom"], given["provenance"]) == (True, True, True)
    build_args = {line.split("=", 1)[0] for line in given["build-args"].splitlines()}
    for dockerfile in matrix.values():
        text = (ROOT / dockerfile).read_text()
        label_args = set(re.findall(r'org\.opencontainers\.image\.\w+="\$\{(\w+)\}"', text))
        assert label_args == build_args, dockerfile
    signing = [s["run"] for s in _steps("images") if "cosign sign" in str(s.get("run", ""))]
    assert signing == ['cosign sign --yes "$IMAGE@$DIGEST"']
    assert images["permissions"]["id-token"] == "write"


def test_the_tag_is_checked_before_anything_is_built() -> None:
    jobs = _release()["jobs"]
    (check,) = [s for s in _steps("version") if "run" in s]
    assert 'python -m release.version --tag "$GITHUB_REF_NAME"' in check["run"]
    assert _release()[True] == {"push": {"tags": ["v*"]}}  # YAML reads the key `on` as True
    needs = {name: _needs(job) for name, job in jobs.items()}
    for name in set(jobs) - {"version"}:
        seen: set[str] = set()
        todo = [name]
        while todo:
            for need in needs[todo.pop()] - seen:
                seen.add(need)
                todo.append(need)
        assert "version" in seen, f"{name} may run before the tag is checked"
    pypi = jobs["pypi"]
    assert pypi["environment"]["name"] == "pypi"
    assert pypi["permissions"] == {"id-token": "write"}
    assert set(pypi["needs"]) >= {"dist", "images", "chart"}
    (publish,) = [s for s in pypi["steps"] if "gh-action-pypi-publish" in s.get("uses", "")]
    assert "with" not in publish or "password" not in publish["with"]  # trusted publishing


def test_every_action_is_pinned_to_one_commit() -> None:
    pins: dict[str, set[str]] = {}
    for workflow in sorted(WORKFLOWS.glob("*.yml")):
        for action, ref in re.findall(r"uses:\s*([\w./-]+)@(\S+)", workflow.read_text()):
            pins.setdefault(action, set()).add(ref)
    assert pins, "no action used"
    for action, refs in pins.items():
        (ref,) = refs  # one pin per action
        assert re.fullmatch(r"[0-9a-f]{40}", ref), (action, ref)


def test_the_sbom_check() -> None:
    version_ = streamconsumer.__version__
    ours = {"name": "streamconsumer", "version": version_, "purl": f"pkg:pypi/x@{version_}"}
    good = {"bomFormat": "CycloneDX", "components": [ours]}
    assert sbom.check(good, version_) == []
    assert sbom.check({**good, "components": []}, version_) != []
    unnamed = {"name": "x", "version": "1"}
    assert sbom.check({**good, "components": [ours, unnamed]}, version_) == [
        "x has no version or package URL"
    ]
    from_file = {"name": "streamconsumer", "version": version_}  # a wheel's file, no purl
    assert sbom.check({**good, "components": [from_file]}, version_) == []
    compile(sbom.in_image_script("/tools"), "in-image", "exec")
    compile(sbom.in_image_script("/tools", "/venv/bin/python"), "over-a-venv", "exec")


@pytest.mark.parametrize("script", ["release/pin-bases.sh", "tests/actionlint/build.sh"])
def test_release_scripts_fail_fast(script: str) -> None:
    assert "set -euo pipefail" in (ROOT / script).read_text()
