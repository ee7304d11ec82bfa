"""The lanes of one simulated batch of blocks: every thread of `nblocks` consecutive blocks at once.

A lane is one GPU thread. Lanes are ordered block by block (linear block id, x fastest), and inside a
block by linear thread id (x fastest), so a warp is 32 consecutive lanes of one block. Every IR value is
a NumPy vector over a *selection* of lanes: `ALL` (a slice, no copy) or an int64 array of lane numbers.
"""
from __future__ import annotations

import numpy as np

WARP = 32
ALL = slice(None)


def count(sel, nlanes: int) -> int:
    return nlanes if isinstance(sel, slice) else len(sel)


def to_sel(mask: np.ndarray):
    """Lane selection of a full-length bool mask (ALL when every lane is set: no gathers needed)."""
    return ALL if mask.all() else np.flatnonzero(mask)


def subsel(sel, m: np.ndarray):
    """The lanes of `sel` where the per-selected-lane bool vector `m` is true."""
    return np.flatnonzero(m) if isinstance(sel, slice) else sel[m]


def to_mask(sel, nlanes: int) -> np.ndarray:
    if isinstance(sel, slice):
        return np.ones(nlanes, bool)
    m = np.zeros(nlanes, bool)
    m[sel] = True
    return m


def vec(x, n: int) -> np.ndarray:
    """`x` as a length-n vector (a broadcast view for uniform values)."""
    a = np.asarray(x)
    return a if a.shape == (n,) else np.broadcast_to(a, (n,))


class LaneSpace:
    """Special registers and thread geometry for blocks [first, first + nblocks) of the grid."""

    def __init__(self, grid: tuple[int, int, int], block: tuple[int, int, int], first: int,
                 nblocks: int, dynamic_smem: int) -> None:
        self.grid, self.block, self.first, self.nblocks = grid, block, first, nblocks
        bx, by, bz = block
        gx, gy, _ = grid
        self.T = bx * by * bz
        self.L = nblocks * self.T
        self.Tp = -(-self.T // WARP) * WARP           # threads per block padded to whole warps
        lane = np.arange(self.L, dtype=np.int64)
        self.blk = lane // self.T                      # block number inside this batch
        t = lane % self.T
        self.tid_lin = t
        blocks = np.arange(first, first + nblocks, dtype=np.int64)
        cx, cy, cz = blocks % gx, (blocks // gx) % gy, blocks // (gx * gy)
        self.block_xyz = np.stack([cx, cy, cz], axis=1)
        tx, ty, tz = t % bx, (t // bx) % by, t // (bx * by)
        ctx, cty, ctz = cx[self.blk], cy[self.blk], cz[self.blk]
        i64 = np.int64
        self.special: dict[str, object] = {
            "tid.x": tx, "tid.y": ty, "tid.z": tz,
            "ctaid.x": ctx, "ctaid.y": cty, "ctaid.z": ctz,
            "ntid.x": i64(bx), "ntid.y": i64(by), "ntid.z": i64(bz),
            "nctaid.x": i64(grid[0]), "nctaid.y": i64(grid[1]), "nctaid.z": i64(grid[2]),
            "laneid": t % WARP, "warpsize": i64(WARP), "dynamic_smem_size": i64(dynamic_smem),
        }
        gid_x, gid_y, gid_z = ctx * bx + tx, cty * by + ty, ctz * bz + tz
        self.thread_index = {1: (gid_x,), 2: (gid_y, gid_x), 3: (gid_z, gid_y, gid_x)}
        self.warp_pos = self.blk * self.Tp + t         # position in the warp-padded layout
        self.exists_padded = np.zeros(nblocks * self.Tp, bool)
        self.exists_padded[self.warp_pos] = True

    def describe(self, lane: int) -> str:
        """`thread (x, y, z) of block (x, y, z)` for messages."""
        b = int(self.blk[lane])
        sp = self.special
        tid = tuple(int(sp[f"tid.{a}"][lane]) for a in "xyz")  # type: ignore[index]
        return f"thread {tid} of block {tuple(int(v) for v in self.block_xyz[b])}"
