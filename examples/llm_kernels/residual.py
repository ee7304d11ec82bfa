"""DSL port of cpp/kernels/llm/residual.cu: the residual connection out = inp1 + inp2 (f32).

Started with `python -m dsl port cpp/kernels/llm/residual.cu --kernel residual_forward`. The C++
kernel's `Packed128<float>` loop is `simt.thread.chunk_1d(4)`: 4 values a thread, one 16-byte load per
input and one 16-byte store in the chunk's fast path, element by element past the end. The derived grid
gives each thread one chunk (the C++ contract's `KB_GRID_FROM(out, 4)`). No write needs `unsafe`.
"""
from __future__ import annotations

from dsl import f32, simt


@simt.kernel(launch_bounds=512, min_cc=80, requires=["len(inp1) == len(out)", "len(inp2) == len(out)"])
def residual_forward(out: simt.DisjointSlice[f32], inp1: simt.Array[f32], inp2: simt.Array[f32]):
    chunk = simt.thread.chunk_1d(4)             # Packed128<float>
    for k in chunk:
        out[k] = inp1[k] + inp2[k]
