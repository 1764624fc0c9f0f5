"""The `streamconsumer` console script. It is installed with the package, the command
line's dependencies only with the `cli` extra: without them it says what to install
rather than end in a ModuleNotFoundError."""

from __future__ import annotations

import sys

CLI_DEPENDENCIES = frozenset({"kubernetes", "rich", "urllib3", "pydantic"})  # the cli extra


def main(argv: list[str] | None = None) -> None:
    try:
        from streamconsumer.cli import main as cli_main
    except ModuleNotFoundError as missing:
        top = (missing.name or "").partition(".")[0]
        if top not in CLI_DEPENDENCIES:
            raise
        sys.exit(
            f"streamconsumer: the command line needs the cli extra ({top} is not installed):"
            " pip install 'streamconsumer[cli]'"
        )
    cli_main(argv)
