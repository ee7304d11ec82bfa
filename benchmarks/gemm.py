"""GEMM: the dsl.tile GEMM (interop_tests/dsl_tile/tile_kernels_lib.py `gemm`, f32 accumulation and
output) vs torch.matmul (cuBLAS; tf32 enabled for f32 inputs) and a plain Triton GEMM
(benchmarks/_triton_gemm.py), one process.

Shapes: 8192^3 (bars), 4096^3 and the skinny 16384x1024x1024 and 1024x1024x16384 with --shapes all.
Dtypes bf16, f16 and f32 (run as tf32 by all three). Our tile shapes and Triton's configs are tried
like an autotuner and the best of each is reported (every candidate is a row). Each result is checked
against NumPy float64 on 16 random rows before timing; device events, L2 flushed before each launch,
all candidates interleaved, median. TFLOP/s also as a fraction of the H200's dense peak (989 TFLOP/s
16-bit, 494 tf32).
Bars (DESIGN §8): bf16 and f16 8192^3 >= 0.95x torch.matmul and >= 1.0x the plain Triton GEMM.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from _bench_kit import ROOT, Ops, check_close, gpu_or_note, keep_first
from _common import Report, try_import

sys.path.insert(0, str(ROOT / "interop_tests" / "dsl_tile"))
import tile_kernels_lib as K  # noqa: E402

from dsl import tile  # noqa: E402

DSL_TILES = {"16bit": ((128, 256, 64), (128, 128, 64), (128, 256, 32), (128, 128, 32)),
             "f32": ((128, 128, 32), (64, 64, 32))}
SHAPES = {"8192^3": (8192, 8192, 8192), "4096^3": (4096, 4096, 4096),
          "16384x1024x1024": (16384, 1024, 1024), "1024x1024x16384": (1024, 1024, 16384)}
DENSE_PEAK = {"bf16": 989.0, "f16": 989.0, "f32": 494.0}   # H200 SXM dense tensor TFLOP/s (f32: tf32)
BARS = {"torch.matmul": 0.95, "Triton": 1.0}


def one_shape(ops: Ops, torch: Any, tg: Any, rng: np.random.Generator, shape: str, label: str, host_dtype: Any,
              tiles: list[tuple[int, int, int]], triton_configs: list[tuple]) -> None:
    import bridge
    m, n, k = SHAPES[shape]
    ah = rng.standard_normal((m, k), dtype=np.float32).astype(host_dtype)
    bh = rng.standard_normal((k, n), dtype=np.float32).astype(host_dtype)
    rows = np.sort(rng.choice(m, 16, replace=False))
    ref = ah[rows].astype(np.float64) @ bh.astype(np.float64)
    scale = float(np.sqrt(k))
    tol = {"rtol": 1e-2, "atol": 5e-3 * scale} if label == "f32" else {"rtol": 1e-3, "atol": 1e-3 * scale}
    a, b = bridge.from_host(ah), bridge.from_host(bh)
    arch = bridge.current_device().arch
    op = f"GEMM {shape} {label}"
    impls: dict = {}
    ours: set[str] = set()
    for bm, bn, bk in tiles or DSL_TILES["f32" if label == "f32" else "16bit"]:
        c = bridge.full((m, n), np.nan, "float32")
        part = tile.partition(c, (bm, bn))
        name = f"DSL tile {bm}x{bn}x{bk}"
        try:
            K.gemm.compile((a, b, part, bk), arch)
        except Exception as exc:  # noqa: BLE001 - a candidate that does not compile is a row, not fatal
            ops.rep.row(f"{op}: {name}", None, "TFLOP/s", note=f"not compiled: {type(exc).__name__}: {exc}"[:300])
            continue
        ours.add(name)
        impls[name] = ((lambda i, p=part, kk=bk: K.gemm(a, b, p, kk)),
                       (lambda c=c, nm=name: check_close(nm, c.to_host()[rows], ref, **tol)))
    peers: dict[str, set[str]] = {"torch.matmul": set(), "Triton": set()}
    if torch is not None:
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        trows = torch.as_tensor(rows, device=ta.device)
        tc = torch.empty((m, n), dtype=torch.float32, device=ta.device)
        res: list = []
        # cuBLAS rounds its output to the input dtype: allow that rounding in its check
        impls["torch.matmul"] = (keep_first(res, lambda: torch.matmul(ta, tb)), lambda: check_close(
            "torch.matmul", res[0][trows].float().cpu().numpy(), ref, rtol=1e-2, atol=tol["atol"]))
        peers["torch.matmul"].add("torch.matmul")
        if tg is not None:
            for cfg in triton_configs:
                if label == "f32" and cfg[2] * cfg[0] > 128 * 32:
                    continue         # f32 tiles this large do not fit Triton's shared memory
                name = "Triton {}x{}x{} w{} s{}".format(*cfg)
                impls[name] = ((lambda i, cfg=cfg: tg.gemm(ta, tb, tc, cfg)),
                               (lambda nm=name: check_close(nm, tc[trows].cpu().numpy(), ref, **tol)))
                peers["Triton"].add(name)
    tf = ops.run(op, impls, ours, "TFLOP/s", 2 * m * n * k / 1e12,
                 extra=lambda v: {"of_peak": round(v / DENSE_PEAK[label], 3)})
    if not tf:
        return
    best = max((x for x in tf if x in ours), key=tf.get, default=None)
    if best is None:
        ops.failed.append(f"{op}: no DSL tile configuration compiled and ran correctly")
        return
    for peer, names in peers.items():
        pbest = max((x for x in tf if x in names), key=tf.get, default=None)
        if pbest is None:
            continue
        ops.rep.row(f"{op}: best DSL / {peer}", tf[best] / tf[pbest], "x", ours=best, peer=pbest)
        if shape == "8192^3" and label in ("bf16", "f16"):
            ops.rep.bar(f"GEMM 8192^3 {label}: DSL tile ({best.split('tile ')[-1]}) vs {peer}", tf[best],
                    tf[pbest], higher_is_better=True, bar=BARS[peer],
                    peer_name="torch.matmul (cuBLAS)" if peer == "torch.matmul" else f"plain Triton ({pbest})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--shapes", default="8192^3", help="comma list of " + ", ".join(SHAPES) + " or 'all'")
    ap.add_argument("--dtypes", default="bf16,f16,f32")
    ap.add_argument("--tiles", help="our tile shapes, e.g. 128x256x64,128x256x32 (default: the candidates)")
    ap.add_argument("--triton", default="all", help="Triton configs by index into _triton_gemm.CONFIGS "
                    "(e.g. 1,4), 'all' or 'none'")
    args = ap.parse_args()
    rep = Report("GEMM: dsl.tile vs torch.matmul (cuBLAS) vs plain Triton")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    torch = try_import("torch", rep.missing)
    ml = try_import("ml_dtypes", rep.missing)
    tg = None
    if torch is not None:
        try:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            import _triton_gemm as tg
        except Exception as exc:  # noqa: BLE001 - a missing peer is reported
            rep.missing["Triton"] = f"{type(exc).__name__}: {exc}"[:200]
    shapes = list(SHAPES) if args.shapes == "all" else args.shapes.split(",")
    dtypes = {"bf16": getattr(ml, "bfloat16", None), "f16": np.float16, "f32": np.float32}
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = True   # the f32 peer is cuBLAS tf32
    tiles = [tuple(int(x) for x in t.split("x")) for t in args.tiles.split(",")] if args.tiles else []
    tcfgs = [] if tg is None or args.triton == "none" else (
        list(tg.CONFIGS) if args.triton == "all" else [tg.CONFIGS[int(i)] for i in args.triton.split(",")])
    ops = Ops(rep, 6 if args.quick else 15)
    rng = np.random.default_rng(7)
    try:
        with bridge.use_stream(bridge.Stream()):
            for shape in shapes:
                for label in args.dtypes.split(","):
                    if dtypes[label] is None:
                        rep.row(f"GEMM {shape} {label}", None, "TFLOP/s", note="ml_dtypes missing: no host bfloat16")
                        continue
                    one_shape(ops, torch, tg, rng, shape, label, dtypes[label], tiles, tcfgs)
    finally:
        rep.finish(args.json)
    return ops.exit_code()


if __name__ == "__main__":
    sys.exit(main())
