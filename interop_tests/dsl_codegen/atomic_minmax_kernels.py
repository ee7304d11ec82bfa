"""SIMT kernels taking float atomic max/min (interop_tests/dsl_codegen/test_simt_float_atomic_minmax.py)."""
from __future__ import annotations

from dsl import TypeVar, f16, i32, simt

E = TypeVar("E")


@simt.kernel(grid_from="x")
def bucket_max(x: simt.Array[E], bucket: simt.Array[i32], out: simt.DisjointSlice[E]):
    """out[bucket[i]] = max(out[bucket[i]], x[i]) for every i: a scatter-max, as CUDA's atomicMax."""
    i = simt.thread.index_1d()
    if i < len(x):
        with simt.unsafe():
            simt.atomic.max(out, bucket[i], x[i])


@simt.kernel(grid_from="x")
def bucket_min(x: simt.Array[E], bucket: simt.Array[i32], out: simt.DisjointSlice[E]):
    i = simt.thread.index_1d()
    if i < len(x):
        with simt.unsafe():
            simt.atomic.min(out, bucket[i], x[i])




@simt.kernel(grid_from="x")
def half_max(x: simt.Array[f16], out: simt.DisjointSlice[f16]):
    i = simt.thread.index_1d()
    if i < len(x):
        with simt.unsafe():
            simt.atomic.max(out, 0, x[i])
