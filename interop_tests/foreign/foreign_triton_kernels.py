"""Triton kernels for the foreign-kernel tests (a module of their own: @triton.jit reads its source file).
Imported only by tests that have already skipped when Triton is absent."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def softmax(x, out, n_rows, n_cols, BLOCK: tl.constexpr):
    """One program per row of a C-contiguous (n_rows, n_cols) matrix; n_cols <= BLOCK."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    v = tl.load(x + row * n_cols + cols, mask=m, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(out + row * n_cols + cols, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def axpb(x, out, a, b, flag, n, BLOCK: tl.constexpr = 256):
    """out = a * x + b (fp16 a and fp32 b, and an i1 flag: scalar packing of several widths)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = a.to(tl.float32) * tl.load(x + offs, mask=m) + b
    v = tl.where(flag, v, -v)
    tl.store(out + offs, v, mask=m)
