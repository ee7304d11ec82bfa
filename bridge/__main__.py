"""`python -m bridge`: the runtime's commands (`doctor`, `version`) without the DSL (bridge/cli.py).
A DSL command (`demo`, `compile`, `port`, `new`, `cache`) exits 2 naming `kernelbridge <command>`."""
from __future__ import annotations

import sys

from bridge.cli import main

if __name__ == "__main__":
    sys.exit(main())
