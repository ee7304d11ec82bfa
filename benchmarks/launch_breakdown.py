"""Where the host time of a validated launch goes: the same 3-array + 1-scalar vecadd, taken apart.

Rows (host µs per call, one process, median of repeats):
- a trivial native call (the Python -> pybind11 floor) and a native call taking *args;
- a validated launch that stops before the driver (zero-size arrays: the grid derived from the contract
  is empty, so nothing is launched), per producer: bridge arrays, CuPy arrays, torch tensors;
- the full validated launch for the same producers, and raw `cuLaunchKernel` through cuda.bindings.
"full - stop-before-driver" is the driver call plus our post-launch work; "stop-before-driver - floor"
is intake + validation. No bars: this explains launch_overhead.py's numbers, it does not judge them.
"""
from __future__ import annotations

import numpy as np

from _common import Report, host_us, parse_args, try_import

CPP_SRC = r"""
#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
KB_CONTRACT(add, KB_BLOCK(32),
            KB_ARGS(KB_ARRAY(a, f32, 1, read), KB_ARRAY(b, f32, 1, read), KB_ARRAY(c, f32, 1, write),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(a) == n", "len(b) == n", "len(c) == n"), KB_GRID_FROM(c));
"""


def main() -> None:
    args = parse_args(__doc__)
    rep = Report("launch breakdown (host µs per call, tiny vecadd, 3 arrays + 1 scalar)")
    import bridge
    from bridge import _native
    if not bridge.gpu_available():
        rep.notes.append(f"no GPU: {bridge.gpu_unavailable_reason()}")
        rep.finish(args.json)
        return
    from _bench_kit import nvcc_module
    n = 3000 if args.quick else 20000
    mod = nvcc_module(CPP_SRC, "breakdown")
    k = mod.add
    launcher = k.launcher

    rep.row("native no-op call (pybind11 floor)", host_us(_native.current_stream_handle, n), "us")
    one = (1, 2, 3, 4)
    rep.row("native call with 4 *args", host_us(lambda: _native.refcount_probe(*one), n), "us")

    def pair(label: str, make) -> None:
        full = [make(1) for _ in range(3)]
        empty = [make(0) for _ in range(3)]
        launcher(*full, 1)
        launcher(*empty, 0)
        bridge.synchronize()
        rep.row(f"{label}: validated, stops before the driver", host_us(lambda: launcher(*empty, 0), n), "us")
        rep.row(f"{label}: validated launch", host_us(lambda: launcher(*full, 1), n), "us")
        bridge.synchronize()

    pair("bridge arrays", lambda m: bridge.from_host(np.ones(m, np.float32)))
    from launch_overhead import dsl_add
    xs3 = [bridge.from_host(np.ones(1, np.float32)) for _ in range(3)]
    dsl_add(*xs3, 1)
    d = dsl_add.dispatcher
    rep.row("DSL kernel, bridge arrays: k(*args)", host_us(lambda: dsl_add(*xs3, 1), n), "us")
    rep.row("DSL kernel, bridge arrays: native dispatcher", host_us(lambda: d(*xs3, 1), n), "us")
    bridge.synchronize()
    cp = try_import("cupy", rep.missing)
    if cp is not None:
        pair("CuPy arrays", lambda m: cp.ones(m, cp.float32))
    torch = try_import("torch", rep.missing)
    if torch is not None:
        pair("torch tensors", lambda m: torch.ones(m, device="cuda"))

    from cuda.bindings import driver as drv
    xs = [bridge.from_host(np.ones(1, np.float32)) for _ in range(3)]
    import ctypes
    func = drv.CUfunction(int(k.handle))
    params = (tuple(x.ptr for x in xs) + (1,), (ctypes.c_void_p,) * 3 + (ctypes.c_int,))

    def raw():
        err, = drv.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, 0, params, 0)
        if int(err):
            raise RuntimeError(f"cuLaunchKernel: {err}")
    raw()
    rep.row("cuda.bindings cuLaunchKernel (no validation)", host_us(raw, n), "us")
    bridge.synchronize()
    rep.finish(args.json)


if __name__ == "__main__":
    main()
