"""How fast the CPU simulator (dsl.sim) runs a 2^16-element vecadd (target: well under 2 s on 2 cores).

The vecadd uses hand-built IR so it measures the simulator alone, not the front end. `--zoo` also
times every kernel of interop_tests/kernels_zoo.py (through the front end) at about n elements. Run:
    python benchmarks/simulator_speed.py [log2_n] [block] [--zoo]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from dsl.ir import nodes as N
from dsl.ir.types import F32, I64, ArrayType
from dsl.sim import run


def vecadd_ir() -> N.Function:
    a, b, out = (N.Param(name, ArrayType(F32, 1, writable=(name == "out")), k)
                 for k, name in enumerate(("a", "b", "out")))
    i = N.Var("i", I64)
    ld = lambda p: N.Load(N.ParamRef(p), [N.ReadVar(i)], "none", 0, F32)  # noqa: E731
    return N.Function("vecadd", [a, b, out], N.VOID, [
        N.Assign(i, N.TupleGet(N.ThreadIndexValue(1), 0, I64)),
        N.GuardedRegion(N.ParamRef(out), [N.ReadVar(i)], [
            N.Store(N.ParamRef(out), [N.ReadVar(i)], N.BinOp("add", ld(a), ld(b), F32), "guarded", 0)]),
    ], True)


def best_of(k: int, fn) -> float:
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def zoo(n: int) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop_tests"))
    import kernels_zoo
    rng = np.random.default_rng(0)
    for case in kernels_zoo.ZOO:
        L = case.make(rng, n)
        case.kernel.simulate(*L.args, grid=L.grid, block=L.block, shared_mem=L.shared_mem)  # compile
        t = best_of(3, lambda: case.kernel.simulate(*L.args, grid=L.grid, block=L.block,
                                                    shared_mem=L.shared_mem))
        print(f"  zoo {case.name:16s} {t * 1e3:8.2f} ms")


def main() -> None:
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = 1 << int(argv[0]) if argv else 1 << 16
    block = int(argv[1]) if len(argv) > 1 else 256
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    fn = vecadd_ir()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        run(fn, [a, b, out], grid=-(-n // block), block=block)
        times.append(time.perf_counter() - t0)
    assert np.array_equal(out, a + b)
    print(f"simulated vecadd n={n} block={block}: best {min(times) * 1e3:.2f} ms, "
          f"median {sorted(times)[2] * 1e3:.2f} ms")
    if "--zoo" in flags:
        zoo(n)


if __name__ == "__main__":
    main()
