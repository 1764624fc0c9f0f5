"""docs/troubleshooting.md is keyed by every condition type, condition reason and Event
reason the operator can set: each is read out of the code (its syntax tree, not a list
kept by hand), and each must have a heading of its own in the guide, so a new reason
cannot ship undocumented."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from .test_docs import github_anchor

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "streamconsumer"
GUIDE = ROOT / "docs" / "troubleshooting.md"
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
# Variables that hold a reason, or a (reason, message) pair, on their way to a condition.
REASON_VARIABLES = {"reason", "stalled", "reconciling"}


def _constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """Module-level NAME = "String" of the whole package (names are unique enough)."""
    found: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value.value
    return found


def _leaves(node: ast.expr | None, constants: dict[str, str]) -> Iterator[str]:
    """The strings an expression can be, where it names a reason: a literal, a module
    constant, either branch of `a if c else b`, any side of `a or b`, and the first item
    of a (reason, message) tuple."""
    if node is None:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Name) and node.id in constants:
        yield constants[node.id]
    elif isinstance(node, ast.IfExp):
        yield from _leaves(node.body, constants)
        yield from _leaves(node.orelse, constants)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _leaves(value, constants)
    elif isinstance(node, ast.Tuple) and node.elts:
        yield from _leaves(node.elts[0], constants)
    elif isinstance(node, ast.Starred):
        yield from _leaves(node.value, constants)


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _assigned_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
        return [target.elts[0].id]  # reason, verb = ("RecordsSkipped", "skipped")
    return []


def emitted(trees: Iterable[ast.Module]) -> dict[str, set[str]]:
    """ "condition types" and "reasons" the code can set (conditions and Events)."""
    trees = list(trees)
    constants = _constants(trees)
    types: set[str] = set()
    reasons: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _called(node)
                if name == "_condition" and len(node.args) >= 4:  # render's conditions
                    types.update(_leaves(node.args[1], constants))
                    rest = node.args[3]  # the reason, or *(reason, message)
                    reasons.update(_leaves(rest, constants))
                elif name == "Event" and len(node.args) >= 2:  # loop.Event(type, reason, ...)
                    reasons.update(_leaves(node.args[1], constants))
                for keyword in node.keywords:  # kopf.warn/info(body, reason=...)
                    if keyword.arg == "reason":
                        reasons.update(_leaves(keyword.value, constants))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(n in REASON_VARIABLES for t in targets for n in _assigned_names(t)):
                    reasons.update(_leaves(node.value, constants))
            elif isinstance(node, ast.FunctionDef) and (
                node.name.endswith("_event") or node.name in REASON_VARIABLES
            ):
                # requests.pause_event, render.stalled: return (reason, message)
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return):
                        reasons.update(_leaves(inner.value, constants))
    return {
        "condition types": {t for t in types if CAMEL.match(t)},
        "reasons": {r for r in reasons if CAMEL.match(r)},
    }


def _locals(function: ast.FunctionDef) -> tuple[dict[str, ast.expr], dict[str, str]]:
    """A function's variables: what each is assigned, and the function whose result it
    holds (`stuck, working = stalled(seen), reconciling(seen)`)."""
    values: dict[str, ast.expr] = {}
    calls: dict[str, str] = {}
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (
                zip(target.elts, node.value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(target, node.value)]
            )
            for name, value in pairs:
                if isinstance(name, ast.Name):
                    values[name.id] = value
                    if isinstance(value, ast.Call):
                        calls[name.id] = _called(value)
    return values, calls


def condition_reasons(trees: Iterable[ast.Module]) -> dict[str, set[str]]:
    """The reasons the code can give each condition type, from render's
    `_condition(seen, TYPE, ok, REASON, ...)`. A variable in REASON is what its function
    assigns it (`reason = a if c else b`), or the reasons returned by the function whose
    result it holds, there or, for a parameter (`ready(seen, stuck)`), in the module."""
    trees = list(trees)
    constants = _constants(trees)
    found: dict[str, set[str]] = defaultdict(set)
    for tree in trees:
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        returned = {
            f.name: {
                leaf
                for node in ast.walk(f)
                if isinstance(node, ast.Return)
                for leaf in _leaves(node.value, constants)
            }
            for f in functions
        }
        module_calls = {k: v for f in functions for k, v in _locals(f)[1].items()}
        for function in functions:
            values, calls = _locals(function)
            for node in ast.walk(function):
                if (
                    not (isinstance(node, ast.Call) and _called(node) == "_condition")
                    or len(node.args) < 4
                ):
                    continue
                reason = node.args[3]
                reasons = set(_leaves(reason, constants))
                for name in (n.id for n in ast.walk(reason) if isinstance(n, ast.Name)):
                    if name in values and name not in calls:
                        reasons.update(_leaves(values[name], constants))
                    held = calls.get(name) or module_calls.get(name, "")
                    reasons |= returned.get(held, set())
                for type_ in _leaves(node.args[1], constants):
                    found[type_] |= {r for r in reasons if CAMEL.match(r)}
    return dict(found)


def package_trees() -> list[ast.Module]:
    return [ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")]


def anchors(markdown: str) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {github_anchor(h) for h in headings}


def undocumented(markdown: str, names: Iterable[str]) -> list[str]:
    have = anchors(markdown)
    return sorted(n for n in names if github_anchor(n) not in have)


def test_every_condition_type_and_reason_has_a_heading_in_the_troubleshooting_guide() -> None:
    found = emitted(package_trees())
    guide = GUIDE.read_text(encoding="utf-8")
    missing = undocumented(guide, found["condition types"] | found["reasons"])
    assert missing == [], "add a heading to docs/troubleshooting.md for: " + ", ".join(missing)


def test_the_extraction_sees_the_reasons_of_each_kind_of_emitter() -> None:
    """If the extraction went blind, the check above would pass on anything."""
    found = emitted(package_trees())
    assert {
        "Ready",
        "Degraded",
        "ChildrenApplied",
        "WorkersAvailable",
        "Reconciling",
        "Stalled",
    } <= (found["condition types"])
    assert {
        "ShardBlocked",  # a (reason, message) tuple in render
        "ChildrenNotApplied",
        "WorkersNotStarting",  # a module constant
        "NoWorkers",  # reason = a if c else b
        "Done",  # *(reconciling or ("Done", ""))
        "PodPolicyRefused",  # kopf.warn(reason=...)
        "ObjectConflict",
        "ResetInvalid",
        "LeaseExpired",  # Event(...)
        "RecordsDeadLettered",  # reason, verb = (...)
        "Paused",  # requests.pause_event
        "CheckpointsKept",
    } <= found["reasons"]


def test_the_check_can_fail() -> None:
    source = ast.parse(
        "X = 'FromAConstant'\n"
        "def f():\n"
        "    kopf.warn(body, reason='Documented', message='')\n"
        "    Event('Warning', X, '')\n"
        "    stalled = ('NewReason', 'why') if a else None\n"
        "def reconciling():\n"
        "    return ('Returned', 'why')\n"
    )
    found = emitted([source])
    assert found["reasons"] == {"Documented", "FromAConstant", "NewReason", "Returned"}
    guide = "# Troubleshooting\n\n## `Documented`\n\nWhat it means.\n"
    assert undocumented(guide, found["reasons"]) == ["FromAConstant", "NewReason", "Returned"]


def test_the_guides_links_within_the_page_resolve() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    broken = sorted(set(re.findall(r"\]\(#([\w-]+)\)", guide)) - anchors(guide))
    assert broken == [], "links to no heading: " + ", ".join(broken)


def test_the_reasons_of_each_condition_type_are_read_out_of_the_code() -> None:
    found = condition_reasons(package_trees())
    assert {"AllShardsOwned", "NoWorkers", "StreamUnavailable", "Paused"} <= found["Ready"]
    assert found["Degraded"] == {"Unhealthy", "AsExpected"}
    assert found["Progressing"] == {"HandingOff", "Stable"}
    assert {"Done", "ListingShards"} <= found["Reconciling"]
    assert {"Progressing", "ShardStuck"} <= found["Stalled"]
