"""The distributions (issue 27): `make dist` builds the wheel and sdist and twine checks
them; the wheel alone, in a clean virtualenv and with no index, is the processor SDK: a
processor runs through the harness, nothing else comes along, and the console script
says which extra the command line needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROCESSOR = """
from streamconsumer.processor import BaseRecordProcessor, Checkpointer, Record
from streamconsumer.testing import ProcessorHarness

seen = []


class PageCounter(BaseRecordProcessor):
    def process_records(self, records: list[Record], checkpointer: Checkpointer) -> None:
        for record in records:
            seen.append(record.data)
        checkpointer.checkpoint()


records = [Record(b"a", "k", "1", checkpoint_sequence="1"),
           Record(b"b", "k", "2", checkpoint_sequence="2")]
harness = ProcessorHarness(PageCounter())
harness.initialize()
harness.process(records)
assert seen == [b"a", b"b"], seen
assert harness.checkpoints == ["2"], harness.checkpoints
try:
    import pydantic  # noqa: F401
except ModuleNotFoundError:
    print("sdk alone")
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
        [str(python), "-c", PROCESSOR], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.strip() == "sdk alone"
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
