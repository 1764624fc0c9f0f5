"""The distributions (issue 27): `make dist` builds the wheel and sdist and twine checks
them; the wheel alone, in a clean virtualenv and with no index, is the processor SDK:
every Python block of the README runs there (its processors through the harness; the
one that needs the worker extra says so), nothing else comes along, and the console
script says which extra the command line needs. tests/unit/test_testing_policy.py runs
the same blocks with the worker extra, where every one runs to its end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Every Python block of the README, in order, in one namespace; what they leave to the
# reader (the page handler, the store that fails on "/cart") is given here.
README_BLOCKS = """
import pathlib, re, sys

from streamconsumer.testing import NeedsWorkerExtra

readme = pathlib.Path(sys.argv[1]).read_text()
blocks = re.findall(r"```python\\n(.*?)```", readme, re.S)
assert len(blocks) >= 4, len(blocks)
namespace = {
    "handle": lambda data: None,
    "store": lambda data: b"/cart" not in data,
}
named = 0  # blocks that need the worker extra and, without it, say so
for block in blocks:
    try:
        exec(compile(block, "README.md", "exec"), namespace)
    except NeedsWorkerExtra as missing:
        assert "pip install 'streamconsumer[worker]'" in str(missing), missing
        named += 1
try:
    import pydantic  # noqa: F401
except ModuleNotFoundError:
    print(f"{len(blocks) - named} blocks ran, the SDK alone; {named} named the worker extra")
else:
    assert named == 0, named
    print(f"{len(blocks)} blocks ran, with the worker extra")
"""


def test_the_wheel_alone_is_the_processor_sdk(tmp_path: Path) -> None:
    subprocess.run(["make", "dist"], cwd=ROOT, check=True, timeout=600, capture_output=True)
    (wheel,) = (ROOT / "dist").glob("streamconsumer-*.whl")
    assert list((ROOT / "dist").glob("streamconsumer-*.tar.gz")), "and the sdist"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, script = venv / "bin" / "python", venv / "bin" / "streamconsumer"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    ran = subprocess.run(
        [str(python), "-c", README_BLOCKS, str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("blocks ran, the SDK alone; 1 named the worker extra"), (
        ran.stdout
    )
    typed = subprocess.run(
        [str(python), "-c", "import importlib.resources as r; "
         "print(r.files('streamconsumer').joinpath('py.typed').is_file())"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert typed.stdout.strip() == "True"
    cli = subprocess.run(
        [str(script), "status", "clicks"], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 1
    assert "pip install 'streamconsumer[cli]'" in cli.stderr
    assert "Traceback" not in cli.stderr
