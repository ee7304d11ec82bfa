"""CPU simulator: runs the typed IR of a SIMT kernel on NumPy arrays with the GPU's semantics.

Stage: dsl/ir -> dsl/sim (imports nothing of dsl but the IR; the runtime's error classes lazily).
All threads of a batch of blocks execute in lock-step as NumPy vectors with per-lane masks, so a
2^16-element vecadd takes milliseconds. Semantics notes (what is exact, what is not) live in
dsl/sim/arith.py, dsl/sim/warp.py and dsl/sim/memory.py. Entry points: `simulate` (validates the launch
through the one native validator, then runs it) and `run` (a launch that is already validated).
"""
from dsl.sim.faults import SimulationError
from dsl.sim.launch import run, simulate

__all__ = ["run", "simulate", "SimulationError"]
