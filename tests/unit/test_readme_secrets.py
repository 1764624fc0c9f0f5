"""The Secrets the README's install creates are the ones it and the examples reference
(an example's commented-out `envFrom` included: it is what a user uncomments), so
following the README gives a consumer its credentials."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CREATED = re.compile(r"create secret generic ([\w.-]+)")
# `secretRef: {name: x}` (YAML, a comment included) and `"secretRef":{"name":"x"}` (JSON).
REFERENCED = re.compile(r"""secretRef"?:\s*\{\s*"?name"?:\s*"?([\w.-]+)""")
DEFINED = re.compile(r"^kind: Secret\n(?:.*\n)*?\s+name: ([\w.-]+)", re.MULTILINE)


def secret_problems(readme: str, examples: dict[str, str]) -> list[str]:
    created = set(CREATED.findall(readme))
    defined = {name for text in examples.values() for name in DEFINED.findall(text)}
    references = {"README.md": readme, **examples}
    problems = [
        f"{where} references Secret {name!r}, which the README neither creates nor an "
        "example defines"
        for where, text in references.items()
        for name in REFERENCED.findall(text)
        if name not in created | defined
    ]
    used = {name for text in references.values() for name in REFERENCED.findall(text)}
    problems += [
        f"the README creates Secret {name!r}, which nothing references"
        for name in sorted(created - used)
    ]
    return problems


def test_the_readme_creates_the_secrets_the_examples_reference() -> None:
    examples = {
        str(path.relative_to(REPO)): path.read_text()
        for path in sorted((REPO / "examples").rglob("*.yaml"))
    }
    assert CREATED.findall((REPO / "README.md").read_text())
    assert secret_problems((REPO / "README.md").read_text(), examples) == []


def test_the_secret_check_can_fail() -> None:
    readme = "kubectl create secret generic aws-credentials\n"
    examples = {
        "a.yaml": "# envFrom:\n#   - secretRef: {name: other-credentials}\n",
        "b.yaml": "kind: Secret\nmetadata:\n  name: local\n---\n"
        "envFrom: [{secretRef: {name: local}}]\n",
    }
    assert secret_problems(readme, examples) == [
        "a.yaml references Secret 'other-credentials', which the README neither creates nor "
        "an example defines",
        "the README creates Secret 'aws-credentials', which nothing references",
    ]
