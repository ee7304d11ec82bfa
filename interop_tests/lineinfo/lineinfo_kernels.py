"""Kernels of the line-table tests. `# LINE:<name>` marks the lines the tests expect in `.loc`
directives; the tests find them by reading this file (not through the DSL)."""
from __future__ import annotations

from dsl import f32, simt, tile
from interop_tests.lineinfo.lineinfo_device import cube


@simt.kernel(block=128)                                   # default: lineinfo on
def scaled_cube(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):  # LINE:def
    i = simt.thread.index_1d()                            # LINE:index
    if i < len(a):                                        # LINE:if
        out[i] = cube(a[i]) * s                           # LINE:store


@simt.kernel(block=128, lineinfo=False)
def scaled_cube_plain(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    if i < len(a):
        out[i] = cube(a[i]) * s


@simt.kernel(block=32, boundscheck=False)
def planted_oob(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        out[len(out) + simt.threadIdx.x] = 1.0            # LINE:oob


@tile.kernel
def tile_axpy(alpha: f32, x: tile.Array[f32], y: tile.Array[f32], out: tile.Partition[f32]):  # LINE:tdef
    t = tile.bid(0)                                                       # LINE:tbid
    v = alpha * tile.load(x, t, out.tile_shape)                           # LINE:tload
    out.store(v + tile.load(y, t, out.tile_shape))                        # LINE:tstore


@tile.kernel(lineinfo=False)
def tile_axpy_plain(alpha: f32, x: tile.Array[f32], y: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    v = alpha * tile.load(x, t, out.tile_shape)
    out.store(v + tile.load(y, t, out.tile_shape))


@simt.kernel(block=32, boundscheck=False, lineinfo=False)
def planted_oob_plain(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        out[len(out) + simt.threadIdx.x] = 1.0
