"""`KB_SIMULATE`: the one switch that routes every kernel call (SIMT and tile) to the CPU simulator.

An on/off switch spelled as every other (bridge/settings.py: 1/true/yes/on, 0/false/no/off; anything
else is a ConfigurationError). Read here only, on every call: a test may set it for one block
(`monkeypatch.setenv`), and when it is unset (the launch path) a membership test on the live
environment dict costs ~50 ns.
"""
from __future__ import annotations

import os
from typing import Any

from bridge.settings import env_switch

try:   # the live dict behind os.environ (CPython): a membership test there costs ~50 ns, not ~1 us
    _ENV_DATA: Any = os.environ._data  # type: ignore[attr-defined]
    _SIM_KEY: Any = os.environ.encodekey("KB_SIMULATE")  # type: ignore[attr-defined]
except AttributeError:
    _ENV_DATA, _SIM_KEY = os.environ, "KB_SIMULATE"


def simulating() -> bool:
    """True when kernel calls run on the CPU simulator instead of the GPU."""
    return _SIM_KEY in _ENV_DATA and env_switch("KB_SIMULATE", False)
