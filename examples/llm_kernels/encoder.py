"""DSL port of cpp/kernels/llm/encoder.cu: GPT-2's token + position embedding, forward and backward.

Started with `python -m dsl port cpp/kernels/llm/encoder.cu --kernel encoder_forward` (and
`encoder_backward`): same argument names and order, B, T, C and V dropped (they are out.shape and
wte.shape[0]), the C++ relations rewritten on shapes.

- encoder_forward: the C++ kernel splits a flat index over B*T*C into (b, t, c) with a division and
  moves 4 floats a thread through 16-byte `Packed128` accesses. The port launches a 3-D grid instead
  (`domain=3`, x over C, y over T, z over B) and owns a run of 4 columns of row (b, t) through
  `b, t, ch = simt.thread.chunk_3d(4)`: no division, no `unsafe`, and the chunk loop's loads of wte and
  wpe and its store of out are 16-byte accesses (when C is a multiple of 4, as the C++ asks; otherwise
  one element at a time, still correct). One f32 a thread (the first port) ran at 0.59x the C++: each
  thread waited for inp, then for one 4-byte load of each table.
- encoder_backward adds dout into dwte[token] and dwpe[t] through atomics (many tokens share an id,
  every batch shares a position), as the C++ kernel does: its one `unsafe` block. Its threads range over
  dout (`grid_from="dout"`), so a launch without `grid=` covers every element of dout once.
- As in C++, a token outside [0, V) gives a NaN row (forward) and adds nothing to dwte (backward),
  never an access outside wte / dwte.
"""
from __future__ import annotations

from dsl import f32, i32, simt

NAN = float("nan")


@simt.kernel(domain=3, launch_bounds=512, min_cc=80,
             requires=["inp.shape[0] == out.shape[0]", "inp.shape[1] == out.shape[1]", "wte.shape[1] == out.shape[2]",
                       "wpe.shape[1] == out.shape[2]", "wpe.shape[0] >= out.shape[1]"])
def encoder_forward(out: simt.DisjointSlice[f32, 3], inp: simt.Array[i32, 2], wte: simt.Array[f32, 2],
                    wpe: simt.Array[f32, 2]):
    b, t, ch = simt.thread.chunk_3d(4)          # this thread owns out[b, t, 4x : 4x + 4]
    if b < out.shape[0] and t < out.shape[1]:
        ix = inp[b, t]
        if ix >= 0 and ix < wte.shape[0]:
            for c in ch:
                out[b, t, c] = wte[ix, c] + wpe[t, c]
        else:
            for c in ch:
                out[b, t, c] = f32(NAN)


@simt.kernel(domain=3, launch_bounds=512, min_cc=80, grid_from="dout",
             requires=["inp.shape[0] == dout.shape[0]", "inp.shape[1] == dout.shape[1]",
                       "dwte.shape[1] == dout.shape[2]", "dwpe.shape[1] == dout.shape[2]",
                       "dwpe.shape[0] >= dout.shape[1]"])
def encoder_backward(dwte: simt.DisjointSlice[f32, 2], dwpe: simt.DisjointSlice[f32, 2], dout: simt.Array[f32, 3],
                     inp: simt.Array[i32, 2]):
    b, t, c = simt.thread.index_3d()
    if b < dout.shape[0] and t < dout.shape[1] and c < dout.shape[2]:
        ix = inp[b, t]
        g = dout[b, t, c]
        with simt.unsafe():                     # many (b, t) add into one row of dwte / dwpe
            if ix >= 0 and ix < dwte.shape[0]:
                simt.atomic.add(dwte, (ix, c), g)
            simt.atomic.add(dwpe, (t, c), g)
