"""Triton's tutorials 01-06: ours (the dsl.tile kernels of examples/triton_tutorials/) vs the Triton
originals (benchmarks/_triton_peers.py) vs the torch op, one process.

    python benchmarks/triton_tutorials.py [--quick] [--json out.json] [--only 01,03,05bwd,06]

| tutorial | shape | torch op |
|---|---|---|
| 01 vector add | n = 2^26 f32 | torch.add(out=) |
| 02 fused softmax | 4096 x (1000, 4096, 16384) f32 | torch.softmax |
| 03 matmul + leaky ReLU | 4096^3 f16, f16 C | torch.matmul(out=) + leaky_relu_ |
| 04 low-memory dropout, p = 0.5 | n = 2^26 f32 | x * a stored f32 mask of 0 and 1/(1-p) (F.dropout: a row) |
| 05 layer norm forward | 4096 x (1024, 8192) f16 | F.layer_norm |
| 05bwd layer norm backward (dx, dw, db) | 4096 x (1024, 8192) f16 | autograd of F.layer_norm |
| 06 fused attention forward | f16 B4 H16 S4096 D128 (and D64 unless --quick), causal and not | SDPA, flash backend |

Each implementation is checked against NumPy float64 before it is timed (a wrong one is not timed: a
wrong kernel of ours fails the run); timing is CUDA events around one launch, L2 flushed before each,
every implementation of a case interleaved in each round, median over the rounds. Ours and Triton's
configurations are tried like an autotuner (every one is a row) and the best of each side is compared;
a torch op is one configuration. GB/s count the bytes the op must move (TFLOP/s: GEMM, attention). Bars
(issue 28): every tutorial >= 1.0x its Triton original and >= 1.0x the torch op. A missing Triton or
torch is a row with a reason, never a silent gap. Triton's dropout draws Philox numbers (tl.rand),
ours a two-round integer hash (examples/triton_tutorials/04_dropout.py): the same keep rate, other masks.
The layer norm backward is timed from the forward's saved statistics (the forward is outside the timed
region; torch: `torch.autograd.grad` of one F.layer_norm graph, kept), GB/s counting x and dy read
and dx written, as the tutorial counts them; ours needs no zeroed buffer (each block writes its own
partial row), Triton's peer allocates and zeroes its locks in the timed region, as the tutorial does. The attention is checked
against SDPA in f32 (max |error| 2e-2) and counted in TFLOP/s (4*B*H*S^2*D, halved when causal);
examples/flash_attention.py (our tuned kernel, f32 output) and SDPA's cuDNN backend are timed in the
same rounds for context (rows, no bars).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any, Callable

import numpy as np

from _bench_kit import ROOT, Ops, check_close, gpu_or_note, keep_first
from _common import Report, try_import

from dsl import tile

TUTORIALS = {"01": "01_vector_add", "02": "02_fused_softmax", "03": "03_matmul", "04": "04_dropout",
             "05": "05_layer_norm", "06": "06_fused_attention"}
# the shapes (issue 28): module constants, so that a smoke run can shrink them
VECTOR_N = 1 << 26
SOFTMAX_ROWS, SOFTMAX_COLS = 4096, (1000, 4096, 16384)
MATMUL_MNK = (4096, 4096, 4096)
DROPOUT_N, DROPOUT_P, DROPOUT_SEED = 1 << 26, 0.5, 20261203
LAYER_NORM_ROWS, LAYER_NORM_COLS = 4096, (1024, 8192)
ATTN_SHAPES = ((4, 16, 4096, 128), (4, 16, 4096, 64))      # (B, H, S, D); --quick: the first only
ATTN_TOL = 2e-2


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", default="", help="comma list of cases to run (01, 02, 03, 04, 05 (forward), "
                    "05bwd, 06); default all")
    return ap.parse_args()


def load_example(relpath: str) -> Any:
    """The module of examples/<relpath>.py (examples are scripts, not a package)."""
    path = ROOT / "examples" / f"{relpath}.py"
    spec = importlib.util.spec_from_file_location(f"example_{relpath.replace('/', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_tutorial(stem: str) -> Any:
    return load_example(f"triton_tutorials/{stem}")


class Bench:
    """One run: the report, the case runner, torch, the Triton peers (None: why is in `no_triton`) and
    the summary table (one line per case: best of ours, of Triton, the torch op)."""

    def __init__(self, rep: Report, reps: int, torch: Any, peers: Any, no_triton: str, quick: bool = False) -> None:
        self.rep, self.ops, self.torch, self.tp, self.no_triton = rep, Ops(rep, reps), torch, peers, no_triton
        self.quick = quick
        self.table: list[dict] = []

    def triton_skipped(self, op: str, unit: str) -> None:
        self.rep.row(f"{op}: Triton", None, unit, note=f"skipped: {self.no_triton}")

    def case(self, op: str, ours: dict, triton: dict, torch_op: dict, unit: str, work: float,
             context: dict | None = None) -> None:
        """Time ours + Triton + torch (name -> (launch fn, check fn)); record the bars and the summary.
        `context`: more implementations timed in the same rounds, rows of no side and no bar (one whose
        name starts with "DSL" is ours: a wrong result of it fails the run)."""
        if self.tp is None:
            self.triton_skipped(op, unit)
        context = context or {}
        vals = self.ops.run(op, {**ours, **triton, **torch_op, **context},
                            set(ours) | {k for k in context if k.startswith("DSL")}, unit, work)
        best = {side: max(((vals[k], k) for k in names if k in vals), default=None)
                for side, names in (("ours", ours), ("Triton", triton), ("torch", torch_op))}
        line = {"case": op, "unit": unit}
        for side, b in best.items():
            line[side] = None if b is None else {"name": b[1], "value": b[0], "ms": work / b[0] * 1e3}
        self.table.append(line)
        if best["ours"] is None:
            return
        for side in ("Triton", "torch"):
            if best[side] is not None:
                self.rep.bar(f"{op} vs {side}", best["ours"][0], best[side][0], higher_is_better=True,
                             bar=1.0, peer_name=best[side][1])

    def print_table(self) -> None:
        print("\nsummary (best of each side; ratio = ours / peer, > 1 is faster)")
        print(f"  {'case':<48}{'ours ms':>10}{'Triton ms':>11}{'torch ms':>10}{'vs Triton':>11}{'vs torch':>10}")
        for line in self.table:
            ms = {s: (line[s]["ms"] if line[s] else None) for s in ("ours", "Triton", "torch")}
            cells = [f"{v:>10.4f}" if v is not None else f"{'-':>10}" for v in ms.values()]
            ratios = [f"{ms[p] / ms['ours']:>10.3f}" if ms[p] and ms["ours"] else f"{'-':>10}"
                      for p in ("Triton", "torch")]
            print(f"  {line['case'][:48]:<48}{cells[0]}{cells[1]:>11}{cells[2]}{ratios[0]:>11}{ratios[1]}")
        self.rep.extra["summary"] = self.table


def size(n: int) -> str:
    """2^26 for a power of two, else the number (short names for the GPU check's bar table)."""
    return f"2^{n.bit_length() - 1}" if n > 1 and n & (n - 1) == 0 else str(n)


def to_dev(torch: Any, a: np.ndarray) -> Any:
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def nan_like(torch: Any, shape: tuple, dtype: Any) -> Any:
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def checked(name: str, out: Any, ref: np.ndarray, **tol: Any) -> Callable[[], None]:
    return lambda: check_close(name, out.cpu().numpy(), ref, **tol)


# ------------------------------------------------------------------------------------------------ 01
def vector_add(b: Bench, rng: np.random.Generator) -> None:
    T, torch = load_tutorial(TUTORIALS["01"]), b.torch
    n = VECTOR_N
    xh, yh = rng.random(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    ref = xh.astype(np.float64) + yh
    tol = {"rtol": 2.0 ** -24}
    x, y = to_dev(torch, xh), to_dev(torch, yh)
    ours, triton, peer = {}, {}, {}
    from dsl import tile
    # Every implementation writes the same output buffer: at the roofline where the address of the output
    # moves a kernel by up to 0.5% (H100, 2026-12-05: one kernel 268.5-269.8 us by which of three buffers it
    # wrote; docs/results/gpu_runs_2026-12-05_1340-1346), separate buffers would time the allocations as well.
    # Each check sets it back to NaN, so the next implementation's check sees only what that one wrote.
    out = nan_like(torch, (n,), torch.float32)

    def check(who: str) -> Callable[[], None]:
        return lambda: (check_close(who, out.cpu().numpy(), ref, **tol), out.fill_(float("nan")))

    for block in (1024, 2048, 4096):
        args = T.launch_args(x, y, out, block)
        ours[f"DSL tile add_kernel BLOCK {block}"] = (lambda i, a=args: T.add_kernel(*a), check("ours"))
    # plain ld.global as Triton emits it, not the read-only path
    args, plain = T.launch_args(x, y, out, 1024), tile.kernel(T.add_kernel.pyfunc, lowering={"nc_loads": False})
    ours["DSL tile add_kernel BLOCK 1024 nc_loads=False"] = (lambda i, a=args: plain(*a), check("ours"))
    # inside blocks without per-access bounds tests (the lowering switch interior_tiles; a CUDA C++ kernel
    # without them was 0.3% ahead of ours and Triton's on one buffer, H100 2026-12-05 13:40)
    args, inside = T.launch_args(x, y, out, 1024), tile.kernel(T.add_kernel.pyfunc, lowering={"interior_tiles": True})
    ours["DSL tile add_kernel BLOCK 1024 interior_tiles"] = (lambda i, a=args: inside(*a), check("ours"))
    # cache qualifiers on the loads (lowering switch load_hint): the L2 fetching 128 or 256 bytes around a miss,
    # and L1::no_allocate for data read once; untimed when added (2026-12-06), the hint a user's switch today
    for hint in ("L2::128B", "L2::256B", "L1::no_allocate.L2::256B"):
        for block in (1024, 4096):
            args, k = T.launch_args(x, y, out, block), tile.kernel(T.add_kernel.pyfunc, lowering={"load_hint": hint})
            ours[f"DSL tile add_kernel BLOCK {block} load_hint {hint}"] = (lambda i, a=args, k=k: k(*a), check("ours"))
    # (persistent blocks striding over the tiles lost: 3271 / 4090 GB/s at BLOCK 1024 / 4096 against 4266 for
    # the plain grid, H200 2026-12-04; docs/results/gpu_runs_2026-12-04_2033-2038)
    # Triton's num_warps knob, on the same kernel; 512 on 4 warps is one 16-byte access an operand a thread, the
    # tile of torch.add's vectorized kernel, which stayed 0.1-0.2 % ahead of BLOCK 1024 (H200 12-04, H100 12-06):
    # 3011 GB/s, 1.004x Triton's best (3000) and torch (2998), BLOCK 1024 2990 in the same run (H100 2026-12-06
    # 17:09, docs/results/gpu_runs_2026-12-06_1707)
    for block, warps in ((2048, 8), (4096, 8), (1024, 2), (512, 4)):
        args, k = T.launch_args(x, y, out, block), tile.kernel(T.add_kernel.pyfunc, num_warps=warps)
        ours[f"DSL tile add_kernel BLOCK {block} num_warps {warps}"] = (lambda i, a=args, k=k: k(*a), check("ours"))
    if b.tp is not None:
        for block in (1024, 4096):
            triton[f"Triton add_kernel BLOCK {block}"] = (lambda i, bl=block: b.tp.add(x, y, out, bl), check("Triton"))
    peer["torch.add(out=)"] = (lambda i: torch.add(x, y, out=out), check("torch"))
    b.case(f"01 vector add {size(n)} f32", ours, triton, peer, "GB/s", 3 * n * 4 / 1e9)


# ------------------------------------------------------------------------------------------------ 02
def softmax_candidates(cols: int) -> list[dict]:
    """launch_args options of the tutorial's kernels: rows per block for whole-row tiles, one row on
    the warps that give each thread 16 or 32 elements (Triton's 8 warps at 4096: fewer threads, more
    of the row in flight for the registers), and for the longest rows also the chunked online kernel
    (forced by a smaller whole-row limit)."""
    width = 1 << (cols - 1).bit_length()
    found = [{"rows_per_block": r} for r in (1, 2, 4) if r * width <= 8192 or r == 1]
    default = min(512, max(64, width // 8)) // 32            # the compiler's warps (about 8 a thread)
    found += [{"num_warps": w} for w in (1, 2, 4, 8, 16, 32) if width // (32 * w) in (16, 32) and w != default]
    if cols == max(SOFTMAX_COLS):
        found.append({"max_whole_row": width // 2, "chunk": width // 4})
    return found


def fused_softmax(b: Bench, rng: np.random.Generator) -> None:
    T, torch = load_tutorial(TUTORIALS["02"]), b.torch
    for cols in SOFTMAX_COLS:
        rows = SOFTMAX_ROWS
        xh = (rng.standard_normal((rows, cols), dtype=np.float32) * 3)
        ref = T.reference(xh)
        tol = {"rtol": 2e-5, "atol": 1e-9}
        x = to_dev(torch, xh)
        ours, triton, peer = {}, {}, {}
        for how in softmax_candidates(cols):
            out = nan_like(torch, (rows, cols), torch.float32)
            kernel, args = T.launch_args(x, out, **how)
            label = " ".join(f"{k}={v}" for k, v in how.items())
            ours[f"DSL tile {kernel.name} {label}"] = (lambda i, k=kernel, a=args: k(*a),
                                                       checked("ours", out, ref, **tol))
        if b.tp is not None:
            out = nan_like(torch, (rows, cols), torch.float32)
            triton["Triton softmax_kernel (persistent)"] = (lambda i, o=out: b.tp.softmax(x, o),
                                                             checked("Triton", out, ref, **tol))
        res: list = []
        peer["torch.softmax"] = (keep_first(res, lambda: torch.softmax(x, dim=1)),
                                 lambda: check_close("torch", res[0].cpu().numpy(), ref, **tol))
        b.case(f"02 softmax {rows}x{cols} f32", ours, triton, peer, "GB/s", 2 * rows * cols * 4 / 1e9)


# ------------------------------------------------------------------------------------------------ 03
MATMUL_OURS = (((128, 256), 64, "sync"), ((128, 128), 64, "sync"), ((128, 256), 64, "pws"))


def matmul(b: Bench, rng: np.random.Generator) -> None:
    from gemm import pipeline_env
    T, torch = load_tutorial(TUTORIALS["03"]), b.torch
    m, n, k = MATMUL_MNK
    op = f"03 matmul+leaky_relu {f'{m}^3' if m == n == k else f'{m}x{n}x{k}'} f16"
    ah, bh = (rng.standard_normal(s, dtype=np.float32).astype(np.float16) for s in ((m, k), (k, n)))
    rows = np.sort(rng.choice(m, 16, replace=False))
    ref = T.reference(ah[rows], bh)
    tol = {"rtol": 1e-2, "atol": 1e-3 * np.sqrt(k)}
    a, bm = to_dev(torch, ah), to_dev(torch, bh)

    def check(name: str, c: Any) -> Callable[[], None]:
        return lambda: check_close(name, c[torch.from_numpy(rows).cuda()].float().cpu().numpy(), ref, **tol)
    ours, triton, peer = {}, {}, {}
    pws = tile.kernel(T.matmul_kernel.pyfunc, persistent=True)   # its own dispatcher: the ws launcher
    for shape, bk, mode in MATMUL_OURS:
        c = nan_like(torch, (m, n), torch.float16)
        args = T.launch_args(a, bm, c, shape, bk)
        kernel = pws if mode == "pws" else T.matmul_kernel
        name = f"DSL tile matmul_kernel {shape[0]}x{shape[1]}x{bk}" + (" persistent ws" if mode == "pws" else "")
        try:
            with pipeline_env("ws" if mode == "pws" else "sync"):
                kernel(*args)                  # compiles under the pipeline switch (read at compile time)
        except Exception as exc:  # noqa: BLE001 - a configuration that does not compile is a row
            b.rep.row(f"{op}: {name}", None, "TFLOP/s", note=f"not compiled: {type(exc).__name__}: {exc}"[:300])
            continue
        ours[name] = (lambda i, kk=kernel, aa=args: kk(*aa), check("ours", c))
    if b.tp is not None:
        for cfg in b.tp.MATMUL_CONFIGS:
            c = nan_like(torch, (m, n), torch.float16)
            name = "Triton matmul_kernel {}x{}x{} w{} s{}".format(*cfg)
            triton[name] = (lambda i, cc=c, g=cfg: b.tp.matmul(a, bm, cc, g), check("Triton", c))
    c = nan_like(torch, (m, n), torch.float16)

    def torch_op(i: int) -> None:
        torch.matmul(a, bm, out=c)
        torch.nn.functional.leaky_relu_(c, 0.01)
    peer["torch.matmul + leaky_relu_"] = (torch_op, check("torch", c))
    b.case(op, ours, triton, peer, "TFLOP/s", 2 * m * n * k / 1e12)


# ------------------------------------------------------------------------------------------------ 04
def dropout_check(name: str, out: Any, xh: np.ndarray, p: float, exact: np.ndarray | None) -> Callable[[], None]:
    """Kept elements equal x / (1 - p), dropped ones 0; the mask equals `exact` when given (ours and
    the torch mask multiply), else (Triton's and torch's Philox) keeps 1 - p within 5 sigma."""
    def check() -> None:
        got = out.cpu().numpy()
        kept = got != 0
        if exact is not None and not np.array_equal(kept, exact):
            raise AssertionError(f"{name}: the mask differs from the NumPy twin's in {int((kept != exact).sum())} "
                                 f"elements")
        q, nn = 1.0 - p, len(got)
        if abs(kept.mean() - q) > 5 * np.sqrt(p * q / nn):
            raise AssertionError(f"{name}: keep rate {kept.mean():.5f}, expected {q} within 5 sigma")
        check_close(name, np.where(kept, got, 0), np.where(kept, xh.astype(np.float64) / (1.0 - p), 0.0),
                    rtol=1e-6)
    return check


def dropout(b: Bench, rng: np.random.Generator) -> None:
    T, torch = load_tutorial(TUTORIALS["04"]), b.torch
    n, p, seed = DROPOUT_N, DROPOUT_P, DROPOUT_SEED
    xh = T.inputs(n, 4)
    keep = T.random_numpy(n, seed) > np.float32(p)
    x = to_dev(torch, xh)
    ours, triton, peer = {}, {}, {}
    for block in (1024, 4096):
        out = nan_like(torch, (n,), torch.float32)
        args = T.launch_args(x, out, p, seed, block)
        ours[f"DSL tile seeded_dropout BLOCK {block}"] = (lambda i, a=args: T.seeded_dropout(*a),
                                                          dropout_check("ours", out, xh, p, keep))
    if b.tp is not None:
        out = nan_like(torch, (n,), torch.float32)
        triton["Triton seeded_dropout (tl.rand) BLOCK 1024"] = (
            lambda i, o=out: b.tp.seeded_dropout(x, o, p, seed), dropout_check("Triton", out, xh, p, None))
    scaled = to_dev(torch, np.where(keep, np.float32(1.0 / (1.0 - p)), np.float32(0.0)))
    out = nan_like(torch, (n,), torch.float32)
    peer["torch.mul(x, stored mask)"] = (lambda i, o=out: torch.mul(x, scaled, out=o),
                                         dropout_check("torch", out, xh, p, keep))
    res: list = []
    f_dropout = (keep_first(res, lambda: torch.nn.functional.dropout(x, p, training=True)),
                 lambda: dropout_check("F.dropout", res[0], xh, p, None)())
    del keep
    b.case(f"04 dropout p={p} {size(n)} f32", ours, triton, peer, "GB/s", 2 * n * 4 / 1e9)
    # F.dropout draws its own mask (and stores it): a row beside the bar's peer, no bar
    if not b.ops.run(f"04 dropout p={p} {size(n)} f32 (row only)", {"torch F.dropout": f_dropout}, set(), "GB/s",
                     2 * n * 4 / 1e9):
        b.rep.notes.append("04: torch F.dropout did not run or failed its check (see missing)")


# ------------------------------------------------------------------------------------------------ 05
def layer_norm_candidates(T: Any, cols: int) -> list[dict]:
    """pick options: the whole-row kernel on its default warps (16 elements a thread) and with 8 or
    32 elements a thread (Triton's warps: min(max(N / 256, 1), 8)), and the chunked kernel."""
    width = 1 << (cols - 1).bit_length()
    found = [{}] if width <= T.MAX_WHOLE_ROW else []
    found += [{"num_warps": w} for w in (1, 2, 4, 8, 16, 32)
              if width <= T.MAX_WHOLE_ROW and width // (32 * w) in (8, 32)]
    return found + [{"max_whole_row": 0}]


def layer_norm(b: Bench, rng: np.random.Generator) -> None:
    T, torch = load_tutorial(TUTORIALS["05"]), b.torch
    for cols in LAYER_NORM_COLS:
        rows = LAYER_NORM_ROWS
        xh, wh, bh = T.inputs(rows, cols, np.float16, seed=int(rng.integers(1 << 30)))
        want_y, want_mean, want_rstd = T.reference(xh, wh, bh)
        x, w, bias = (to_dev(torch, a) for a in (xh, wh, bh))

        def outs() -> tuple:
            return (nan_like(torch, (rows, cols), torch.float16), nan_like(torch, (rows,), torch.float32),
                    nan_like(torch, (rows,), torch.float32))

        def check(name: str, y: Any, mean: Any = None, rstd: Any = None) -> Callable[[], None]:
            def run() -> None:
                check_close(f"{name} y", y.float().cpu().numpy(), want_y, rtol=1e-2, atol=1e-2)
                if mean is not None:
                    check_close(f"{name} mean", mean.cpu().numpy(), want_mean, rtol=1e-4, atol=1e-4)
                    check_close(f"{name} rstd", rstd.cpu().numpy(), want_rstd, rtol=1e-3)
            return run
        ours, triton, peer = {}, {}, {}
        for how in layer_norm_candidates(T, cols):
            y, mean, rstd = outs()
            kernel, args = T.pick(x, y, w, bias, mean, rstd, 1e-5, **how)
            label = f"BLOCK_SIZE {args[-1]}" if kernel is T.layer_norm_fwd else f"whole row, {kernel.num_warps} warps"
            ours[f"DSL tile {kernel.name} {label}"] = (lambda i, k=kernel, a=args: k(*a),
                                                      check("ours", y, mean, rstd))
        if b.tp is not None:
            y, mean, rstd = outs()
            triton["Triton layer_norm_fwd"] = (lambda i, o=(y, mean, rstd): b.tp.layer_norm_fwd(x, o[0], w, bias, *o[1:]),
                                               check("Triton", y, mean, rstd))
        res: list = []
        peer["torch F.layer_norm"] = (
            keep_first(res, lambda: torch.nn.functional.layer_norm(x, (cols,), w, bias, 1e-5)),
            lambda: check("torch", res[0])())
        b.case(f"05 layer_norm fwd {rows}x{cols} f16", ours, triton, peer, "GB/s", 2 * rows * cols * 2 / 1e9)


# ------------------------------------------------------------------------------------------------ 05 backward
def layer_norm_bwd_candidates(T: Any, rows: int, cols: int) -> list[dict]:
    """backward_args options: the defaults (rows_per_block rows a block, 16 elements a thread), half
    and twice the rows a block, half and twice the warps, and the kernel that loads the next row
    ahead (on the default warps and on twice as many)."""
    width = 1 << (cols - 1).bit_length()
    r, w = T.rows_per_block(rows, cols), T.row_warps(width)
    found = [{}] + [{"rows": k} for k in (r // 2, r * 2) if k >= 1]
    found += [{"num_warps": k} for k in (w // 2, w * 2) if 1 <= k <= 32]
    return found + [{"ahead": True}] + ([{"ahead": True, "num_warps": w * 2}] if w * 2 <= 32 else [])


def layer_norm_bwd(b: Bench, rng: np.random.Generator) -> None:
    T, torch = load_tutorial(TUTORIALS["05"]), b.torch
    for cols in LAYER_NORM_COLS:
        rows = LAYER_NORM_ROWS
        xh, wh, bh = T.inputs(rows, cols, np.float16, seed=int(rng.integers(1 << 30)))
        dyh = rng.standard_normal((rows, cols), dtype=np.float32).astype(np.float16)
        want = T.reference_bwd(xh, wh, dyh)
        _, mean_h, rstd_h = T.reference(xh, wh, bh)     # the forward's statistics, in f32 as it saves them
        x, w, bias, dy = (to_dev(torch, a) for a in (xh, wh, bh, dyh))
        mean, rstd = (to_dev(torch, a.astype(np.float32)) for a in (mean_h, rstd_h))
        tol = {"rtol": 1e-2, "atol": 1e-2 * np.sqrt(rows)}       # dw, db: sums of M rows of f16 partials

        def outs() -> tuple:
            return (nan_like(torch, (rows, cols), torch.float16), nan_like(torch, (cols,), torch.float16),
                    nan_like(torch, (cols,), torch.float16))

        def check(name: str, got: Any) -> Callable[[], None]:
            def run() -> None:
                dx, dw, db = got if isinstance(got, tuple) else got[0]
                check_close(f"{name} dx", dx.float().cpu().numpy(), want[0], rtol=1e-2, atol=1e-2)
                check_close(f"{name} dw", dw.float().cpu().numpy(), want[1], **tol)
                check_close(f"{name} db", db.float().cpu().numpy(), want[2], **tol)
            return run
        ours, triton, peer = {}, {}, {}
        for how in layer_norm_bwd_candidates(T, rows, cols):
            got = outs()
            r = how.get("rows") or T.rows_per_block(rows, cols)
            part = torch.empty(T.partials_shape(rows, cols, r), dtype=torch.float32, device="cuda")
            (kdx, adx), (kdw, adw) = T.backward_args(x, dy, w, mean, rstd, *got, part, **how)

            def ours_bwd(i: int, k1=kdx, a1=adx, k2=kdw, a2=adw) -> None:
                k1(*a1)
                k2(*a2)
            name = kdx.name.replace("layer_norm_bwd_", "")
            ours[f"DSL tile {name} R{r} ({kdx.num_warps} warps) + dwdb {adw[2].tile_shape[0]}"] = (
                ours_bwd, check("ours", got))
        if b.tp is not None:
            got = outs()
            triton["Triton _layer_norm_bwd_dx_fused + _dwdb"] = (
                lambda i, o=got: b.tp.layer_norm_bwd(dy, x, w, mean, rstd, *o), check("Triton", got))
        xt, wt, bt = (a.clone().requires_grad_(True) for a in (x, w, bias))
        y = torch.nn.functional.layer_norm(xt, (cols,), wt, bt, 1e-5)      # the graph, built once, kept
        res: list = []
        peer["torch autograd.grad(F.layer_norm)"] = (
            keep_first(res, lambda: torch.autograd.grad(y, (xt, wt, bt), dy, retain_graph=True)),
            check("torch", res))
        b.case(f"05 layer_norm bwd {rows}x{cols} f16", ours, triton, peer, "GB/s", 3 * rows * cols * 2 / 1e9)


# ------------------------------------------------------------------------------------------------ 06
# (BLOCK_M, BLOCK_N, warps or None for the kernel's own) by head dim; BLOCK_N divides BLOCK_M (the causal
# diagonal stage). D128 128x128 leaves out: 244 bytes of spills on sm_90 (ptxas), 11 s to compile.
# (query rows, key rows, warps, lowering switches fixed for the kernel or None): the tile choices, then the
# ladder's lowerings (docs/tile.md "Per-kernel lowering"), as a Triton user lists num_warps / num_stages
# configurations; the bar takes the best, as Triton's autotuner does
_WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24"}
_FF = {"fp_fusion": True}
_FTZ = {"fp_fusion": True, "ftz": True}
_SLICED = {"wgmma_slices": True, "loop_pipeline": "tma"}
# fp_fusion: a multiply feeding a subtract as one fma, as Triton compiles by default (enable_fp_fusion);
# written as tile.fma it measured +5 % (64x64 tma) and +13 % (128x128 ws) at D64 on 2026-12-04.
# ftz: exp2 as one ex2.approx.ftz (Triton's), not the range test and two multiplies around ex2.approx that
# keep denormal results: a quarter of the D64 loop's instructions (SASS, 128x64 w4: 739 -> 535; Triton 495).
# Rows measured and dropped (docs/tile.md "Tutorial 06 ladder"): Q from shared memory (wgmma_a="shared",
# no gain at D128), 128x128 on the tma rings, 128x64 ws, three TMA stages, product_overlap on 128x64 w4
# slices, three-buffer cp.async without ftz, and 64x64 tma without fp_fusion's partners
_LADDER = ((64, 64, None, {"loop_pipeline": "tma"}), (128, 128, 8, _WS),
           (64, 64, None, {"loop_pipeline": "tma"} | _FF), (128, 128, 8, _WS | _FF),
           (64, 64, None, {"loop_pipeline": "tma"} | _FTZ), (128, 128, 8, _WS | _FTZ),
           # the two consumer warpgroups taking turns on the tensor cores (pingpong), causal's diagonal loop
           # on the producer's ring too (ws_chain): the forward ladder's best rung (docs/tile.md)
           (128, 128, 8, _WS | _FTZ | {"ws_chain": True, "pingpong": True}))
ATTN_OURS = {128: ((64, 64, None, None), (128, 64, 8, None)) + _LADDER,
             64: ((64, 64, None, None), (128, 64, 8, None)) + _LADDER +
             # Triton's best D64 tile: one warpgroup owning 128 rows, two m64 wgmma slices (frags.warpgroup_rows)
             ((128, 64, 4, {"wgmma_slices": True}), (128, 64, 4, _SLICED | _FF), (128, 64, 4, _SLICED | _FTZ),
              # the PV wait deferred past the next QK^T's issue, as Triton's TTGIR does (product_overlap)
              (64, 64, None, {"loop_pipeline": "tma", "product_overlap": True} | _FF),
              (64, 64, None, {"loop_pipeline": "tma", "product_overlap": True} | _FTZ),
              # and Triton's pipeline itself: cp.async by every thread, three buffers, two blocks ahead
              (128, 64, 4, {"wgmma_slices": True, "loop_stages": 3} | _FTZ),
              # Q read by the tensor cores from shared memory, as Triton does: 90 registers, not 109
              # (ptxas, sm_90a), so 5 blocks an SM fit, not 4; the loop loses its 16 moves of Q
              (64, 64, None, {"loop_pipeline": "tma", "wgmma_a": "shared"} | _FTZ))}


def attn_check(name: str, out: Any, ref: Any) -> Callable[[], None]:
    """Max |out - SDPA in f32| below ATTN_TOL (`out` a tensor, or a list holding the first result)."""
    def run() -> None:
        got = out[0] if isinstance(out, list) else out
        err = (got.float().reshape(ref.shape) - ref).abs().max().item()
        if not err <= ATTN_TOL:
            raise AssertionError(f"{name}: max |out - SDPA(f32)| = {err:.3e} > {ATTN_TOL}; not timing it")
    return run


def attention_ours(b: Bench, T: Any, op: str, q2: Any, k2: Any, v2: Any, s: int, causal: bool, ref: Any) -> dict:
    """Our tutorial kernel on each ATTN_OURS tile (one that does not compile is a row with the reason)."""
    torch, found = b.torch, {}
    for bm, bn, warps, lowering in ATTN_OURS[q2.shape[1]]:
        kernel = T.attn_fwd if warps is None and lowering is None else \
            tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)
        out = nan_like(torch, tuple(q2.shape), q2.dtype)
        name = f"DSL tile attn_fwd {bm}x{bn} w{warps or 'auto'}" + \
            ("" if lowering is None else " " + " ".join(f"{k}={v}" for k, v in lowering.items()))
        try:
            args = T.launch_args(q2, k2, v2, out, s, causal, bm, bn)
            kernel(*args)
        except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a row
            b.rep.row(f"{op}: {name}", None, "TFLOP/s", note=f"not compiled: {type(exc).__name__}: {exc}"[:300])
            continue
        found[name] = (lambda i, kk=kernel, a=args: kk(*a), attn_check("ours", out, ref))
    return found


def attention_triton(b: Bench, q: Any, k: Any, v: Any, causal: bool, ref: Any) -> dict:
    """The tutorial's kernel on each of its configurations through TMA descriptors, and the first
    through plain pointers (a row that still runs should the descriptors not)."""
    found = {}
    for cfg, desc in [(c, True) for c in b.tp.ATTN_CONFIGS] + [(b.tp.ATTN_CONFIGS[0], False)]:
        out = b.torch.full_like(q, float("nan"))
        name = "Triton _attn_fwd {}x{} w{} s{} ".format(*cfg) + ("TMA descriptors" if desc else "pointers")
        found[name] = (lambda i, o=out, c=cfg, dd=desc: b.tp.attn_fwd(q, k, v, o, causal, q.shape[-1] ** -0.5, c, dd),
                       attn_check("Triton", out, ref))
    return found


def attention(b: Bench, rng: np.random.Generator) -> None:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    T, torch, fa = load_tutorial(TUTORIALS["06"]), b.torch, load_example("flash_attention")
    for bsz, heads, s, d in ATTN_SHAPES[:1] if b.quick else ATTN_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(int(rng.integers(1 << 30)))
        q, k, v = (torch.randn(bsz, heads, s, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
        q2, k2, v2 = (t.reshape(-1, d) for t in (q, k, v))
        for causal in (False, True):
            op = f"06 attention fwd f16 B{bsz} H{heads} S{s} D{d} {'causal' if causal else 'full'}"
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            ours = attention_ours(b, T, op, q2, k2, v2, s, causal, ref)
            triton = attention_triton(b, q, k, v, causal, ref) if b.tp is not None else {}

            def sdpa(backend: Any, store: list) -> Callable[[int], None]:
                def run() -> Any:
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                return keep_first(store, run)
            flash, cudnn = [], []
            peer = {"torch SDPA flash": (sdpa(SDPBackend.FLASH_ATTENTION, flash), attn_check("SDPA flash", flash, ref))}
            out = nan_like(torch, tuple(q2.shape), torch.float32)
            context = {"torch SDPA cuDNN": (sdpa(SDPBackend.CUDNN_ATTENTION, cudnn), attn_check("SDPA cuDNN", cudnn, ref))}
            try:
                fa_args = fa.launch_args(q2, k2, v2, out, s, causal)
                context["DSL tile flash_fwd (examples/flash_attention.py, f32 O)"] = (
                    lambda i, a=fa_args: fa.flash_fwd(*a), attn_check("flash_attention.py", out, ref))
            except ValueError as exc:
                b.rep.row(f"{op}: examples/flash_attention.py", None, "TFLOP/s", note=f"not run: {exc}"[:300])
            flops = 4 * bsz * heads * s * s * d / (2 if causal else 1)
            b.case(op, ours, triton, peer, "TFLOP/s", flops / 1e12, context)


CASES = {"01": vector_add, "02": fused_softmax, "03": matmul, "04": dropout, "05": layer_norm,
         "05bwd": layer_norm_bwd, "06": attention}


def main() -> int:
    args = parse()
    rep = Report("Triton tutorials 01-06: dsl.tile vs Triton vs torch")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    torch = try_import("torch", rep.missing)
    if torch is None:
        rep.notes.append("torch missing: the tutorials run on torch tensors; nothing measured")
        rep.finish(args.json)
        return 0
    import bridge
    peers = try_import("_triton_peers", rep.missing)
    no_triton = "" if peers is not None else f"triton not importable ({rep.missing.get('_triton_peers', '?')})"
    only = [t for t in args.only.split(",") if t] or list(CASES)
    bench = Bench(rep, 8 if args.quick else 20, torch, peers, no_triton, args.quick)
    rng = np.random.default_rng(28)
    try:
        with bridge.use_stream(bridge.Stream()):      # ours, torch and Triton all on this stream
            for t in only:
                if t not in CASES:
                    raise SystemExit(f"--only: expected tutorials among {', '.join(CASES)}, got {t!r}")
                CASES[t](bench, rng)
                rep.checkpoint(args.json)
    finally:
        rep.finish(args.json)
        bench.print_table()
    return bench.ops.exit_code()


if __name__ == "__main__":
    sys.exit(main())
