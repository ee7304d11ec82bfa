"""`run`: simulate one launch of a typed-IR kernel on NumPy arrays, in place.

Blocks are simulated in batches: every thread of up to MAX_LANES / threads-per-block consecutive blocks
runs in lock-step as one vector. Batching is always valid, shared memory and barriers included: shared
memory has one buffer per block (a leading block axis), barriers and warp ops are checked per block and
per warp, and blocks never wait on each other in a legal CUDA program.
"""
from __future__ import annotations

import numbers

import numpy as np

from dsl.ir import nodes as N
from dsl.ir.types import ArrayType, ScalarType
from dsl.sim import arith
from dsl.sim.faults import FaultRecord, collect_sites
from dsl.sim.interp import Machine
from dsl.sim.lanes import LaneSpace
from dsl.sim.memory import MemRef, SharedSpace

from dsl.sim.limits import MAX_BLOCK, MAX_SHARED_BYTES, MAX_THREADS  # noqa: F401  (re-exported)

MAX_LANES = 1 << 17          # lanes per batch: bounds the memory of per-lane vectors (~1 MiB each)


def run(fn: N.Function, args: list, grid, block, shared_mem: int = 0) -> None:
    """Run kernel `fn` with `grid` x `block` threads on NumPy `args` (arrays are modified in place).

    Raises bridge.errors.KernelFault after the launch when a run-time bounds check failed (first fault
    wins), dsl.sim.SimulationError for behaviour undefined on the GPU, and the bridge's
    LaunchContractError subclasses for bad arguments or launch dimensions.
    """
    from bridge import errors as E  # lazy: dsl.sim imports without the runtime
    if not isinstance(fn, N.Function) or not fn.is_kernel:
        raise TypeError(f"run: expected a kernel dsl.ir.nodes.Function, got {type(fn).__name__}")
    grid3 = _dims(fn, grid, "grid", E)
    block3 = _dims(fn, block, "block", E)
    _check_block(fn, block3, E)
    if not isinstance(shared_mem, numbers.Integral) or shared_mem < 0:
        raise E.SharedMemoryError(f"{fn.name}: shared_mem must be a non-negative int (bytes), "
                                  f"got {shared_mem!r}")
    params = _bind(fn, args, E)
    fault = FaultRecord(fn.name, collect_sites(fn))
    threads = block3[0] * block3[1] * block3[2]
    nblocks = grid3[0] * grid3[1] * grid3[2]
    per_batch = max(1, MAX_LANES // threads)
    with np.errstate(all="ignore"):
        for first in range(0, nblocks, per_batch):
            lanes = LaneSpace(grid3, block3, first, min(per_batch, nblocks - first), int(shared_mem))
            shared = SharedSpace(lanes.nblocks, int(shared_mem))
            Machine(fn, lanes, params, shared, fault).run()
    if fault.hit:
        raise fault.exception()


def _dims(fn: N.Function, v, what: str, E) -> tuple[int, int, int]:
    err = E.GridSizeError if what == "grid" else E.BlockSizeError
    vals = (v,) if isinstance(v, numbers.Integral) else tuple(v) if isinstance(v, (tuple, list)) else None
    if vals is None or not 1 <= len(vals) <= 3 or not all(isinstance(x, numbers.Integral) for x in vals):
        raise err(f"{fn.name}: {what} must be an int or a tuple of 1 to 3 ints (x, y, z), got {v!r}")
    dims = tuple(int(x) for x in vals) + (1,) * (3 - len(vals))
    if min(dims) < 1:
        raise err(f"{fn.name}: every {what} dimension must be >= 1, got {dims}")
    return dims  # type: ignore[return-value]


def _check_block(fn: N.Function, block: tuple[int, int, int], E) -> None:
    threads = block[0] * block[1] * block[2]
    for ax, (d, lim) in enumerate(zip(block, MAX_BLOCK)):
        if d > lim:
            raise E.BlockSizeError(f"{fn.name}: block dimension {'xyz'[ax]} = {d} exceeds {lim}")
    if threads > MAX_THREADS:
        raise E.BlockSizeError(f"{fn.name}: block {block} has {threads} threads, more than {MAX_THREADS}")
    if fn.exact_block is not None and tuple(fn.exact_block) != block:
        raise E.BlockSizeError(f"{fn.name}: kernel requires block {tuple(fn.exact_block)}, got {block}")
    if fn.max_threads is not None and threads > fn.max_threads:
        raise E.BlockSizeError(f"{fn.name}: block {block} has {threads} threads, more than the "
                               f"kernel's launch bound {fn.max_threads}")


def _bind(fn: N.Function, args: list, E) -> dict[int, object]:
    """Parameter id -> MemRef (arrays, no copy) or typed NumPy scalar."""
    args = list(args)
    if len(args) != len(fn.params):
        raise E.ArgumentCountError(f"{fn.name}: expected {len(fn.params)} arguments "
                                   f"({', '.join(p.name for p in fn.params)}), got {len(args)}")
    out: dict[int, object] = {}
    for k, (p, a) in enumerate(zip(fn.params, args)):
        where = f"{fn.name}: argument '{p.name}' (#{k})"
        if isinstance(p.type, ArrayType):
            out[id(p)] = _bind_array(p.type, a, p.name, where, E)
        elif isinstance(p.type, ScalarType):
            out[id(p)] = _bind_scalar(p.type, a, where, E)
        else:
            raise E.ArgumentKindError(f"{where}: parameter type {p.type} cannot be simulated")
    return out


def _bind_array(t: ArrayType, a, name: str, where: str, E) -> MemRef:
    want = arith.np_dtype(t.dtype)
    if not isinstance(a, np.ndarray):
        raise E.ArgumentKindError(f"{where}: expected a NumPy {want} array, got {type(a).__name__}")
    if a.dtype != want:
        raise E.DTypeError(f"{where}: expected {want} array, got {a.dtype} array of shape {a.shape}")
    if a.ndim != t.ndim:
        raise E.NdimError(f"{where}: expected a {t.ndim}-d array, got {a.ndim}-d of shape {a.shape}")
    if t.layout == "C" and not a.flags.c_contiguous:
        raise E.LayoutError(f"{where}: expected a C-contiguous array (the kernel was specialised for "
                            f"one), got strides {a.strides}")
    if t.writable and not a.flags.writeable:
        raise E.ReadOnlyError(f"{where}: the kernel writes this array but it is read-only")
    return MemRef(name, a, t.dtype, shared=False)


def _bind_scalar(t: ScalarType, a, where: str, E):
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if t.kind == "bool":
        if not isinstance(a, (bool, np.bool_)):
            raise E.ArgumentKindError(f"{where}: expected a bool, got {type(a).__name__}")
        return np.bool_(a)
    if t.is_int:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Integral):
            raise E.ArgumentKindError(f"{where}: expected an int ({t.name}), got {type(a).__name__}")
        info = np.iinfo(arith.np_dtype(t))
        if not info.min <= int(a) <= info.max:
            raise E.ScalarRangeError(f"{where}: {int(a)} does not fit {t.name} "
                                     f"[{info.min}, {info.max}]")
        return arith.np_dtype(t).type(int(a))
    if not isinstance(a, (numbers.Real, np.floating)) or isinstance(a, (bool, np.bool_)):
        if not (isinstance(a, np.generic) and a.dtype == arith.np_dtype(t)):
            raise E.ArgumentKindError(f"{where}: expected a float ({t.name}), got {type(a).__name__}")
    if t.name == "bf16":
        return arith.to_bf16(np.asarray(float(a)))[()]
    return np.asarray(a).astype(arith.np_dtype(t))[()]
