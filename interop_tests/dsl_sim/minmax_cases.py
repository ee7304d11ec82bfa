"""Operand pairs that decide float min/max (signed zeros, quiet and signalling NaN operands) and the
kernels that run them, shared by the simulators' CPU test (test_sim_float_minmax.py) and the GPU check
(test_sim_agrees_with_gpu.py). Operands are bit patterns, so NaN payloads and zero signs are exact.

The pinned results are what dsl/vocab/minmax.py implements, the PTX ISA's `min`/`max` as the H200
returned them (2026-12-03): a NaN operand is ignored, -0 < +0 in either order; two NaNs give the
canonical NaN for f16, bf16, f32 (CUDART_NAN_FP16, CUDART_NAN_BF16, CUDART_NAN_F) and, for f64, the
second operand with its quiet bit set.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from dsl import simt, tile
from dsl.types import TypeVar, bf16, f16, f32, f64

# Per dtype: bits of +0, -0, 1.0, 2.0, -3.0, -inf, two quiet NaNs unlike the canonical one, a signalling
# NaN, and what min/max return for (nan_a, nan_b), (nan_b, nan_a) and (nan_b, snan).
BITS = {
    "f32": dict(pz=0x0000_0000, nz=0x8000_0000, one=0x3F80_0000, two=0x4000_0000, m3=0xC040_0000,
                ninf=0xFF80_0000, nan_a=0xFFC0_0000, nan_b=0x7FC0_0001, snan=0x7FA0_0000,
                nan_ab=0x7FFF_FFFF, nan_ba=0x7FFF_FFFF, nan_bs=0x7FFF_FFFF),
    "f64": dict(pz=0, nz=0x8000_0000_0000_0000, one=0x3FF0_0000_0000_0000, two=0x4000_0000_0000_0000,
                m3=0xC008_0000_0000_0000, ninf=0xFFF0_0000_0000_0000, nan_a=0x7FF8_0000_0000_0001,
                nan_b=0xFFF8_0000_0000_0003, snan=0x7FF4_0000_0000_0001,
                nan_ab=0xFFF8_0000_0000_0003, nan_ba=0x7FF8_0000_0000_0001, nan_bs=0x7FFC_0000_0000_0001),
    "f16": dict(pz=0x0000, nz=0x8000, one=0x3C00, two=0x4000, m3=0xC200, ninf=0xFC00, nan_a=0x7E01,
                nan_b=0xFE00, snan=0x7D00, nan_ab=0x7FFF, nan_ba=0x7FFF, nan_bs=0x7FFF),
    "bf16": dict(pz=0x0000, nz=0x8000, one=0x3F80, two=0x4000, m3=0xC040, ninf=0xFF80, nan_a=0x7FC1,
                 nan_b=0xFFC0, snan=0x7FA0, nan_ab=0x7FFF, nan_ba=0x7FFF, nan_bs=0x7FFF),
}
NUMPY = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
         "bf16": np.dtype(ml_dtypes.bfloat16)}
DSL = {"f32": f32, "f64": f64, "f16": f16, "bf16": bf16}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

# (a, b, min(a, b), max(a, b)) by name, in the order of the operand arrays (16: one tile row).
PAIRS = [
    ("pz", "nz", "nz", "pz"),            # min(+0, -0) = -0, max = +0 ...
    ("nz", "pz", "nz", "pz"),            # ... whatever the operand order
    ("nan_a", "one", "one", "one"),      # a NaN operand is ignored, first ...
    ("one", "nan_b", "one", "one"),      # ... or second
    ("nan_a", "nan_b", "nan_ab", "nan_ab"),   # two NaNs: not either payload (f16, bf16, f32) ...
    ("nan_b", "nan_a", "nan_ba", "nan_ba"),   # ... or the second operand, quieted (f64)
    ("nan_b", "snan", "nan_bs", "nan_bs"),
    ("snan", "one", "one", "one"),       # a signalling NaN is ignored like a quiet one
    ("m3", "snan", "m3", "m3"),
    ("nz", "nz", "nz", "nz"),
    ("pz", "pz", "pz", "pz"),
    ("nan_b", "ninf", "ninf", "ninf"),
    ("two", "m3", "m3", "two"),
    ("nz", "one", "nz", "one"),
    ("ninf", "pz", "ninf", "pz"),
    ("two", "nz", "nz", "two"),
]
PAIR_NAMES = [f"{a},{b}" for a, b, _, _ in PAIRS]
PAIRS_TILE = (4, len(PAIRS))             # the output tile of tile_minmax_pairs: a row per operation

# Rows a tile max/min reduction folds (8 elements, no all-NaN row): (row, max, min) by name.
ROWS = [
    (["pz", "nz"] * 4, "pz", "nz"),
    (["nz", "pz"] * 4, "pz", "nz"),
    (["nan_a", "nz", "nan_b", "snan", "nan_b", "nan_a", "nan_b", "nan_a"], "nz", "nz"),
    (["nan_a", "two", "nan_b", "nan_a", "m3", "nan_b", "pz", "nz"], "two", "m3"),
]


def values(dt: str, names: list[str]) -> np.ndarray:
    """The values named by `names` (keys of BITS[dt]) as an array of dtype `dt`, bit for bit."""
    bits = np.array([BITS[dt][n] for n in names], UINT[NUMPY[dt].itemsize])
    return bits.view(NUMPY[dt])


def bits_of(x: np.ndarray) -> list[int]:
    x = np.ascontiguousarray(x)
    return [int(v) for v in x.view(UINT[x.dtype.itemsize]).reshape(-1)]


def operands(dt: str) -> tuple[np.ndarray, np.ndarray]:
    return values(dt, [p[0] for p in PAIRS]), values(dt, [p[1] for p in PAIRS])


def expected(dt: str, op: str) -> list[int]:
    """The pinned bits of `op` ("min" or "max") over PAIRS."""
    col = 2 if op == "min" else 3
    return [BITS[dt][p[col]] for p in PAIRS]


T = TypeVar("T")          # the float type of a launch (f32, f64, f16 or bf16)


@simt.kernel(block=32)
def simt_minmax(a: simt.Array[T], b: simt.Array[T], lo: simt.DisjointSlice[T], hi: simt.DisjointSlice[T],
                flo: simt.DisjointSlice[T], fhi: simt.DisjointSlice[T]):
    """The `min`/`max` operators and `simt.fmin`/`simt.fmax` on element pairs."""
    i = simt.thread.index_1d()
    lo[i] = min(a[i], b[i])
    hi[i] = max(a[i], b[i])
    flo[i] = simt.fmin(a[i], b[i])
    fhi[i] = simt.fmax(a[i], b[i])


@tile.kernel
def tile_minmax_pairs(a: tile.Array[T, 1], b: tile.Array[T, 1], out: tile.Partition[T, 2]):
    """Rows of out (a (4, len(PAIRS)) tile): tile.minimum, tile.maximum, tile.fmin, tile.fmax of the pairs."""
    _, n = out.tile_shape
    x = tile.load(a, (0,), (n,))[None, :]
    y = tile.load(b, (0,), (n,))[None, :]
    k = tile.arange(4)[:, None]
    out.store(tile.where(k == 0, tile.minimum(x, y), tile.where(k == 1, tile.maximum(x, y),
              tile.where(k == 2, tile.fmin(x, y), tile.fmax(x, y)))))


@tile.kernel
def tile_minmax_rows(x: tile.Array[T, 2], out: tile.Partition[T, 2]):
    """Rows of out: tile.max and tile.min along the rows of a (4, 8) tile."""
    r = tile.load(x, (0, 0), (4, 8))
    k = tile.arange(2)[:, None]
    out.store(tile.where(k == 0, tile.max(r, axis=1)[None, :], tile.min(r, axis=1)[None, :]))
