"""The simulator's launch validator: the ONE native validator with host memory standing in for device
memory and the simulator's limits, so `simulate()` of SIMT and tile kernels refuses exactly what a GPU
launch refuses, with the same error classes and texts."""
from __future__ import annotations

from typing import Any

from dsl.sim.limits import MAX_BLOCK, MAX_SHARED_BYTES, MAX_THREADS, SIM_MAX_CORESIDENT


def sim_limits() -> tuple[Any, Any]:
    """(DeviceLimits, FuncAttrs) of the CPU simulator: host memory allowed, any minimum arch, the
    simulator's block and shared-memory limits."""
    from bridge import _native
    limits = _native.DeviceLimits()
    limits.host_memory = True
    limits.cc = 1000                      # the simulator runs kernels of any minimum arch
    limits.max_threads_per_block = MAX_THREADS
    limits.max_block = MAX_BLOCK
    limits.smem_per_block = limits.smem_per_block_optin = MAX_SHARED_BYTES
    limits.sim_max_coresident = SIM_MAX_CORESIDENT   # cooperative grids: one lock-step batch
    attrs = _native.FuncAttrs()
    attrs.max_threads_per_block = MAX_THREADS
    attrs.max_dynamic_smem = MAX_SHARED_BYTES
    return limits, attrs


def host_launcher(contract_json: str, kernel: str) -> Any:
    """A driver-less `_native.Launcher` over `contract_json`: call `.validate_only(args, grid=, block=,
    shared_mem=)` with NumPy (host) arrays; it returns (grid, block, shared_mem, skip)."""
    from bridge import _native
    from bridge.contract import native_contract
    limits, attrs = sim_limits()
    return _native.Launcher(0, native_contract(contract_json, kernel), limits, attrs, -1)
