"""`python -m dsl <command>`: the same program as the `kernelbridge` console script (dsl/cli.py):
demo, doctor, compile, port, new, cache, version, and `--version`."""
from __future__ import annotations

import sys

from dsl.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m dsl"))
