"""GEMM: the dsl.tile GEMMs (interop_tests/dsl_tile/tile_kernels_lib.py: `gemm` for row-major B, `gemm_nt`
for B stored N x K, `gemm_f8` for f8 with a per-tensor scale) vs torch (cuBLAS: torch.matmul, tf32
enabled for f32 inputs; torch._scaled_mm for f8) and a plain Triton GEMM (benchmarks/_triton_gemm.py),
one process.

Cases (shape, dtype, layout): NN is row-major B (K x N); NT is B stored N x K, as a linear layer's weight
and as torch._scaled_mm takes it, and the layout tf32 and f8 tensor cores read (K-major). Every peer gets
the same layout. Dtypes bf16, f16, f32 (run as tf32 by all) and e4m3 (f8e4m3fn inputs, bf16 output,
f32 accumulation). Our tile shapes and Triton's configs are tried like an autotuner and the best of each
is reported (every candidate is a row; f32 NN also has "tf32-transpose" rows, a row-major B staged
through registers into tf32 wgmma under KB_TILE_TF32_TRANSPOSE=1, and "transpose + NT" rows, B copied
to N x K by a tile kernel and then the NT GEMM, both kernels timed); for K much longer than M and N also a parallel split-K in
the DSL (two kernels, both timed; the "->bf16" one sums into C in the input dtype, as torch.matmul
returns it). Each result is checked against NumPy float64 on 16 random rows before timing; device events, L2 flushed before each launch, all candidates interleaved, median.
TFLOP/s also as a fraction of the H200's dense peak (989 TFLOP/s 16-bit, 494 tf32, 1979 f8).
Bars (DESIGN §8, issue 11): bf16 and f16 8192^3 NN >= 0.95x torch.matmul and >= 1.0x the plain Triton
GEMM; 4096^3 and the skinny 1024x1024x16384 (bf16, f16) >= 0.85x torch.matmul, 16384x1024x1024 >= 0.95x
(issue 29; DESIGN §8's 0.85x before);
tf32 8192^3 >= 0.75x cuBLAS tf32 (NT: tf32 wgmma reads B K-major only) and, issue 29, f32 NN 8192^3
>= 0.9x cuBLAS tf32; e4m3 8192^3 >= 0.85x torch._scaled_mm.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, NamedTuple

import numpy as np

from _bench_kit import ROOT, Ops, check_close, gpu_or_note, keep_first
from _common import Report, try_import

sys.path.insert(0, str(ROOT / "interop_tests" / "dsl_tile"))
import tile_kernels_lib as K  # noqa: E402

from dsl import tile  # noqa: E402

DSL_TILES = {"16bit": ((128, 256, 64), (128, 128, 64), (128, 256, 32), (128, 128, 32)),
             "f32": ((128, 128, 32), (128, 256, 32), (64, 64, 32)),
             "e4m3": ((128, 256, 128), (128, 128, 128), (128, 256, 64), (128, 128, 64))}
# parallel split-K candidates ((BM, BN, BK), splits) for the long-K shapes: about one wave of blocks
SPLIT_K = (((128, 128, 64), 2), ((128, 256, 64), 4))
SHAPES = {"8192^3": (8192, 8192, 8192), "4096^3": (4096, 4096, 4096),
          "16384x1024x1024": (16384, 1024, 1024), "1024x1024x16384": (1024, 1024, 16384)}
DENSE_PEAK = {"bf16": 989.0, "f16": 989.0, "f32": 494.0, "e4m3": 1979.0}   # H200 SXM dense tensor TFLOP/s
BARS = {"torch.matmul": 0.95, "Triton": 1.0}
SHAPE_BAR = 0.85        # 4096^3 and the skinny shapes vs cuBLAS
SKINNY_BARS = {"16384x1024x1024": 0.95}    # issue 29: 16384x1024x1024 bf16/f16 at 0.95x cuBLAS
TF32_BAR = 0.75
TF32_NN_BAR = 0.9       # issue 29: a row-major B (f32 NN) at 0.9x cuBLAS tf32
F8_BAR = 0.85
TMA_STORE_SHAPES = ("8192^3", "16384x1024x1024")     # where the "tma-store" candidates run


class Case(NamedTuple):
    shape: str
    label: str           # bf16 | f16 | f32 | e4m3
    layout: str          # NN | NT
    triton: bool         # time the Triton peer too


# What a default run (and the GPU check) measures: every bar, plus row-major tf32 for reference.
DEFAULT_CASES = (
    [Case("8192^3", d, "NN", True) for d in ("bf16", "f16", "f32")]
    + [Case("8192^3", "bf16", "NT", False), Case("8192^3", "f32", "NT", False), Case("8192^3", "e4m3", "NT", False)]
    + [Case(s, d, "NN", False) for s in ("4096^3", "16384x1024x1024", "1024x1024x16384") for d in ("bf16", "f16")])


def f8_bound(a_rows: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """Per-element error bound of an f8 GEMM whose tensor cores accumulate below f32 precision
    (wgmma, and torch._scaled_mm with use_fast_accum=True): 2^-10 of sum_k |a||b|. On the H200 both
    stay at 4.5e-4 of it (2026-12-01), up to 2.4 at K=8192 where |c| is about 90; the bf16 output's
    rounding is the rtol."""
    return 2.0 ** -10 * (np.abs(a_rows.astype(np.float64)) @ np.abs(b64))


def host_operands(rng: np.random.Generator, case: Case, host_dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B as the case stores it: K x N (NN) or N x K (NT)."""
    m, n, k = SHAPES[case.shape]
    a = rng.standard_normal((m, k), dtype=np.float32).astype(host_dtype)
    b = rng.standard_normal((n, k) if case.layout == "NT" else (k, n), dtype=np.float32).astype(host_dtype)
    return a, b


@contextlib.contextmanager
def pipeline_env(mode: str):
    """KB_TILE_GEMM_PIPELINE=mode while a candidate compiles and makes its first launch (its kernel
    object's dispatcher then keeps that launcher)."""
    with mode_env({"sync": "sync", "ws": "pws"}[mode]):
        yield


# the environment switches of each candidate mode (docs/configuration.md)
MODE_SWITCHES = {"sync": {"KB_TILE_GEMM_PIPELINE": "sync"}, "pws": {"KB_TILE_GEMM_PIPELINE": "ws"},
                 "tf32-transpose": {"KB_TILE_GEMM_PIPELINE": "sync", "KB_TILE_TF32_TRANSPOSE": "1"},
                 "tma-store": {"KB_TILE_GEMM_PIPELINE": "sync", "KB_TILE_TMA_STORE": "1"},
                 "pws tma-store": {"KB_TILE_GEMM_PIPELINE": "ws", "KB_TILE_TMA_STORE": "1"},
                 "pws tma-store rounds": {"KB_TILE_GEMM_PIPELINE": "ws", "KB_TILE_TMA_STORE": "1",
                                          "KB_TILE_STAGING_ROUNDS": "1"},
                 "pws tma-store by-wg": {"KB_TILE_GEMM_PIPELINE": "ws", "KB_TILE_TMA_STORE": "1",
                                         "KB_TILE_STORE_BY_WARPGROUP": "1"},
                 "pws tma-store rounds by-wg": {"KB_TILE_GEMM_PIPELINE": "ws", "KB_TILE_TMA_STORE": "1",
                                                "KB_TILE_STAGING_ROUNDS": "1", "KB_TILE_STORE_BY_WARPGROUP": "1"}}


@contextlib.contextmanager
def mode_env(mode: str):
    """MODE_SWITCHES[mode] set while a candidate compiles and makes its first launch (its kernel
    object's dispatcher then keeps that launcher)."""
    changes = MODE_SWITCHES[mode]
    old = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def candidates(case: Case, tiles: list) -> list[tuple[int, int, int, str, bool]]:
    """(BM, BN, BK, mode, cast): every tile shape with the default pipeline (sync); for the 16-bit NN
    cases also 128x256x64 (and 128x128x64 at 16384x1024x1024) persistent and warp-specialised ("pws":
    one block per SM walking its tiles, the producer warpgroup loading the next tile while the
    consumers store this one), and `gemm_cast` candidates (cast: C in the input dtype, as
    torch.matmul returns it, named "->bf16"). Plain ws (no persistence) tied sync at 128x256x64 on the
    H200 (docs/tile.md). For f32 NN also the ladder's tiles with KB_TILE_TF32_TRANSPOSE=1
    ("tf32-transpose": B staged through registers into tf32 wgmma; off by default), beside the
    default mma.sync rows. For 16-bit NN at 8192^3 and 16384x1024x1024 also "tma-store" rows
    (KB_TILE_TMA_STORE=1: the epilogue through swizzled shared memory and TMA stores, off by default
    until these rows measure it), with an f32 and a 16-bit C, and persistent with both at 16384x1024x1024
    (where an f32 C ran at 0.77x cuBLAS with pair stores); there also, for the ring depth beside the
    staging tile, 128x256x32 (6 stages of 24 KiB) against 3 stages of 48 KiB; at both shapes "pws
    tma-store rounds" with a 16-bit C (KB_TILE_STAGING_ROUNDS=1: 4 stages, the tile stored a slab a
    round; 0.956x cuBLAS at 16384x1024x1024, H100 2026-12-06) and "pws tma-store by-wg" (KB_TILE_STORE_BY_WARPGROUP=1:
    each consumer warpgroup stores its own rows and the two never wait for each other, so one's epilogue runs
    beside the other's products; "rounds by-wg" the same in rounds beside 4 stages)."""
    shapes = tiles or DSL_TILES["16bit" if case.label in ("bf16", "f16") else case.label]
    out = [(bm, bn, bk, "sync", False) for bm, bn, bk in shapes]
    if case.layout == "NN" and case.label in ("bf16", "f16") and not tiles:
        pws = [(128, 256, 64)] + ([(128, 128, 64)] if case.shape == "16384x1024x1024" else [])
        out += [(bm, bn, bk, "pws", False) for bm, bn, bk in pws]
        out += [(128, 256, 64, "pws", True)] + ([(128, 256, 64, "sync", True)] if case.shape == "16384x1024x1024" else [])
    if case.layout == "NN" and case.label in ("bf16", "f16") and not tiles and case.shape in TMA_STORE_SHAPES:
        out += [(128, 256, 64, "tma-store", False), (128, 256, 64, "tma-store", True),
                (128, 256, 64, "pws tma-store rounds", True), (128, 256, 64, "pws tma-store by-wg", True),
                (128, 256, 64, "pws tma-store rounds by-wg", True)]
        if case.shape == "16384x1024x1024":
            out += [(128, 256, 64, "pws tma-store", False), (128, 256, 64, "pws tma-store", True),
                    (128, 256, 32, "pws tma-store", True)]
    if case.layout == "NN" and case.label == "f32" and not tiles:
        out += [(bm, bn, bk, "tf32-transpose", False) for bm, bn, bk in ((128, 256, 32), (128, 128, 32))]
    return out


def split_k_candidates(case: Case, a: Any, b: Any, m: int, n: int, k: int, ops: Ops, op: str) -> dict:
    """Parallel split-K (K.gemm_split_k + K.sum_splits, both timed) where K is much longer than M and
    N: one block per output tile would leave most of the 132 SMs idle."""
    import bridge
    out: dict = {}
    if case.layout != "NN" or case.label not in ("bf16", "f16") or k < 4 * max(m, n):
        return out
    for ((bm, bn, bk), splits), dt in [(x, "float32") for x in SPLIT_K] + [(SPLIT_K[0], case.label)]:
        c = bridge.full((m, n), np.nan, dt)       # "float32", or the case's label (bridge dtype names)
        partial = bridge.empty((K.split_k_rows(m, bm, splits), n), "float32")
        name = f"DSL tile {bm}x{bn}x{bk} split-k {splits}" + ("" if dt == "float32" else f" ->{dt}")
        run = (lambda i, c=c, p=partial, t=(bm, bn), bk=bk, s=splits: K.gemm_split_k_run(a, b, c, t, bk, s, p))
        _add_if_it_runs(out, ops, op, name, run, c)
    return out


def _add_if_it_runs(out: dict, ops: Ops, op: str, name: str, run: Any, c: Any) -> None:
    """Candidate `name` into `out` once its first run succeeds; one that does not compile is a row, not fatal."""
    try:
        run(0)
    except Exception as exc:  # noqa: BLE001 - a candidate that does not compile is a row, not fatal
        ops.rep.row(f"{op}: {name}", None, "TFLOP/s", note=f"not compiled: {type(exc).__name__}: {exc}"[:300])
        return
    out[name] = (run, c)


# f32 NN through a transposing pass: B (K x N) copied to N x K by K.transpose (tiles of TRANSPOSE_TILE), then
# the NT GEMM, whose tf32 wgmma reads B K-major (at 1.0x cuBLAS tf32 on NT); both kernels are timed
TRANSPOSE_TILE = (64, 64)
TRANSPOSED_NT = ((128, 256, 32), (128, 128, 32))


def transposed_candidates(case: Case, a: Any, b: Any, m: int, n: int, k: int, ops: Ops, op: str) -> dict:
    """f32 NN as B transposed into a scratch N x K array, then K.gemm_nt: the second kernel is the NT
    GEMM at its full speed, the first a copy of B (4 bytes read and written per element of B)."""
    import bridge
    out: dict = {}
    if case.layout != "NN" or case.label != "f32":
        return out
    bt = bridge.empty((n, k), "float32")
    bt_part = tile.partition(bt, TRANSPOSE_TILE)
    for bm, bn, bk in TRANSPOSED_NT:
        c = bridge.full((m, n), np.nan, "float32")
        part = tile.partition(c, (bm, bn))
        name = f"DSL tile transpose {TRANSPOSE_TILE[0]}x{TRANSPOSE_TILE[1]} + NT {bm}x{bn}x{bk}"

        def run(i: int, part=part, bk=bk) -> None:
            K.transpose(b, bt_part)
            K.gemm_nt(a, bt, part, bk)
        _add_if_it_runs(out, ops, op, name, run, c)
    return out


def ours(case: Case, a: Any, b: Any, m: int, n: int, tiles: list, arch: str, ops: Ops, op: str) -> dict:
    """Our candidates: name -> (launch, output)."""
    import bridge
    out = {}
    f8 = case.label == "e4m3"
    base = K.gemm_f8 if f8 else K.gemm_nt if case.layout == "NT" else K.gemm
    kernels: dict = {}
    for bm, bn, bk, mode, cast in candidates(case, tiles):
        c = bridge.full((m, n), np.nan, "bfloat16" if f8 else case.label if cast else "float32")
        part = tile.partition(c, (bm, bn))
        name = f"DSL tile {bm}x{bn}x{bk}" + ("" if mode == "sync" else f" {mode}") + (f" ->{case.label}" if cast else "")
        # one dispatcher per (kernel, pipeline): a dispatcher keeps the launcher its first launch made
        fn = K.gemm_cast if cast else base
        if (fn, mode) not in kernels:
            kernels[fn, mode] = fn if mode == "sync" else tile.kernel(fn.pyfunc, persistent=mode.startswith("pws"))
        kernel = kernels[fn, mode]
        args = (a, b, np.float32(1.0), part, bk) if f8 else (a, b, part, bk)
        try:
            with mode_env(mode):
                kernel.compile(args, arch)
                kernel(*args)
        except Exception as exc:  # noqa: BLE001 - a candidate that does not compile is a row, not fatal
            ops.rep.row(f"{op}: {name}", None, "TFLOP/s", note=f"not compiled: {type(exc).__name__}: {exc}"[:300])
            continue
        out[name] = ((lambda i, kk=kernel, aa=args: kk(*aa)), c)
    return out


def one_case(ops: Ops, torch: Any, tg: Any, rng: np.random.Generator, case: Case, host_dtype: Any,
             tiles: list[tuple[int, int, int]], triton_configs: list[tuple]) -> None:
    import bridge
    m, n, k = SHAPES[case.shape]
    f8 = case.label == "e4m3"
    ah, bh = host_operands(rng, case, host_dtype)
    rows = np.sort(rng.choice(m, 16, replace=False))
    b64 = bh.astype(np.float64).T if case.layout == "NT" else bh.astype(np.float64)
    ref = ah[rows].astype(np.float64) @ b64
    scale = float(np.sqrt(k))
    tol = ({"rtol": 1e-2, "atol": 5e-3 * scale} if case.label == "f32" else
           {"rtol": 8e-3, "atol": f8_bound(ah[rows], b64)} if f8 else {"rtol": 1e-3, "atol": 1e-3 * scale})
    a, b = bridge.from_host(ah), bridge.from_host(bh)
    op = f"GEMM {case.shape} {case.label}" + (" NT" if case.layout == "NT" else "")
    impls: dict = {}
    mine = ours(case, a, b, m, n, tiles, bridge.current_device().arch, ops, op)
    mine.update(split_k_candidates(case, a, b, m, n, k, ops, op) if not tiles else {})
    mine.update(transposed_candidates(case, a, b, m, n, k, ops, op) if not tiles else {})
    for name, (launch, c) in mine.items():
        # a 16-bit C (name "->bf16") is rounded once more, as cuBLAS's is: its check allows that
        ctol = dict(tol, rtol=1e-2) if "->" in name else tol
        impls[name] = (launch, (lambda c=c, nm=name, t=ctol: check_close(
            nm, c.to_host()[rows].astype(np.float32), ref, **t)))
    peers: dict[str, set[str]] = {"torch.matmul": set(), "Triton": set()}
    if torch is not None:
        peer_impls(torch, tg, case, ah, bh, a, b, rows, ref, tol, triton_configs, impls, peers)
    tf = ops.run(op, impls, set(mine), "TFLOP/s", 2 * m * n * k / 1e12,
                 extra=lambda v: {"of_peak": round(v / DENSE_PEAK[case.label], 3)})
    if tf:
        ratios(ops, case, op, tf, set(mine), peers)


def peer_impls(torch: Any, tg: Any, case: Case, ah, bh, a, b, rows, ref, tol, triton_configs, impls, peers) -> None:
    """cuBLAS (torch.matmul, or torch._scaled_mm for f8) and the Triton configs, on the same bytes."""
    m, n, k = SHAPES[case.shape]
    res: list = []
    if case.label == "e4m3":
        dev = torch.device("cuda")
        ta = torch.from_numpy(ah.view(np.uint8)).to(dev).view(torch.float8_e4m3fn)
        tb = torch.from_numpy(bh.view(np.uint8)).to(dev).view(torch.float8_e4m3fn)
        one = torch.ones((), dtype=torch.float32, device=dev)
        trows = torch.as_tensor(rows, device=dev)
        # both accumulation modes: use_fast_accum=True keeps the tensor core's own accumulation, as our
        # wgmma path does (the same error, measured); the default promotes to f32 every few k steps.
        # The bar is against the faster of the two in this run.
        for fast in (False, True):
            name, out = f"torch._scaled_mm{' fast_accum' if fast else ''}", []
            impls[name] = (keep_first(out, lambda fast=fast: torch._scaled_mm(
                ta, tb.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)),
                (lambda nm=name, out=out: check_close(nm, out[0][trows].float().cpu().numpy(), ref, **tol)))
            peers["torch.matmul"].add(name)
        return
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    tbk = tb.t() if case.layout == "NT" else tb                 # the K x N operand, a view either way
    trows = torch.as_tensor(rows, device=ta.device)
    tc = torch.empty((m, n), dtype=torch.float32, device=ta.device)
    # cuBLAS rounds its output to the input dtype: allow that rounding in its check
    impls["torch.matmul"] = (keep_first(res, lambda: torch.matmul(ta, tbk)), lambda: check_close(
        "torch.matmul", res[0][trows].float().cpu().numpy(), ref, rtol=1e-2, atol=tol["atol"]))
    peers["torch.matmul"].add("torch.matmul")
    if tg is None or not case.triton:
        return
    for cfg in triton_configs:
        if case.label == "f32" and cfg[2] * cfg[0] > 128 * 32:
            continue         # f32 tiles this large do not fit Triton's shared memory
        name = "Triton {}x{}x{} w{} s{}".format(*cfg)
        impls[name] = ((lambda i, cfg=cfg: tg.gemm(ta, tbk, tc, cfg)),
                       (lambda nm=name: check_close(nm, tc[trows].cpu().numpy(), ref, **tol)))
        peers["Triton"].add(name)


def ratios(ops: Ops, case: Case, op: str, tf: dict, mine: set, peers: dict) -> None:
    best = max((x for x in tf if x in mine), key=tf.get, default=None)
    if best is None:
        ops.failed.append(f"{op}: no DSL tile configuration compiled and ran correctly")
        return
    cfg = best.split("tile ")[-1]
    for peer, names in peers.items():
        pbest = max((x for x in tf if x in names), key=tf.get, default=None)
        if pbest is None:
            continue
        ops.rep.row(f"{op}: best DSL / {peer}", tf[best] / tf[pbest], "x", ours=best, peer=pbest)
        bar, peer_name = bar_for(case, peer, pbest)
        if bar is not None:
            ops.rep.bar(f"{op}: DSL tile ({cfg}) vs {pbest if peer == 'torch.matmul' else peer}", tf[best],
                        tf[pbest], higher_is_better=True, bar=bar, peer_name=peer_name)


def bar_for(case: Case, peer: str, pbest: str) -> tuple[float | None, str]:
    """The bar this case carries against `peer` (None: reported, no bar)."""
    if case.label == "e4m3":
        return F8_BAR, "torch._scaled_mm (cuBLAS f8)"
    if peer != "torch.matmul" and not (case.shape == "8192^3" and case.layout == "NN"):
        return None, ""
    if case.label == "f32":
        if peer != "torch.matmul":
            return None, ""
        return (TF32_BAR if case.layout == "NT" else TF32_NN_BAR), "torch.matmul (cuBLAS tf32)"
    if case.shape == "8192^3" and case.layout == "NN":
        return BARS[peer], ("torch.matmul (cuBLAS)" if peer == "torch.matmul" else f"plain Triton ({pbest})")
    if case.layout == "NN":
        return SKINNY_BARS.get(case.shape, SHAPE_BAR), "torch.matmul (cuBLAS)"
    return None, ""


def cases_from(args: argparse.Namespace) -> list[Case]:
    """DEFAULT_CASES, or the product of --shapes x --dtypes x --layouts (f8 is NT only)."""
    if not (args.shapes or args.dtypes or args.layouts):
        return list(DEFAULT_CASES)
    shapes = list(SHAPES) if args.shapes == "all" else (args.shapes or "8192^3").split(",")
    out = []
    for shape in shapes:
        for label in (args.dtypes or "bf16,f16,f32").split(","):
            for layout in (args.layouts or "NN").upper().split(","):
                if label != "e4m3" or layout == "NT":
                    out.append(Case(shape, label, layout, label != "e4m3"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--shapes", help="comma list of " + ", ".join(SHAPES) + " or 'all' (default: DEFAULT_CASES)")
    ap.add_argument("--dtypes", help="comma list of bf16, f16, f32, e4m3")
    ap.add_argument("--layouts", help="comma list of NN (row-major B), NT (B stored N x K)")
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
    dtypes = {"bf16": getattr(ml, "bfloat16", None), "f16": np.float16, "f32": np.float32,
              "e4m3": getattr(ml, "float8_e4m3fn", None)}
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = True   # the f32 peer is cuBLAS tf32
    tiles = [tuple(int(x) for x in t.split("x")) for t in args.tiles.split(",")] if args.tiles else []
    tcfgs = [] if tg is None or args.triton == "none" else (
        list(tg.CONFIGS) if args.triton == "all" else [tg.CONFIGS[int(i)] for i in args.triton.split(",")])
    ops = Ops(rep, 6 if args.quick else 15)
    rng = np.random.default_rng(7)
    try:
        with bridge.use_stream(bridge.Stream()):
            for case in cases_from(args):
                if dtypes[case.label] is None:
                    rep.row(f"GEMM {case.shape} {case.label}", None, "TFLOP/s",
                            note="ml_dtypes missing: no host bfloat16 / float8")
                    continue
                one_case(ops, torch, tg, rng, case, dtypes[case.label], tiles, tcfgs)
    finally:
        rep.finish(args.json)
    return ops.exit_code()


if __name__ == "__main__":
    sys.exit(main())
