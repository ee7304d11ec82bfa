"""DSL port of cpp/kernels/llm/gelu.cu: GELU (tanh approximation) of a GPT-2 MLP, forward and backward.

Started with `python -m dsl port cpp/kernels/llm/gelu.cu --kernel <name>` for each of the four
kernels: same argument names and order, N dropped (it is len(out)), `len(x) == N` relations rewritten
as `len(x) == len(out)`.

- The bf16 kernels are the C++ `Packed128` loop: `simt.thread.chunk_1d(8)` gives each thread 8
  consecutive elements; in the chunk's fast path its loads are made before the 8 element bodies and
  its stores after them, as one 16-byte access per array (`ld.global.nc.v4.b32` / `st.global.v4.b32`,
  tanh and all), and a chunk past the end is done element by element, as the C++ tail is. Math is f32,
  one rounding to bf16 at the store, as `__float2bfloat16(gelu(__bfloat162float(x)))`.
- The f32 kernels take one element a thread at their ThreadIndex.
- The derived grids give each thread one chunk, as the C++ contracts' `KB_GRID_FROM(out, 8)` do.
No write needs `unsafe`.
"""
from __future__ import annotations

from dsl import bf16, f32, simt

GELU_SCALE = 0.7978845608028654     # sqrt(2 / pi)
GELU_CUBE = 0.044715


@simt.device
def gelu(x: f32) -> f32:
    inner = f32(GELU_SCALE) * (x + f32(GELU_CUBE) * x * x * x)
    return f32(0.5) * x * (f32(1.0) + simt.tanh(inner))


@simt.device
def gelu_grad(x: f32) -> f32:
    inner = f32(GELU_SCALE) * (x + f32(GELU_CUBE) * x * x * x)
    t = simt.tanh(inner)
    sech2 = f32(1.0) - t * t
    return (f32(0.5) * (f32(1.0) + t)
            + f32(0.5) * x * sech2 * f32(GELU_SCALE) * (f32(1.0) + f32(3.0 * GELU_CUBE) * x * x))


@simt.kernel(launch_bounds=512, min_cc=80, requires=["len(inp) == len(out)"])
def gelu_forward_bf16(out: simt.DisjointSlice[bf16], inp: simt.Array[bf16]):
    chunk = simt.thread.chunk_1d(8)             # Packed128<bf16>: 8 values, one 16-byte access
    for k in chunk:
        out[k] = bf16(gelu(f32(inp[k])))


@simt.kernel(launch_bounds=512, min_cc=80, requires=["len(inp) == len(dinp)", "len(dout) == len(dinp)"])
def gelu_backward_bf16(dinp: simt.DisjointSlice[bf16], inp: simt.Array[bf16], dout: simt.Array[bf16]):
    chunk = simt.thread.chunk_1d(8)
    for k in chunk:
        dinp[k] = bf16(gelu_grad(f32(inp[k])) * f32(dout[k]))


@simt.kernel(launch_bounds=512, min_cc=80, requires=["len(inp) == len(out)"])
def gelu_forward_f32(out: simt.DisjointSlice[f32], inp: simt.Array[f32]):
    i = simt.thread.index_1d()
    out[i] = gelu(inp[i])


@simt.kernel(launch_bounds=512, min_cc=80, requires=["len(inp) == len(dinp)", "len(dout) == len(dinp)"])
def gelu_backward_f32(dinp: simt.DisjointSlice[f32], inp: simt.Array[f32], dout: simt.Array[f32]):
    i = simt.thread.index_1d()
    dinp[i] = gelu_grad(inp[i]) * dout[i]
