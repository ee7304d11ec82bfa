"""Throwaway: time variants of the layernorm_backward port against its C++ (same harness, interleaved)."""
import importlib.util, pathlib, sys, re
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import numpy as np
SRC = pathlib.Path("examples/llm_kernels/layernorm.py").read_text()
ROWS_OLD = "    row = simt.warp.index_1d()                  # this warp owns dinp[row, :]\n    if row < N:\n"
assert ROWS_OLD in SRC
VARIANTS = {  # name: (threads, unroll, rows form, grid blocks per SM)
    "i512u4": (512, 4, False, None), "i256u4": (256, 4, False, None), "i512u1": (512, 1, False, None),
    "r256u4g4": (256, 4, True, 4), "r512u4g2": (512, 4, True, 2), "r256u1g4": (256, 1, True, 4),
    "r512u4g4": (512, 4, True, 4), "r256u4g8": (256, 4, True, 8),
}
def variant(name, threads, unroll, rows):
    s = SRC.replace("BWD_THREADS = 512", f"BWD_THREADS = {threads}")
    if unroll != 4:
        s = s.replace("simt.warp.lanes(C, unroll=4)", "simt.warp.lanes(C)" if unroll == 1 else f"simt.warp.lanes(C, unroll={unroll})")
    if rows:
        s = s.replace(ROWS_OLD, "    for row in simt.warp.rows(N):\n")
    p = pathlib.Path(f"devrun/_lnv_{name}.py"); p.write_text(s)
    spec = importlib.util.spec_from_file_location(f"_lnv_{name}", p); m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m; spec.loader.exec_module(m); return m.layernorm_backward

def main():
    import llm_kernels as LK
    from _bench_kit import time_interleaved
    import bridge
    from interop_tests.cpp import llm_kit as L
    only = sys.argv[1:] or list(VARIANTS)
    rng = np.random.default_rng(2026); sms = bridge.current_device().sm_count
    case = [c for c in LK.layernorm_cases(rng, sms) if c.kernel == "layernorm_backward"][0]
    fns = {}
    cpp = L.kernel("layernorm_backward"); a = case.args(); f = LK.launcher(cpp, case, a); f(0); case.check(a); fns["C++"] = f
    for name in only:
        threads, unroll, rows, g = VARIANTS[name]
        k = variant(name, threads, unroll, rows)
        a = case.args(); kept = (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
        fn = (lambda i, k=k, kept=kept, g=g: k(*kept, grid=(g * sms,))) if rows else (lambda i, k=k, kept=kept: k(*kept))
        try:
            fn(0); case.check(a); fns[name] = fn
        except Exception as e:
            print(name, "FAILED", type(e).__name__, str(e)[:300])
    for rnd in range(2):
        ms = time_interleaved(fns, reps=40)
        print(f"round {rnd}: " + "  ".join(f"{k} {v*1000:.1f}us ({ms['C++']/v:.3f})" for k, v in ms.items()))
if __name__ == "__main__":
    if sys.argv[1:2] == ["--cpu"]:
        from interop_tests.cpp import llm_kit as L
        rng = np.random.default_rng(1)
        N, C = 37, 100
        x = rng.standard_normal((N, C)).astype(np.float32); w = rng.uniform(.5, 1.5, C).astype(np.float32)
        g = rng.standard_normal((N, C)).astype(np.float32); b = np.zeros(C, np.float32)
        _, mean, rstd = L.layernorm_forward(x, w, b)
        d_inp, d_w, d_b = L.layernorm_backward(g, x, w, mean.astype(np.float32), rstd.astype(np.float32))
        for name, (threads, unroll, rows, gr) in VARIANTS.items():
            k = variant(name, threads, unroll, rows)
            dinp, dw, db = np.zeros((N, C), np.float32), np.zeros(C, np.float32), np.zeros(C, np.float32)
            kw = {"grid": (2,)} if rows else {}
            k.simulate(dinp, dw, db, g, x, w, mean.astype(np.float32), rstd.astype(np.float32), **kw)
            err = max(np.abs(dinp - d_inp).max(), np.abs(dw - d_w).max(), np.abs(db - d_b).max())
            print(name, "max err", err, "ptx bytes", len(k.ptx(dinp, dw, db, g, x, w, mean.astype(np.float32), rstd.astype(np.float32))))
    else:
        main()
