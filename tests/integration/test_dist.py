"""The distributions (issue 27): `make dist` builds the wheel and sdist and twine checks
them; the wheel alone, in a clean virtualenv and with no index, is the processor SDK:
every Python block of the README runs there (its processors through the harness),
nothing else comes along, and the console script says which extra the command line
needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Every Python block of the README, in order, in one namespace; what they leave to the
# reader (the page handler, the store that fails on "/cart") is given here.
README_BLOCKS = """
import pathlib, re, sys

readme = pathlib.Path(sys.argv[1]).read_text()
blocks = re.findall(r"```python\\n(.*?)```", readme, re.S)
assert len(blocks) >= 3, len(blocks)
namespace = {
    "handle": lambda data: None,
    "store": lambda data: b"/cart" not in data,
}
for block in blocks:
    exec(compile(block, "README.md", "exec"), namespace)
try:
    import pydantic  # noqa: F401
except ModuleNotFoundError:
    print(f"{len(blocks)} blocks ran, the SDK alone")
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
    assert ran.stdout.strip().endswith("blocks ran, the SDK alone"), ran.stdout
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
