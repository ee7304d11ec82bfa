"""The DSL's view of the CUDA toolkit: the one locator lives in `bridge.toolkit` (so the doctor, the
linker and CMake share it without `bridge` importing `dsl`); this module re-exports it for the backend."""
from __future__ import annotations

from bridge.toolkit import OVERRIDES, Found, find_tool, locate, locate_all, toolkit_roots

__all__ = ["OVERRIDES", "Found", "find_tool", "locate", "locate_all", "toolkit_roots"]
