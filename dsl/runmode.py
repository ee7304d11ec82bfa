"""`KB_SIMULATE`: the one switch that routes every kernel call (SIMT and tile) to the CPU simulator.

Any value but "" and "0" turns it on. Read here only, on every call: a test may set it for one block
(`monkeypatch.setenv`), and a membership test on the live environment dict costs ~50 ns.
"""
from __future__ import annotations

import os
from typing import Any

try:   # the live dict behind os.environ (CPython): a membership test there costs ~50 ns, not ~1 us
    _ENV_DATA: Any = os.environ._data  # type: ignore[attr-defined]
    _SIM_KEY: Any = os.environ.encodekey("KB_SIMULATE")  # type: ignore[attr-defined]
except AttributeError:
    _ENV_DATA, _SIM_KEY = os.environ, "KB_SIMULATE"


def simulating() -> bool:
    """True when kernel calls run on the CPU simulator instead of the GPU."""
    return _SIM_KEY in _ENV_DATA and os.environ.get("KB_SIMULATE", "") not in ("", "0")
