"""dsl.tile — the Tile programming model: per-tile code, partitions define the grid and the only
writable region of each tile block; the compiler maps tile elements onto threads (docs/tile.md).

    @tile.kernel
    def add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
        t = tile.bid(0)
        out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))

    add(a, b, tile.partition(c, (1024,)))
"""
from __future__ import annotations

from dsl.types import (bf16, boolean, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32,  # noqa: F401
                       u64)
from dsl.tile.api import INTRINSICS as _INTRINSICS
from dsl.tile.api import Array, Atomic, Constant  # noqa: F401
from dsl.tile.errors import TileCompileError  # noqa: F401
from dsl.tile.funcs import TileFunc, func  # noqa: F401
from dsl.tile.autotune import Config, Tuned, autotune  # noqa: F401
from dsl.tile.host import Partition, TileKernel, kernel, partition  # noqa: F401
from dsl.tile.launch import NAMES as _LAUNCH       # tile.pdl, tile.grid_sync, tile.cluster_* (dsl/vocab/launch.py)
from dsl.vocab import math as _vocab

inf = float("inf")

globals().update(_INTRINSICS)
globals().update(_LAUNCH)
_vocab.add_model_namespace(__name__, globals())   # register_math refuses the names taken here

__all__ = ["kernel", "func", "TileFunc", "partition", "Partition", "Array", "Atomic", "Constant", "TileKernel",
           "TileCompileError",
           "autotune", "Config", "Tuned",
           "inf", "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
           "boolean", *sorted(_INTRINSICS), *sorted(_LAUNCH)]


def __getattr__(name: str) -> object:
    """Math rows registered after import (dsl.vocab.register_math) are `tile.<name>` too."""
    from dsl.tile.api import math_intrinsic
    obj = math_intrinsic(name)
    if obj is None:
        raise AttributeError(f"module 'dsl.tile' has no attribute {name!r}")
    return obj
