"""Types of the tile IR: tile values have a static shape and a scalar dtype; kernel parameters are
read-only arrays, writable partitions (array + static tile shape), scalars or compile-time constants.

Scalar dtypes are the shared `dsl.ir.types.ScalarType`s, so lowering onto the SIMT IR needs no mapping.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bridge import dtypes as _dtypes
from dsl.ir.types import BOOL, F32, I32, SCALARS, ScalarType


def row_divisor(itemsize: int) -> int:
    """The last-extent divisor that makes an array's rows whole 16-byte chunks for the tensor-core
    loops and pair stores: 16 for 1-byte elements ("div16"), else 8 ("div8"); the contract states it."""
    return 16 if itemsize == 1 else 8


def chunked_rows(facts: dict, itemsize: int) -> bool:
    """The launch facts cp.async / TMA staging and the pair-store epilogue rely on: C-contiguous,
    16-byte aligned, rows per row_divisor."""
    return bool(facts.get("layout") == "C" and facts.get("aligned16") and facts.get(f"div{row_divisor(itemsize)}"))

MAX_TILE_ELEMS = 1 << 20     # a tile larger than this is refused at compile time (registers/smem)


@dataclass(frozen=True)
class TileType:
    """A tile value: `shape == ()` is a scalar (bid(), scalar arguments, full reductions)."""
    dtype: ScalarType
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"tile<{self.dtype}, {self.shape}>" if self.shape else f"{self.dtype}"


@dataclass(frozen=True)
class ArrayParamType:
    """`tile.Array[T, ndim]`: read-only global array, loadable at any tile index. `atomic`:
    `tile.Atomic[T, ndim]`, written only through tile.atomic_* / tile.scatter_* by any block, never
    loaded (other blocks may be updating it)."""
    dtype: ScalarType
    ndim: int
    atomic: bool = False


@dataclass(frozen=True)
class PartitionParamType:
    """`tile.Partition[T, ndim]` specialised with the host partition's tile shape: the only writable
    region of tile block b is tile b of the partition."""
    dtype: ScalarType
    ndim: int
    tile_shape: tuple[int, ...]


def tiles_by_number(p: PartitionParamType, grid: PartitionParamType) -> bool:
    """Does partition `p` find its tile by tile number? A partition of the grid partition's ndim has
    the grid's tiles axis by axis (block (i, j) owns tile (i, j) of each); one of another ndim (1-D
    per-row statistics beside a 2-D output) has as many tiles as the grid, and block b owns its tile
    b, both counted in row-major order."""
    return p.ndim != grid.ndim


@dataclass(frozen=True)
class ScalarParamType:
    dtype: ScalarType


@dataclass(frozen=True)
class ConstParamType:
    """`tile.Constant[...]`: the value is part of the specialisation key and folded at compile time."""
    value: object


def np_dtype(t: ScalarType) -> np.dtype:
    """NumPy dtype standing for an IR scalar type (the one dtype table; bf16 through ml_dtypes)."""
    return _dtypes.to_numpy(t.name)


# NumPy dtype name -> IR scalar type, for the DSL rows of the dtype table (bridge/dtypes.py).
_BY_NUMPY_NAME = {row.long_name: SCALARS[row.name] for row in _dtypes.kernel_rows()}


def scalar_of_numpy(dt: np.dtype) -> ScalarType | None:
    """IR scalar type of a NumPy dtype, or None when it has none (complex, object, ...)."""
    return _BY_NUMPY_NAME.get(np.dtype(dt).name)


def as_scalar_type(obj: object) -> ScalarType | None:
    """Resolve an annotation or dtype argument (ScalarType, dsl scalar marker, name, NumPy dtype)."""
    if isinstance(obj, ScalarType):
        return obj
    for attr in ("ir", "ir_type", "scalar_type"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, ScalarType):
            return inner
    if isinstance(obj, str):
        if obj in SCALARS:
            return SCALARS[obj]
        if obj in _BY_NUMPY_NAME:                 # the table's long names: "float32", "bfloat16"
            return _BY_NUMPY_NAME[obj]
        try:
            return scalar_of_numpy(np.dtype(obj))
        except TypeError:
            return None
    if obj is float:
        return F32
    if obj is int:
        return I32
    if obj is bool:
        return BOOL
    name = getattr(obj, "name", None) or getattr(obj, "__name__", None)
    if isinstance(name, str) and name in SCALARS:
        return SCALARS[name]
    try:
        return scalar_of_numpy(np.dtype(obj))  # type: ignore[arg-type]
    except TypeError:
        return None


def is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0
