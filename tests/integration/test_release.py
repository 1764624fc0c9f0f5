"""The release workflow cannot run here (issue 27): actionlint checks .github/workflows, with
shellcheck on every `run:` script, and shellcheck the release's own scripts. The tools are
built or installed once (tests/actionlint/build.sh, cached); the whole dry run is
`make release-dry-run`."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["release/pin-bases.sh", "tests/actionlint/build.sh", "tests/go-tool.sh"]


def _actionlint() -> str:
    built = subprocess.run(
        [str(ROOT / "tests/actionlint/build.sh")],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return built.stdout.strip().splitlines()[-1]


def test_actionlint_and_shellcheck_pass_on_the_workflows_and_release_scripts() -> None:
    actionlint = _actionlint()
    workflows = sorted(str(p) for p in (ROOT / ".github/workflows").glob("*.yml"))
    assert len(workflows) >= 2, workflows
    linted = subprocess.run(
        [actionlint, "-no-color", *workflows],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert linted.returncode == 0, linted.stdout + linted.stderr
    checked = subprocess.run(
        ["shellcheck", "-x", *SCRIPTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_actionlint_sees_a_broken_workflow(tmp_path: Path) -> None:
    """That the check above can fail: a job needing one that does not exist, and an
    unquoted expansion shellcheck reports."""
    broken = (ROOT / ".github/workflows/release.yml").read_text()
    broken = broken.replace("needs: [version, dist, images, chart]", "needs: [version, nope]")
    broken = broken.replace(
        'cosign sign --yes "$IMAGE@$DIGEST"', "cosign sign --yes $IMAGE@$DIGEST"
    )
    workflow = tmp_path / ".github/workflows/release.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(broken)
    subprocess.run(["git", "init", "--quiet", str(tmp_path)], check=True, timeout=60)
    linted = subprocess.run(
        [_actionlint(), "-no-color", str(workflow)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert linted.returncode == 1
    assert 'needs job "nope" which does not exist' in linted.stdout
    assert "SC2086" in linted.stdout
