"""The kernels of a GPT-2 training step (cpp/kernels/llm/), timed at GPT-2 small shapes: B*T = 8*1024
tokens, C = 768 channels, V = 50257 padded to 50304, 124,475,904 parameters (AdamW, global norm).

Each implementation is checked against a NumPy float64 reference (tests' llm_kit) on a fresh launch
before it is timed; timing is CUDA events around one launch, L2 flushed before each, every kernel of
every side interleaved in each round, median over the rounds. Prints one table (ms and GB/s of the
bytes a launch must move). Sides: "C++" (cpp/kernels/llm) and "DSL", the ports of
examples/llm_kernels/ (SIDES: name -> kernel name -> launchable kernel). A port takes the C++ call's
arguments less the size scalars its arrays carry, and its own grid (one warp or block a row where the
C++ kernel's warps stride over rows). The table gives each kernel's DSL speed (C++ ms / DSL ms), the
`with simt.unsafe():` blocks the port needs, and the geometric mean of the speeds.

    python benchmarks/llm_kernels.py [--quick] [--json out.json]
"""
from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

import ml_dtypes
import numpy as np

from _bench_kit import check_close, exit_code, gpu_or_note, time_interleaved
from _common import Report, parse_args

from interop_tests.cpp import llm_kit as L

B, T, C, V, VP = 8, 1024, 768, 50257, 50304
BT = B * T
N_PARAMS = 124_475_904                      # GPT-2 small with the padded vocabulary
BF16 = ml_dtypes.bfloat16
CHECK_ROWS = 64                             # logits rows checked (the whole float64 reference is 3.3 GB)



class DslPort:
    """The DSL port of C++ kernel `name`, launched with the C++ call's arguments: the size scalars the
    port does not take are dropped (by name), the port derives its grid, and it gets the case's block
    only where it declares launch bounds (not an exact block)."""

    def __init__(self, name: str) -> None:
        import examples.llm_kernels as ports
        self.name, self.kernel, self.unsafe = name, ports.port(name), ports.unsafe_blocks(name)
        self.launch = getattr(ports.family(name), "launch", None) if name == "global_norm_squared" else None
        params = getattr(self.kernel, "pyfunc", None)
        self.params = set(inspect.signature(params).parameters) if params else {"out", "values"}

    def launcher(self, case: "Case", args: tuple) -> Callable[[int], None]:
        names = _cpp_arg_names(L.kernel(self.name))
        kept = tuple(a for n, a in zip(names, args) if n in self.params)
        if self.launch is not None:
            return lambda i: self.launch(*kept)
        options = getattr(self.kernel, "options", None)
        if case.block is not None and options is not None and options.block is None:
            return lambda i: self.kernel(*kept, block=case.block)
        return lambda i: self.kernel(*kept)


def _cpp_arg_names(kernel: Any) -> list[str]:
    return [a["name"] if isinstance(a, dict) else a.name for a in kernel.contract.args]


SIDES: dict[str, Callable[[str], Any]] = {"C++": L.kernel, "DSL": DslPort}


@dataclass
class Case:
    kernel: str
    moved: int                               # bytes one launch must read + write at least
    args: Callable[[], tuple]                # a fresh launch: shared inputs, new outputs / accumulators
    check: Callable[[tuple], None]           # raises AssertionError naming what is wrong
    grid: tuple[int, ...] | None = None      # None: the contract derives it
    block: int | None = None


def _dev(a: np.ndarray) -> Any:
    import bridge
    return bridge.from_host(np.ascontiguousarray(a))


def _host(a: Any) -> np.ndarray:
    return a.to_host()


def _ends(a: np.ndarray, k: int = 1 << 16) -> np.ndarray:
    """The first and last k elements: enough to check an elementwise kernel of 10^8 elements quickly."""
    return np.concatenate([a[:k], a[-k:]])


def layernorm_cases(rng: np.random.Generator, sms: int) -> list[Case]:
    x = (rng.standard_normal((BT, C), dtype=np.float32) * 2 + 0.5)
    w, b = rng.uniform(0.5, 1.5, C).astype(np.float32), rng.standard_normal(C, dtype=np.float32)
    g = rng.standard_normal((BT, C), dtype=np.float32)
    ref_out, ref_mean, ref_rstd = L.layernorm_forward(x, w, b)
    mean32, rstd32 = ref_mean.astype(np.float32), ref_rstd.astype(np.float32)
    d_inp, d_w, d_b = L.layernorm_backward(g, x, w, mean32, rstd32)
    dx, dw, db, dg, dm, dr = map(_dev, (x, w, b, g, mean32, rstd32))

    def fwd_check(a: tuple) -> None:
        check_close("layernorm_forward out", _host(a[0]), ref_out, 1e-4, 1e-4)
        check_close("layernorm_forward mean", _host(a[1]), ref_mean, 1e-5, 1e-6)
        check_close("layernorm_forward rstd", _host(a[2]), ref_rstd, 1e-4)

    def bwd_check(a: tuple) -> None:
        check_close("layernorm_backward dinp", _host(a[0]), d_inp, 1e-4, 1e-4)
        check_close("layernorm_backward dweight", _host(a[1]), d_w, 1e-4, 1e-3)
        check_close("layernorm_backward dbias", _host(a[2]), d_b, 1e-4, 1e-3)

    zeros = lambda *s: _dev(np.zeros(s, np.float32))  # noqa: E731
    return [Case("layernorm_forward", (2 * BT * C + 2 * BT + 2 * C) * 4,
                 lambda: (zeros(BT, C), zeros(BT), zeros(BT), dx, dw, db, BT, C), fwd_check, (BT // 8,), 256),
            Case("layernorm_backward", (4 * BT * C + 2 * BT + 5 * C) * 4,
                 lambda: (zeros(BT, C), zeros(C), zeros(C), dg, dx, dw, dm, dr, BT, C), bwd_check, (4 * sms,), 256)]


def _ends_check(name: str, ref: np.ndarray, rtol: float, atol: float) -> Callable[[tuple], None]:
    """Check the first argument's head and tail (see _ends) against `ref` of the same elements."""
    return lambda a: check_close(name, _ends(_host(a[0])), ref, rtol, atol)


def gelu_cases(rng: np.random.Generator) -> list[Case]:
    n = BT * 4 * C                                        # the MLP's hidden activations
    out: list[Case] = []
    for dtype, tag, rtol in ((BF16, "bf16", 2.0**-7), (np.float32, "f32", 1e-5)):
        x = (rng.standard_normal(n, dtype=np.float32) * 2.5).astype(dtype)
        g = rng.standard_normal(n, dtype=np.float32).astype(dtype)
        ref_y, ref_d = L.gelu(_ends(x)), L.gelu_grad(_ends(x)) * L.f64(_ends(g))
        dx, dg, size = _dev(x), _dev(g), np.dtype(dtype).itemsize
        new = lambda dt=dtype: _dev(np.zeros(n, dt))       # noqa: E731
        out += [Case(f"gelu_forward_{tag}", 2 * n * size, lambda new=new, dx=dx: (new(), dx, n),
                     _ends_check(f"gelu_forward_{tag}", ref_y, rtol, 2e-6), None, 512),
                Case(f"gelu_backward_{tag}", 3 * n * size, lambda new=new, dx=dx, dg=dg: (new(), dx, dg, n),
                     _ends_check(f"gelu_backward_{tag}", ref_d, rtol, 2e-6), None, 512)]
    return out


def residual_encoder_cases(rng: np.random.Generator) -> list[Case]:
    n = BT * C
    a1, a2 = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    ref_sum = (a1.astype(np.float64) + a2).astype(np.float32)
    ids = rng.integers(0, V, (B, T)).astype(np.int32)
    wte, wpe = rng.standard_normal((V, C), dtype=np.float32), rng.standard_normal((T, C), dtype=np.float32)
    g = rng.standard_normal((B, T, C), dtype=np.float32)
    ref_enc = L.encoder_forward(ids, wte, wpe).astype(np.float32)
    add_wte, add_wpe = L.encoder_backward(g, ids, V, T)
    d1, d2, dids, dwte, dwpe, dg = map(_dev, (a1, a2, ids, wte, wpe, g))

    def enc_bwd_check(a: tuple) -> None:
        check_close("encoder_backward dwte", _host(a[0]), add_wte, 0, 1e-5 * B)
        check_close("encoder_backward dwpe", _host(a[1]), add_wpe, 1e-5, 1e-5)

    return [Case("residual_forward", 3 * n * 4, lambda: (_dev(np.zeros(n, np.float32)), d1, d2, n),
                 lambda a: check_close("residual_forward", _host(a[0]), ref_sum), None, 512),
            Case("encoder_forward", (2 * n + T * C) * 4 + BT * 4,
                 lambda: (_dev(np.zeros((B, T, C), np.float32)), dids, dwte, dwpe, B, T, C, V),
                 lambda a: check_close("encoder_forward", _host(a[0]), ref_enc), (math.ceil(n / 4 / 256),), 256),
            Case("encoder_backward", (n + 2 * 2 * n) * 4 + BT * 4,
                 lambda: (_dev(np.zeros((V, C), np.float32)), _dev(np.zeros((T, C), np.float32)), dg, dids,
                          B, T, C, V), enc_bwd_check, (math.ceil(n / 256),), 256)]


def crossentropy_cases(rng: np.random.Generator) -> list[Case]:
    logits = rng.standard_normal((BT, VP), dtype=np.float32) * 4
    targets = rng.integers(0, V, BT).astype(np.int32)
    dlosses = rng.uniform(0.5, 1.5, BT).astype(np.float32)   # O(1): keeps the check's atol meaningful
    k = CHECK_ROWS
    ref_loss = L.crossentropy_forward(logits[:k], targets[:k], V)
    ref_d = L.crossentropy_backward(logits[:k], dlosses[:k], targets[:k], V)
    dl, dt, dd = _dev(logits), _dev(targets), _dev(dlosses)
    return [Case("crossentropy_forward", BT * VP * 4 + BT * 8,
                 lambda: (_dev(np.zeros(BT, np.float32)), dl, dt, BT, V, VP),
                 lambda a: check_close("crossentropy_forward", _host(a[0])[:k], ref_loss, 1e-5, 1e-5), (BT,), 1024),
            Case("crossentropy_backward", 2 * BT * VP * 4 + BT * 8,
                 lambda: (_dev(np.zeros((BT, VP), np.float32)), dl, dd, dt, BT, V, VP),
                 lambda a: check_close("crossentropy_backward", _host(a[0][:k]), ref_d, 1e-4, 1e-7), (BT,), 1024)]


def optimizer_cases(rng: np.random.Generator) -> list[Case]:
    n = N_PARAMS
    p, g = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    m = rng.standard_normal(n, dtype=np.float32) * 0.1
    v = rng.uniform(0.0, 0.05, n).astype(np.float32)
    hp = {k: float(np.float32(x)) for k, x in dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                                                   grad_scale=0.5).items()}
    ref_p, ref_m, ref_v = L.adamw(_ends(p), _ends(m), _ends(v), _ends(g), t=3, **hp)
    norm = sum(float(np.sum(g[i:i + (1 << 24)].astype(np.float64) ** 2)) for i in range(0, n, 1 << 24))
    dg = _dev(g)

    def adamw_check(a: tuple) -> None:
        check_close("adamw_update params", _ends(_host(a[0])), ref_p, 1e-6, 1e-6)
        check_close("adamw_update m", _ends(_host(a[1])), ref_m, 1e-5, 1e-7)
        check_close("adamw_update v", _ends(_host(a[2])), ref_v, 1e-5, 1e-9)

    def norm_check(a: tuple) -> None:
        check_close("global_norm_squared", _host(a[0]), np.array([norm]), 1e-5)

    return [Case("adamw_update", 7 * n * 4, lambda: (_dev(p), _dev(m), _dev(v), dg, n, *hp.values(), 3),
                 adamw_check, None, 512),
            Case("global_norm_squared", n * 4, lambda: (_dev(np.zeros(1, np.float32)), dg, n), norm_check)]


def launcher(kernel: Any, case: Case, args: tuple) -> Callable[[int], None]:
    if isinstance(kernel, DslPort):
        return kernel.launcher(case, args)
    if case.grid is None:
        return (lambda i: kernel(*args)) if case.block is None else (lambda i: kernel(*args, block=case.block))
    configured = kernel[case.grid, case.block]
    return lambda i: configured(*args)


def table(cases: list[Case], ms: dict[str, float]) -> None:
    """Per kernel: ms and GB/s of each side, the DSL speed (C++ ms / DSL ms) and the port's unsafe
    blocks; then the geometric mean of the speeds."""
    import examples.llm_kernels as ports
    sides = list(SIDES)
    head = f"{'kernel':<24}{'MB':>9}" + "".join(f"{s + ' ms':>12}{s + ' GB/s':>12}" for s in sides)
    head += "".join(f"{s + ' speed':>12}" for s in sides[1:]) + f"{'unsafe':>8}"
    print(f"\nGPT-2 small: B*T = {BT}, C = {C}, V = {V} (padded {VP}), {N_PARAMS} parameters\n{head}")
    speeds: dict[str, list[float]] = {s: [] for s in sides[1:]}
    for c in cases:
        line = f"{c.kernel:<24}{c.moved / 1e6:>9.1f}"
        for s in sides:
            t = ms.get(f"{c.kernel} [{s}]")
            line += f"{'failed':>12}{'':>12}" if t is None else f"{t:>12.4f}{c.moved / t / 1e6:>12.1f}"
        for s in sides[1:]:
            t, base = ms.get(f"{c.kernel} [{s}]"), ms.get(f"{c.kernel} [C++]")
            if t and base:
                speeds[s].append(base / t)
            line += f"{base / t:>11.3f}x" if t and base else f"{'-':>12}"
        print(line + f"{ports.unsafe_blocks(c.kernel):>8}")
    for s, v in speeds.items():
        gm = math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
        print(f"{s} speed, geometric mean over {len(v)} of {len(cases)} kernels: {gm:.3f}x "
              f"(min {min(v, default=float('nan')):.3f}x)")
    sys.stdout.flush()


def bars(rep: Report, cases: list[Case], ms: dict[str, float]) -> None:
    """Issue 28's bars: every DSL port >= 0.95x its C++ kernel, the geometric mean >= 1.0x."""
    import examples.llm_kernels as ports
    speeds = []
    for c in cases:
        cpp, dsl = ms.get(f"{c.kernel} [C++]"), ms.get(f"{c.kernel} [DSL]")
        if cpp and dsl:
            speeds.append(cpp / dsl)
            rep.row(f"{c.kernel} DSL speed", round(cpp / dsl, 3), "x", unsafe_blocks=ports.unsafe_blocks(c.kernel))
            rep.bar(f"{c.kernel} DSL port vs C++", dsl, cpp, higher_is_better=False, bar=0.95, peer_name="C++")
    if speeds and len(speeds) == len(cases):
        gm = math.exp(sum(map(math.log, speeds)) / len(speeds))
        rep.bars.append({"name": "llm kernels DSL ports, geometric mean", "ours": gm, "peer": 1.0, "ratio": gm,
                         "bar": ">= 1x C++", "pass": gm >= 1.0})


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("GPT-2 training-step kernels (cpp/kernels/llm)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    rng = np.random.default_rng(2026)
    sms = bridge.current_device().sm_count
    cases = (layernorm_cases(rng, sms) + gelu_cases(rng) + residual_encoder_cases(rng) + crossentropy_cases(rng)
             + optimizer_cases(rng))
    fns: dict[str, Callable[[int], None]] = {}
    failed: list[str] = []
    for case in cases:
        for side, kernel_of in SIDES.items():
            name = f"{case.kernel} [{side}]"
            try:
                launch_args = case.args()
                fn = launcher(kernel_of(case.kernel), case, launch_args)
                fn(0)
                case.check(launch_args)
                fns[name] = fn
            except Exception as exc:  # noqa: BLE001 - reported, never timed
                failed.append(f"{name}: {type(exc).__name__}: {str(exc)[:400]}")
                rep.row(name, None, "ms", note=f"failed: {str(exc)[:300]}")
    ms = time_interleaved(fns, reps=10 if args.quick else 40) if fns else {}
    moved = {f"{c.kernel} [{s}]": c.moved for c in cases for s in SIDES}
    for name, t in ms.items():
        rep.row(name, t, "ms", gb_per_s=round(moved[name] / t / 1e6, 1))
    bars(rep, cases, ms)
    rep.finish(args.json)
    table(cases, ms)
    return exit_code(failed)


if __name__ == "__main__":
    sys.exit(main())
