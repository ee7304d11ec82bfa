"""Kernel-side helpers the integrations share: NumPy stand-ins, which outputs a kernel reads, simulator
limits. No torch or jax here.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dsl.integrations._plan import OpPlan, Param, standin_args
from dsl.types import is_typevar


def host_dtype(name: str) -> np.dtype:
    """NumPy dtype of a DSL element type name (bfloat16 from ml_dtypes)."""
    from bridge import dtypes
    return dtypes.to_numpy(name)


def param_dtype(plan: OpPlan, p: Param, binding: Mapping[Any, str]) -> str | None:
    if p.name in plan.out_dtypes:
        return plan.output_dtype(p, binding)
    if is_typevar(p.dtype):
        return binding.get(p.dtype)
    return p.dtype


def standin(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous, 16-byte aligned NumPy array standing for a device array of `shape` (the pages of a
    large one are never touched, so it costs address space only)."""
    dt = host_dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    raw = np.empty(n * dt.itemsize + 16, np.uint8)
    off = (-raw.ctypes.data) % 16
    return raw[off:off + n * dt.itemsize].view(dt).reshape(shape)


_READS: dict[tuple, frozenset[str]] = {}   # documented cache: (kernel id, dtypes, tiles) -> outputs it reads


def outputs_read(plan: OpPlan, binding: Mapping[Any, str], tiles: Mapping[str, tuple],
                 scalars: Mapping[str, Any]) -> frozenset[str]:
    """Names of the allocated outputs the kernel also READS (contract access "readwrite"): those are
    zero-filled, so a kernel that accumulates into its output starts from 0, never from garbage."""
    if not plan.outputs:
        return frozenset()
    if plan.is_foreign:
        from dsl.integrations._foreign import outputs_read as foreign_reads
        return foreign_reads(plan)
    key = (id(plan.kernel), tuple(sorted((str(k), v) for k, v in binding.items())),
           tuple(sorted(tiles.items())), tuple(sorted((k, repr(v)) for k, v in scalars.items())))
    hit = _READS.get(key)
    if hit is not None:
        return hit
    args = standin_args(plan.params, {p.name: param_dtype(plan, p, binding) for p in plan.params if p.is_array},
                        tiles, {p.name: scalars.get(p.name, 0) for p in plan.params if not p.is_array})
    names = {p.name for p in plan.outputs}
    if plan.is_tile:
        try:
            from dsl.tile.compile import _reads_partition
            fn = plan.kernel.tile_ir(*args)
            read = frozenset(q.name for q in fn.params if q.name in names and _reads_partition(fn, q))
        except ImportError:                     # no such helper any more: zero every output (safe)
            read = frozenset(names)
    else:
        contract = plan.kernel.contract(*args)
        read = frozenset(a.name for a in contract.args if a.name in names and a.access == "readwrite")
    _READS[key] = read
    return read
