"""Tile atomics lower to global atomics that ptxas assembles for sm_80 and sm_90, for every op and
element type the atomics take (dsl/tile/atomics.py ATOMIC_DTYPES), without spills; each shows the
atom instruction it should (float max/min: a compare-and-swap loop around PTX max/min)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_atomics_lib as K

from dsl import TypeVar, tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.tile.atomics import ATOMIC_DTYPES
from dsl.types import bf16, f16, f32, f64, i32, i64, u32, u64

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")]

DTYPES = {"i32": (i32, np.int32), "u32": (u32, np.uint32), "i64": (i64, np.int64), "u64": (u64, np.uint64),
          "f16": (f16, np.float16), "bf16": (bf16, ml_dtypes.bfloat16), "f32": (f32, np.float32),
          "f64": (f64, np.float64)}


E = TypeVar("E")


@tile.kernel
def scatter_add(idx: tile.Partition[i32], v: tile.Array[E], acc: tile.Atomic[E, 1]):
    tile.scatter_add(acc, idx.load(padding=-1), tile.load(v, tile.bid(0), idx.tile_shape))


@tile.kernel
def scatter_max(idx: tile.Partition[i32], v: tile.Array[E], acc: tile.Atomic[E, 1]):
    tile.scatter_max(acc, idx.load(padding=-1), tile.load(v, tile.bid(0), idx.tile_shape))


@tile.kernel
def scatter_min(idx: tile.Partition[i32], v: tile.Array[E], acc: tile.Atomic[E, 1]):
    tile.scatter_min(acc, idx.load(padding=-1), tile.load(v, tile.bid(0), idx.tile_shape))


KERNELS = {"add": scatter_add, "max": scatter_max, "min": scatter_min}
CASES = [(op, dt) for op, dts in ATOMIC_DTYPES.items() for dt in dts]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("op, dt", CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_every_atomic_op_and_dtype_assembles(op, dt, arch):
    npdt = DTYPES[dt][1]
    args = (tile.partition(np.zeros(100, np.int32), (128,)), np.zeros(100, npdt), np.zeros(10, npdt))
    ck = KERNELS[op].compile(args, arch)
    assert "atom." in ck.ptx
    usage, _ = assemble(ck.ptx, arch)
    assert usage and usage[0].spill_stores == 0, usage


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["global_norm", "histogram", "column_max", "row_min", "scatter_2d", "gather"])
def test_library_kernels_assemble(name, arch):
    z = np.zeros
    args = {"global_norm": (tile.partition(z(1000, np.float32), (256,)), z(1, np.float32)),
            "histogram": (tile.partition(z(1000, np.int32), (512,)), z(37, np.int32)),
            "column_max": (tile.partition(z((40, 70), np.float32), (16, 64)), z((1, 70), np.float32)),
            "row_min": (tile.partition(z((37, 90), np.int32), (8, 32)), z(37, np.int32)),
            "scatter_2d": (tile.partition(z(500, np.int32), (128,)), z(500, np.int32), z(500, np.float32),
                           z((7, 11), np.float32)),
            "gather": (z(333, np.int32), z(50, np.float32), tile.partition(z(333, np.float32), (128,)))}[name]
    ck = getattr(K, name).compile(args, arch)
    usage, _ = assemble(ck.ptx, arch)
    assert usage and usage[0].spill_stores == 0, usage


def test_the_instructions_are_the_expected_atomics():
    z = np.zeros
    norm = K.global_norm.ptx(tile.partition(z(1000, np.float32), (256,)), z(1, np.float32), arch="sm_90")
    assert "atom.global.add.f32" in norm
    hist = K.histogram.ptx(tile.partition(z(1000, np.int32), (512,)), z(37, np.int32), arch="sm_90")
    assert "atom.global.add.u32" in hist
    colmax = K.column_max.ptx(tile.partition(z((40, 70), np.float32), (16, 64)), z((1, 70), np.float32),
                              arch="sm_90")
    assert "max.f32" in colmax and "cas.b32" in colmax
