"""The console script without the `cli` extra (issue 27): it said ModuleNotFoundError."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamconsumer import console


def run_without(module: str) -> subprocess.CompletedProcess[str]:
    """The console script in a process where `module` cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; "
        "from streamconsumer.console import main; main(['status', 'x'])"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("module", ["kubernetes", "rich"])
def test_without_the_cli_extra_it_says_what_to_install(module: str) -> None:
    ran = run_without(module)
    assert ran.returncode == 1
    assert "pip install 'streamconsumer[cli]'" in ran.stderr
    assert module in ran.stderr
    assert "Traceback" not in ran.stderr


def test_another_missing_module_is_not_hidden() -> None:
    ran = run_without("streamconsumer.resets")
    assert ran.returncode == 1
    assert "ModuleNotFoundError" in ran.stderr


def test_with_it_the_command_line_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        console.main(["--help"])
    assert ended.value.code == 0
    assert "checkpoints" in capsys.readouterr().out
