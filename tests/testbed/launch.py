"""`python -m testbed.launch MODULE ARGS...` runs MODULE as `python -m MODULE ARGS...`
would, after printing (to stderr) which streamconsumer package the process imports and
from where: a test that runs another release's code checks the log, so a PYTHONPATH
that silently fell back to this checkout cannot pass for the old release."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import streamconsumer

# The line it prints first: the package a process runs, and from where.
LAUNCH_NOTE = "streamconsumer {version} from {where}"


def main() -> None:
    where = Path(streamconsumer.__file__).resolve().parent
    print(LAUNCH_NOTE.format(version=streamconsumer.__version__, where=where), file=sys.stderr)
    sys.stderr.flush()
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
