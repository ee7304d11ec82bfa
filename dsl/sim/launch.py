"""`run`: simulate one launch of a typed-IR kernel on NumPy arrays, in place.

Blocks are simulated in batches: every thread of up to MAX_LANES / threads-per-block consecutive blocks
runs in lock-step as one vector. Batching is always valid, shared memory and barriers included: shared
memory has one buffer per block (a leading block axis), barriers and warp ops are checked per block and
per warp, and blocks never wait on each other in a legal CUDA program — except a cooperative grid
(grid.sync), which runs as one batch, and a cluster's blocks, which batch together (launch_ops.py).
"""
from __future__ import annotations

import numbers

import numpy as np

from dsl.ir import nodes as N
from dsl.ir.types import ArrayType, ScalarType, TensorMapType
from dsl.sim import arith
from dsl.sim.faults import FaultRecord, collect_sites
from dsl.sim.interp import Machine
from dsl.sim.lanes import LaneSpace
from dsl.sim.launch_ops import add_cluster_registers, batch_blocks
from dsl.sim.addresses import TensorMap
from dsl.sim.memory import MemRef, SharedSpace
from dsl.sim.races import RaceLog
from dsl.sim.bank_conflicts import BankConflictLog, bank_conflicts_enabled
from dsl.sim.shared_races import SharedRaceLog, shared_races_enabled

from dsl.sim.limits import MAX_BLOCK, MAX_SHARED_BYTES, MAX_THREADS  # noqa: F401  (re-exported)

MAX_LANES = 1 << 17          # lanes per batch: bounds the memory of per-lane vectors (~1 MiB each)


def run(fn: N.Function, args: list, grid, block, shared_mem: int = 0) -> None:
    """Run ONE VALIDATED launch of kernel `fn` with `grid` x `block` threads on NumPy `args` (arrays
    are modified in place).

    Callers validate first, through the one native validator with host memory standing in for
    device memory (dsl/sim/validator.py): `SimtKernel.simulate`, `TileKernel.simulate_lowered` and
    `simulate` below for hand-built IR. So `run` keeps only conversion (arrays to the simulator's
    memory model, scalars to their typed NumPy values) and cheap asserts, no second set of checks.
    Raises bridge.errors.KernelFault after the launch when a run-time bounds check failed (first
    fault wins) and dsl.sim.SimulationError for behaviour undefined on the GPU.
    """
    assert isinstance(fn, N.Function) and fn.is_kernel, f"run: not a kernel: {fn!r}"
    grid3, block3 = _dim3(grid), _dim3(block)
    values = [p for p in fn.params if not isinstance(p.type, TensorMapType)]   # tensor maps: from their arrays
    assert len(args) == len(values), f"{fn.name}: {len(args)} arguments for {len(values)} parameters"
    params = _bind(fn, list(args))
    fault = FaultRecord(fn.name, collect_sites(fn))
    races = RaceLog(fn.name, grid3, block3)
    threads = block3[0] * block3[1] * block3[2]
    nblocks = grid3[0] * grid3[1] * grid3[2]
    per_batch = batch_blocks(grid3, fn.cooperative, fn.cluster, max(1, MAX_LANES // threads))
    banks = BankConflictLog(fn.name) if bank_conflicts_enabled() else None
    with np.errstate(all="ignore"):
        for first in range(0, nblocks, per_batch):
            lanes = LaneSpace(grid3, block3, first, min(per_batch, nblocks - first), int(shared_mem))
            add_cluster_registers(lanes, fn.cluster)
            shared = SharedSpace(lanes.nblocks, int(shared_mem))
            watch = SharedRaceLog(fn.name, grid3, block3) if shared_races_enabled() else None
            Machine(fn, lanes, params, shared, fault, races, watch, banks).run()
    if banks is not None:
        banks.report()
    if fault.hit:
        raise fault.exception()
    if races.first is not None:
        raise races.exception()


def simulate(fn: N.Function, args: list, grid=None, block=None, shared_mem: int = 0) -> None:
    """Validate a launch of the (hand-built or front-end-built) kernel `fn` through the native
    validator — over the contract the one IR-level builder (dsl/contracts.py) gives `fn`: its block
    (`exact_block` / `max_threads`), any dynamic shared memory the simulator has, no derived grid —
    then `run` it. Bad arguments or dimensions raise the bridge's LaunchContractError subclasses, the
    same classes and texts as a GPU launch, and nothing runs."""
    import json
    from dsl.contracts import build_contract
    from dsl.sim.validator import host_launcher
    contract = build_contract(fn, block=fn.exact_block, launch_bounds=fn.max_threads,
                              dynamic_smem=("max", MAX_SHARED_BYTES))
    g, b, smem, skip = host_launcher(json.dumps(contract), fn.name).validate_only(
        tuple(args), grid=grid, block=block, shared_mem=shared_mem or None)
    if not skip:
        run(fn, list(args), g, b, smem)


def _dim3(v) -> tuple[int, int, int]:
    """A validated grid or block (an int or 1 to 3 ints) as 3 ints."""
    dims = (int(v),) if isinstance(v, numbers.Integral) else tuple(int(x) for x in v)
    assert 1 <= len(dims) <= 3 and min(dims) >= 1, f"not a validated launch dimension: {v!r}"
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _bind(fn: N.Function, args: list) -> dict[int, object]:
    """Parameter id -> MemRef (arrays, no copy) or typed NumPy scalar (conversion only: the
    validator has checked kinds, dtypes, ndims, layouts, read-only flags and scalar ranges). A
    TensorMapType parameter (after the others, as the launcher appends them) gets the TensorMap of
    the array it names."""
    out: dict[int, object] = {}
    by_name: dict[str, object] = {}
    for k, (p, a) in enumerate(zip(fn.params, args)):
        if isinstance(p.type, ArrayType):
            out[id(p)] = by_name[p.name] = _memref(fn, k, p, a)
        else:
            assert isinstance(p.type, ScalarType), f"{fn.name}: parameter type {p.type} cannot be simulated"
            out[id(p)] = _scalar(p.type, a)
    for p in fn.params[len(args):]:
        assert isinstance(p.type, TensorMapType), f"{fn.name}: parameter '{p.name}' has no argument"
        out[id(p)] = TensorMap(by_name[p.type.array], p.type.box, p.type.swizzle)
    return out


def _memref(fn: N.Function, k: int, p: N.Param, a) -> MemRef:
    """The simulator reads and writes the caller's NumPy array itself. Other host arrays pass the
    validator (any DLPack / CAI producer) but have no NumPy memory to run on: a typed refusal. None
    for an optional array (the validator allowed it) is an empty array: zero extents, as on the GPU."""
    if a is None and p.type.optional:
        return MemRef(p.name, np.empty((0,) * p.type.ndim, arith.np_dtype(p.type.dtype)), p.type.dtype, shared=False)
    if not isinstance(a, np.ndarray):
        from bridge import errors as E  # lazy: dsl.sim imports without the runtime
        raise E.ArgumentKindError(f"{fn.name}: argument '{p.name}' (#{k}): the simulator needs a NumPy array, got "
                                  f"{type(a).__name__}", kernel=fn.name, arg=k, arg_name=p.name)
    assert a.dtype == arith.np_dtype(p.type.dtype) and a.ndim == p.type.ndim, f"{fn.name}: unvalidated '{p.name}'"
    return MemRef(p.name, a, p.type.dtype, shared=False)


def _scalar(t: ScalarType, a):
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if t.kind == "bool":
        return np.bool_(a)
    if t.is_int:
        return arith.np_dtype(t).type(int(a))
    if t.name == "bf16":
        return arith.to_bf16(np.asarray(float(a)))[()]
    return np.asarray(a).astype(arith.np_dtype(t))[()]
