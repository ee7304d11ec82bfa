"""DSL port of cpp/kernels/llm/crossentropy.cu: fused softmax + cross-entropy of GPT-2's classifier,
a block per row of the logits (N, Vp), V real vocabulary entries (the padding columns are ignored).

Started with `python -m dsl port cpp/kernels/llm/crossentropy.cu --kernel crossentropy_forward` (and
`crossentropy_backward`): N and Vp dropped (logits.shape), V kept (no array extent gives it).

- `row = simt.block.index_1d()` owns losses[row] (written once, by thread 0) and dlogits[row, :]
  (thread t writes columns t, t + 1024, ... in `simt.block.threads(Vp)`): the C++ `if (threadIdx.x ==
  0)` and `c = threadIdx.x; c < Vp; c += 1024` without `unsafe`. One block a row (the derived grid) in
  place of blocks striding over the rows.
- Each thread keeps an online (max, sum of exp) over its columns, the block combines them with warp
  reductions and one shared slot a warp, as the C++ block_max / block_sum do: the shared scratch is the
  port's only `unsafe` (in the two device functions).
- The column loops carry an unroll hint: nvcc unrolls both C++ loops by 4, so each thread has four
  loads in flight; the DSL's LLVM pipeline does not unroll a loop of run-time trip count, and one load
  in flight a thread reached about half the C++ speed. With `unroll=N` the back end runs the loop N
  iterations at a time and issues their N loads before the first exp (docs/dsl.md, "Unrolling"). The
  statistics loops take `unroll=8`: on the H200 (2026-12-03, one run) the forward ran 0.80x its C++ with
  2, 0.93x with 4 and 1.03x with 8; the write pass keeps 4. `requires=["V <= logits.shape[1]"]` proves
  `logits[row, c]` for c < V (no run-time check). The write pass loads each column before its `c < V`
  test (the padding columns are in the row and unused), so those loads go first too; dlogits[row, c] is
  still owned (no `unsafe`).
- A target outside [0, V) gives a NaN loss and a NaN row of V dlogits, as in C++.
"""
from __future__ import annotations

from dsl import f32, i32, simt

THREADS = 1024
WARPS = THREADS // 32
NAN = float("nan")
NEG_INF = float("-inf")


@simt.device
def block_max(v: f32, scratch: simt.DisjointSlice[f32]) -> f32:
    """The maximum of v over the block, in every thread (kb_llm::block_max); the trailing barrier lets
    the caller reuse `scratch` (one slot a warp) at once."""
    g = simt.warp.group(32)
    lane = simt.lane_id()
    v = g.max(v)
    with simt.unsafe():
        if lane == 0:
            scratch[simt.threadIdx.x // 32] = v
        simt.sync_threads()
        v = g.max(scratch[lane] if lane < WARPS else f32(NEG_INF))
        simt.sync_threads()
    return v


@simt.device
def block_sum(v: f32, scratch: simt.DisjointSlice[f32]) -> f32:
    """The sum of v over the block, in every thread (kb_llm::block_sum); as block_max."""
    lane = simt.lane_id()
    v = simt.warp.sum(v)
    with simt.unsafe():
        if lane == 0:
            scratch[simt.threadIdx.x // 32] = v
        simt.sync_threads()
        v = simt.warp.sum(scratch[lane] if lane < WARPS else f32(0.0))
        simt.sync_threads()
    return v


@simt.kernel(block=THREADS, min_cc=80,
             requires=["len(losses) == logits.shape[0]", "len(targets) == logits.shape[0]", "V > 0",
                       "V <= logits.shape[1]"])
def crossentropy_forward(losses: simt.DisjointSlice[f32], logits: simt.Array[f32, 2], targets: simt.Array[i32],
                         V: i32):
    row = simt.block.index_1d()                 # this block owns losses[row]
    if row < logits.shape[0]:
        m = f32(NEG_INF)                        # this thread's online max and sum of exp
        s = f32(0.0)
        for c in simt.range(simt.threadIdx.x, V, THREADS, unroll=8):
            v = logits[row, c]
            if v > m:
                s = s * simt.exp(m - v) + f32(1.0)
                m = v
            else:
                s += simt.exp(v - m)
        with simt.unsafe():                     # shared scratch: one slot a warp
            scratch = simt.shared.array((WARPS,), f32)
            row_max = block_max(m, scratch)
            row_sum = block_sum(f32(0.0) if s == f32(0.0) else s * simt.exp(m - row_max), scratch)
        t = targets[row]
        ok = t >= 0 and t < V
        losses[row] = simt.log(row_sum) + row_max - logits[row, t] if ok else f32(NAN)   # by thread 0


@simt.kernel(block=THREADS, min_cc=80,
             requires=["dlogits.shape == logits.shape", "len(dlosses) == logits.shape[0]",
                       "len(targets) == logits.shape[0]", "V > 0", "V <= logits.shape[1]"])
def crossentropy_backward(dlogits: simt.DisjointSlice[f32, 2], logits: simt.Array[f32, 2], dlosses: simt.Array[f32],
                          targets: simt.Array[i32], V: i32):
    row = simt.block.index_1d()                 # this block owns dlogits[row, :]
    if row < logits.shape[0]:
        m = f32(NEG_INF)                        # the statistics pass: crossentropy_forward's
        s = f32(0.0)
        for c in simt.range(simt.threadIdx.x, V, THREADS, unroll=8):
            v = logits[row, c]
            if v > m:
                s = s * simt.exp(m - v) + f32(1.0)
                m = v
            else:
                s += simt.exp(v - m)
        with simt.unsafe():                     # shared scratch: one slot a warp
            scratch = simt.shared.array((WARPS,), f32)
            row_max = block_max(m, scratch)
            row_sum = block_sum(f32(0.0) if s == f32(0.0) else s * simt.exp(m - row_max), scratch)
        t = targets[row]
        g = dlosses[row]
        scale = g / row_sum if t >= 0 and t < V else f32(NAN)
        for c in simt.block.threads(logits.shape[1], unroll=4):   # the write pass, padding too
            x = logits[row, c]                  # loaded before the test: the four copies' loads go first
            d = f32(0.0)
            if c < V:
                d = simt.exp(x - row_max) * scale - (g if c == t else f32(0.0))
            dlogits[row, c] = d
