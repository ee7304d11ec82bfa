"""DSL port of cpp/kernels/llm/global_norm.cu: out[0] += sum(values^2), the squared global gradient
norm of a GPT-2 step (the host takes the square root for clipping).

The C++ kernel is a grid-stride loop, a block reduction through warp shuffles and shared slots, and
one atomicAdd a block. In the tile model that is three lines: a block loads its tile of `values`,
`tile.sum` reduces it, and `tile.atomic_add` adds the block's sum into out[0]. `out` is a
`tile.Atomic` argument (the contract records it as written through atomics), so no `unsafe` at all.

Launch: `global_norm_squared(out, tile.partition(values, (TILE,)))`: one block a tile of TILE values
(16 values a thread, as the C++ contract's KB_GRID_FROM(values, 16) with its 512 threads). The size
`n` of the C++ signature is dropped: it is len(values).
"""
from __future__ import annotations

from dsl import f32, tile

TILE = 8192                 # values a block: 512 threads x 16, as the C++ derived grid


@tile.kernel(requires=["len(out) == 1"])
def global_norm_squared(out: tile.Atomic[f32, 1], values: tile.Partition[f32]):
    v = values.load()                          # this block's tile (0 past the end)
    tile.atomic_add(out, 0, tile.sum(v * v))   # out[0] += the block's sum of squares


def launch(out, values):
    """The C++ call `global_norm_squared(out, values, n)` without n: a block per TILE values."""
    return global_norm_squared(out, tile.partition(values, (TILE,)))
