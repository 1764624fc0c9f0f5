"""The Go tools the tests build share one version of each module they have in common
(tests/controlplane/go.mod says why: Go's build cache keys a compiled package by its
module's version, so a second version is a second compile of all that depends on it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CONTROL_PLANE = TESTS / "controlplane" / "go.mod"
# The module sets built after the control plane that compile packages it compiles too.
SHARING = ("node/go.mod", "helm/go.mod", "kstatus/go.mod", "kubevalidate/k8s-1.34.mod")

# `module version` in a require block, or `require module version` on its own line; a
# replace line (`=>`) never matches.
REQUIREMENT = re.compile(r"^\s*(?:require\s+)?(\S+\.\S+)\s+(v\S+)(?:\s*// indirect)?$")


def required(go_mod: Path) -> dict[str, str]:
    return {
        match[1]: match[2]
        for line in go_mod.read_text().splitlines()
        if (match := REQUIREMENT.match(line))
    }


@pytest.mark.parametrize("other", SHARING)
def test_a_module_both_require_is_at_one_version(other: str) -> None:
    ours, theirs = required(CONTROL_PLANE), required(TESTS / other)
    assert len(ours.keys() & theirs.keys()) > 10, "the parse found the shared modules"
    differ = {m: (ours[m], theirs[m]) for m in ours.keys() & theirs.keys() if ours[m] != theirs[m]}
    assert not differ, f"{other} and controlplane/go.mod differ: {differ}"


def test_no_staging_module_is_required_at_v0_0_0() -> None:
    """k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them; required
    at v0.0.0 here, a package would be cached apart from the same package in helm's build."""
    zero = [m for m, v in required(CONTROL_PLANE).items() if v == "v0.0.0"]
    assert not zero
