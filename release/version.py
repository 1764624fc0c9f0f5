"""The one version (`streamconsumer.__version__`) and the tag a release is cut from.

`python -m release.version` prints the version; `--tag v0.2.0` also checks that the tag
names it, and that the chart does (Chart.yaml's version and appVersion), and exits 1
saying what differs otherwise. The release workflow runs it first, on the pushed tag;
`make release-dry-run` on the tag the version asks for. Standard library only: it reads
the files and imports nothing of the package."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path("operator/streamconsumer/__init__.py")
CHART = Path("charts/streamconsumer/Chart.yaml")


def package_version(root: Path = ROOT) -> str:
    """`__version__` as assigned in the package's `__init__.py`."""
    tree = ast.parse((root / PACKAGE).read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise LookupError(f"no __version__ = '...' in {PACKAGE}")


def chart_versions(root: Path = ROOT) -> dict[str, str]:
    """Chart.yaml's top-level version and appVersion (plain `key: value` lines)."""
    found: dict[str, str] = {}
    for line in (root / CHART).read_text().splitlines():
        match = re.match(r"^(version|appVersion):\s*[\"']?([^\"'\s#]+)", line)
        if match:
            found[match[1]] = match[2]
    return found


def problems(tag: str, root: Path = ROOT) -> list[str]:
    """What keeps `tag` from being this checkout's release tag; empty when nothing does."""
    version = package_version(root)
    found = []
    if tag != f"v{version}":
        found.append(f"the tag {tag!r} is not v{version} (streamconsumer.__version__ in {PACKAGE})")
    for key, value in sorted(chart_versions(root).items()):
        if value != version:
            found.append(f"{CHART} has {key} {value}, not {version}")
    if set(chart_versions(root)) != {"version", "appVersion"}:
        found.append(f"{CHART} must have a version and an appVersion")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release.version", description=__doc__)
    parser.add_argument("--tag", help="the release tag to check, e.g. v0.2.0 ($GITHUB_REF_NAME)")
    args = parser.parse_args(argv)
    if args.tag is not None:
        found = problems(args.tag)
        for problem in found:
            print(f"release.version: {problem}", file=sys.stderr)
        if found:
            return 1
    print(package_version())
    return 0


if __name__ == "__main__":
    sys.exit(main())
