"""Tile DSL operations vs their library peers, one process: row softmax 4096x16384 f32 vs torch.softmax,
sum of 2^28 f32 vs cupy.sum (and torch.sum). The GEMM has its own benchmark: benchmarks/gemm.py.

Kernels are interop_tests/dsl_tile/tile_kernels_lib.py (the ones the GPU tests check). Each result is
checked against NumPy float64 before timing; device events, L2 flushed before each launch, ours and
peers interleaved, median of repeats. An op dsl.tile cannot compile is a row with value None and a note.
Bars (DESIGN §8): softmax >= 1.0x torch.softmax, sum >= 0.95x cupy.sum.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from _bench_kit import ROOT, Ops, check_close, gpu_or_note, keep_first
from _common import Report, parse_args, try_import

sys.path.insert(0, str(ROOT / "interop_tests" / "dsl_tile"))
import tile_kernels_lib as K  # noqa: E402

from dsl import tile  # noqa: E402

SUM_BLOCK = 16384                      # stage 1: 2^28 -> 2^14 partials; stage 2: 2^14 -> 1


def softmax(ops: Ops, torch: Any, rng: np.random.Generator) -> None:
    import bridge
    rows, cols = 4096, 16384
    xh = (rng.standard_normal((rows, cols), dtype=np.float32) * 3)
    x64 = xh.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    del e, x64
    x = bridge.from_host(xh)
    out = bridge.full((rows, cols), np.nan, "float32")
    part = tile.partition(out, (1, cols))
    tol = {"rtol": 1e-4, "atol": 1e-9}
    impls = {"DSL tile softmax": (lambda i: K.softmax(x, part),
                                  lambda: check_close("DSL tile softmax", out.to_host(), ref, **tol))}
    if torch is not None:
        tx = torch.from_dlpack(x)
        res: list = []
        impls["torch.softmax"] = (keep_first(res, lambda: torch.softmax(tx, dim=1)),
                                  lambda: check_close("torch.softmax", res[0].cpu().numpy(), ref, **tol))
    v = ops.run("row softmax 4096x16384 f32", impls, {"DSL tile softmax"}, "GB/s", 2 * rows * cols * 4 / 1e9)
    if "DSL tile softmax" in v and "torch.softmax" in v:
        ops.rep.bar("row softmax 4096x16384: DSL tile vs torch.softmax", v["DSL tile softmax"], v["torch.softmax"],
                    higher_is_better=True, bar=1.0, peer_name="torch.softmax")


def full_sum(ops: Ops, torch: Any, cp: Any, rng: np.random.Generator) -> None:
    import bridge
    n = 1 << 28
    xh = rng.random(n, dtype=np.float32) * 2 - 0.5
    ref = np.array([xh.astype(np.float64).sum()])
    tol = {"atol": 1e-5 * float(np.abs(xh).astype(np.float64).sum())}
    x = bridge.from_host(xh)
    partial = bridge.full((n // SUM_BLOCK,), np.nan, "float32")
    total = bridge.full((1,), np.nan, "float32")
    p1, p2 = tile.partition(partial, (1,)), tile.partition(total, (1,))

    def ours(i: int) -> None:
        K.block_sum(x, p1, SUM_BLOCK)
        K.block_sum(partial, p2, SUM_BLOCK)
    impls = {"DSL tile sum (2 stages)": (ours, lambda: check_close("DSL tile sum", total.to_host(), ref, **tol))}
    if cp is not None:
        cx = cp.from_dlpack(x)
        got: list = []
        impls["cupy.sum"] = (keep_first(got, lambda: cp.sum(cx)),
                             lambda: check_close("cupy.sum", np.array([float(got[0].get())]), ref, **tol))
    if torch is not None:
        tx = torch.from_dlpack(x)
        tgot: list = []
        impls["torch.sum"] = (keep_first(tgot, lambda: torch.sum(tx)),
                              lambda: check_close("torch.sum", np.array([float(tgot[0].item())]), ref, **tol))
    v = ops.run("sum 2^28 f32", impls, {"DSL tile sum (2 stages)"}, "GB/s", n * 4 / 1e9)
    if "DSL tile sum (2 stages)" in v and "cupy.sum" in v:
        ops.rep.bar("sum 2^28 f32: DSL tile vs cupy.sum", v["DSL tile sum (2 stages)"], v["cupy.sum"],
                    higher_is_better=True, bar=0.95, peer_name="cupy.sum")


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("tile ops: softmax, full sum (dsl.tile vs torch / CuPy)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    torch = try_import("torch", rep.missing)
    cp = try_import("cupy", rep.missing)
    ops = Ops(rep, reps=8 if args.quick else 20)
    rng = np.random.default_rng(11)
    try:
        with bridge.use_stream(bridge.Stream()):
            softmax(ops, torch, rng)
            full_sum(ops, torch, cp, rng)
    finally:
        rep.finish(args.json)
    return ops.exit_code()


if __name__ == "__main__":
    sys.exit(main())
