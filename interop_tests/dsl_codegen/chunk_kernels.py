"""Chunk-loop kernels for the vector-access and slow-path tests (also a FILE for `compile --explain`).

GELU with tanh is the kernel of issue 28 whose chunk loop lost its 16-byte accesses: libdevice's tanh
put branches in every element's body. Lines the tests look for carry a `# LINE:<name>` marker, so a
test finds them in this file's text instead of trusting what the compiler reports.
"""
from __future__ import annotations

from dsl import f32, simt
from dsl.types import bf16, f16

GELU_C = 0.7978845608     # sqrt(2 / pi)
GELU_A = 0.044715


def make_gelu(dt, n: int):
    """GELU (tanh form) of a `dt` array, computed in f32, `n` elements a thread."""
    @simt.kernel(requires=["len(x) == len(out)"])
    def gelu_chunk(x: simt.Array[dt], out: simt.DisjointSlice[dt]):
        c = simt.thread.chunk_1d(n)
        for k in c:
            v = f32(x[k])
            out[k] = dt(0.5 * v * (1.0 + simt.tanh(GELU_C * (v + GELU_A * v * v * v))))
    return gelu_chunk


gelu_bf16 = make_gelu(bf16, 8)
gelu_f16 = make_gelu(f16, 8)
gelu_f32 = make_gelu(f32, 4)


@simt.kernel(requires=["len(x) == len(out)"])
def gelu_residual(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    """out += gelu(x): the written array is read first (its lanes start from memory)."""
    c = simt.thread.chunk_1d(4)
    for k in c:
        v = x[k]
        out[k] = out[k] + 0.5 * v * (1.0 + simt.tanh(GELU_C * (v + GELU_A * v * v * v)))


@simt.kernel
def gelu_unrelated(x: simt.Array[bf16], out: simt.DisjointSlice[bf16]):
    """No `requires=`: len(x) is not known to equal len(out), so x is bounds-checked per element."""
    c = simt.thread.chunk_1d(8)
    for k in c:
        v = f32(x[k])  # LINE:unrelated_load
        out[k] = bf16(0.5 * v * (1.0 + simt.tanh(GELU_C * (v + GELU_A * v * v * v))))  # LINE:unrelated_store


@simt.kernel(requires=["len(x) == len(out)"])
def relu_some_paths(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    """out[k] written only where x[k] > 0: the others keep what memory holds."""
    c = simt.thread.chunk_1d(4)
    for k in c:
        if x[k] > 0.0:
            out[k] = simt.tanh(x[k])  # LINE:some_paths_store


@simt.kernel(requires=["len(x) == len(out)"], inplace=[("x", "out")])
def gelu_inplace(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    """x and out may be one buffer: the accesses keep their order."""
    c = simt.thread.chunk_1d(4)
    for k in c:
        v = x[k]
        out[k] = 0.5 * v * (1.0 + simt.tanh(GELU_C * (v + GELU_A * v * v * v)))  # LINE:inplace_store


def marker_line(name: str) -> int:
    """The 1-based line of this file that carries `# LINE:<name>`."""
    from pathlib import Path
    for i, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# LINE:{name}"):
            return i
    raise LookupError(name)
