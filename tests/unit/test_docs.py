"""The docs and the tree agree.

- Every citation of a design point names a heading of docs/design.md, in one form:
  `docs/design.md#<anchor>` (GitHub's anchor of the heading). A citation of a heading that
  does not exist fails, and so does any citation of the old, numbered design document.
- Every module, file and test the developer docs name exists, so a rename that forgets
  the docs fails here rather than misleading the next reader."""

from __future__ import annotations

import ast
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
# The docs that name modules, files and tests; each name must exist.
DEVELOPER_DOCS = ("docs/architecture.md", "docs/design.md", "docs/simulation.md", "CONTRIBUTING.md")

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".tpl", ".sh", ".txt", ".lua"}
TEXT_NAMES = {"Makefile", "Dockerfile", "Dockerfile.spark", "run"}
SKIPPED_DIRS = {"node_modules", "__pycache__", "build", "lib"}

CITATION = re.compile(r"design\.md#([\w-]*)")
IN_PAGE_LINK = re.compile(r"\]\(#([\w-]*)\)")
BARE_CITATION = re.compile(r"docs/design\.md(?!#)")
# The old, numbered design document ("DESIGN" and a section sign, or a bare section
# number); built from parts so that this file does not match itself.
OLD_CITATIONS = re.compile("DESIGN" + r"(\s*§|\.md\b|:)|§\s*\d")

TOP_DIRS = ("operator", "tests", "bench", "examples", "charts", "crds", "docs", "worker-image")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(TOP_DIRS) + r")/[\w./-]*[\w/])(?:::([\w.]+))?"
)
MODULE_NAME = re.compile(r"(?<![\w./-])(streamconsumer(?:\.[A-Za-z_]\w*)+)")
NOT_MODULES = {"streamconsumer.io"}  # the API group


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    found = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+?)\s*#*\s*$", line)):
            found.append(match[1])
    return found


def anchors(markdown: str) -> set[str]:
    return {github_anchor(h) for h in headings(markdown)}


def tree_files() -> Iterator[Path]:
    """The repository's text files (not the environment, caches or installed packages)."""
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = sorted(
            d for d in subdirectories if not d.startswith(".") and d not in SKIPPED_DIRS
        )
        for name in sorted(files):
            path = Path(directory) / name
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                yield path


def citation_problems(path: Path, text: str, known: set[str]) -> list[str]:
    """What is wrong with the design citations in one file's text."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        cited = CITATION.findall(line)
        if path == DESIGN:
            cited += IN_PAGE_LINK.findall(line)
        problems += [
            f"{where}:{number}: no heading of docs/design.md has the anchor #{anchor}"
            for anchor in cited
            if anchor not in known
        ]
        if path.suffix != ".md" and BARE_CITATION.search(line):
            problems.append(f"{where}:{number}: cite a heading, as docs/design.md#<anchor>")
        if OLD_CITATIONS.search(line):
            problems.append(f"{where}:{number}: cites the old design document; cite docs/design.md")
    return problems


def test_design_headings_are_unique() -> None:
    """A repeated heading gets a numbered anchor on GitHub: citations would be ambiguous."""
    counts = Counter(map(github_anchor, headings(DESIGN.read_text(encoding="utf-8"))))
    assert [anchor for anchor, times in counts.items() if times > 1] == []


def test_every_design_citation_names_a_heading() -> None:
    known = anchors(DESIGN.read_text(encoding="utf-8"))
    problems = []
    for path in tree_files():
        if path == Path(__file__).resolve():
            continue
        problems += citation_problems(
            path, path.read_text(encoding="utf-8", errors="replace"), known
        )
    assert problems == [], "\n".join(problems)


def test_the_citation_check_can_fail() -> None:
    known = anchors("# Design\n## Single owner\n```\n# not a heading\n```\n")
    assert known == {"design", "single-owner"}
    source = ROOT / "operator" / "example.py"
    text = (
        "# fenced (docs/design.md#single-owner)\n"
        "# fenced (docs/design.md#not-a-heading)\n"
        "# see docs/design.md, Single owner\n"
        "# fenced (DESIGN" + " §3.1)\n"
        "# and forward-only (" + "§3.3)\n"
    )
    assert citation_problems(source, text, known) == [
        "operator/example.py:2: no heading of docs/design.md has the anchor #not-a-heading",
        "operator/example.py:3: cite a heading, as docs/design.md#<anchor>",
        "operator/example.py:4: cites the old design document; cite docs/design.md",
        "operator/example.py:5: cites the old design document; cite docs/design.md",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Cheap on the apiserver", "cheap-on-the-apiserver"),
        ("Self-fencing", "self-fencing"),
        ("`initialPosition: LATEST`", "initialposition-latest"),
        ("Elect, load & serve", "elect-load--serve"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


# --- names the developer docs use ----------------------------------------------------


def defines(source: Path, qualname: str) -> bool:
    """Whether `source` defines `qualname` (a function, a class, a Class.method, or a
    module-level name)."""
    scope: list[ast.stmt] = ast.parse(source.read_text(encoding="utf-8")).body
    for part in qualname.split("."):
        found: ast.stmt | None = None
        for node in scope:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == part:
                    found = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    found = node
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def module_exists(dotted: str) -> bool:
    """`streamconsumer.a.b` is a module or package, or a name one of them defines."""
    parts = dotted.split(".")
    base = ROOT / "operator"
    for cut in range(len(parts), 0, -1):
        path = base.joinpath(*parts[:cut])
        for module in (path.with_suffix(".py"), path / "__init__.py"):
            if module.is_file():
                rest = ".".join(parts[cut:])
                return not rest or defines(module, rest)
    return False


def generated_paths() -> set[str]:
    """What the tree makes and git ignores (`bench/results.json`): named, never committed."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {line.strip().rstrip("/") for line in lines if "/" in line.strip().rstrip("/")}


def name_problems(text: str) -> list[str]:
    problems = []
    generated = generated_paths()
    for match in REPO_PATH.finditer(text):
        path, qualname = ROOT / match[1], match[2]
        if match[1].rstrip("/") in generated:
            continue
        if not path.exists():
            problems.append(f"{match[1]}: no such file or directory")
        elif qualname and not (path.suffix == ".py" and defines(path, qualname)):
            problems.append(f"{match[1]}::{qualname}: not defined there")
    for match in MODULE_NAME.finditer(text):
        if match[1] not in NOT_MODULES and not module_exists(match[1]):
            problems.append(f"{match[1]}: no such module (or name in it)")
    return problems


@pytest.mark.parametrize("doc", DEVELOPER_DOCS)
def test_every_name_a_developer_doc_uses_exists(doc: str) -> None:
    problems = name_problems((ROOT / doc).read_text(encoding="utf-8"))
    assert problems == [], f"{doc} names what the tree does not have:\n" + "\n".join(problems)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "operator").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unnamed_modules(text: str, package: Path) -> list[str]:
    """The modules of `package` that `text` does not name (by dotted name or path)."""
    named = set(MODULE_NAME.findall(text))
    named |= {
        module_name(ROOT / match[1])
        for match in REPO_PATH.finditer(text)
        if match[1].startswith("operator/") and match[1].endswith(".py")
    }
    modules = {
        module_name(path)
        for path in package.rglob("*.py")
        if path.parent != package or path.stem != "__init__"
    }
    return sorted(modules - named)


def test_the_architecture_names_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = unnamed_modules(text, ROOT / "operator" / "streamconsumer")
    assert missing == [], "add these modules to docs/architecture.md: " + ", ".join(missing)


def test_the_name_check_can_fail() -> None:
    text = (
        "`operator/streamconsumer/core/leases.py::plan` and `streamconsumer.core.leases` "
        "exist; `operator/streamconsumer/core/gone.py`, `tests/sim/ledger.py::Ledger.nope` "
        "and `streamconsumer.core.gone` do not; `streamconsumer.io/leader` is a label."
    )
    assert name_problems(text) == [
        "operator/streamconsumer/core/gone.py: no such file or directory",
        "tests/sim/ledger.py::Ledger.nope: not defined there",
        "streamconsumer.core.gone: no such module (or name in it)",
    ]
    named = "`streamconsumer.core.leases` and `operator/streamconsumer/core/lineage.py`"
    unnamed = unnamed_modules(named, ROOT / "operator" / "streamconsumer" / "core")
    assert unnamed == [
        "streamconsumer.core.autoscale",
        "streamconsumer.core.backoff",
        "streamconsumer.core.election",
        "streamconsumer.core.kcl_leases",
        "streamconsumer.core.log_limit",
        "streamconsumer.core.token_bucket",
        "streamconsumer.core.watchdog",
    ]


CONTROLLER_MODULE_LINES = 500
"""A controller module past this holds more than one concern (issue 44): split it."""


def test_no_controller_module_holds_more_than_one_concerns_lines() -> None:
    controller = ROOT / "operator" / "streamconsumer" / "controller"
    long = {
        str(path.relative_to(ROOT)): lines
        for path in controller.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > CONTROLLER_MODULE_LINES
    }
    assert long == {}, f"over {CONTROLLER_MODULE_LINES} lines: {long}"
