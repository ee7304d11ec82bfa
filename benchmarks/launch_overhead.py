"""Host time per launch of a tiny kernel: bridge (validated) vs CuPy RawKernel, cuda.core, cuda.bindings,
numba-cuda, torch.add, Triton and a C++ `<<<>>>` loop, all in one run on the same GPU.

The kernel is the same PTX everywhere (nvcc -ptx of a 4-argument vecadd): 3 arrays + 1 int scalar,
grid 1, block 32. The DSL rows launch the same vecadd written with `@simt.kernel` through its native
Dispatcher (`k(*args)`, grid derived from the contract; `k[1, 32](*args)` prepared). Bars (DESIGN §7):
bridge with CuPy args ≤ 3.5 µs and below CuPy RawKernel; bridge with torch args ≤ 4 µs; the DSL kernel
with CuPy args ≤ 3.5 µs and with torch args ≤ 4 µs. The µs targets were set when RawKernel took 4.75 µs
and torch.add 5.03 µs on this GPU, so each is scaled by that peer's time in the same run.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap

import numpy as np

from _common import Report, host_us, parse_args, try_import

from dsl import f32, i32, simt


@simt.kernel(block=32, requires=["len(a) == len(c)", "len(b) == len(c)", "len(c) == n"])
def dsl_add(a: simt.Array[f32], b: simt.Array[f32], c: simt.DisjointSlice[f32], n: i32):
    """The same tiny vecadd in the DSL: launched through its native Dispatcher (validated)."""
    i = simt.thread.index_1d()
    c[i] = a[i] + b[i]

SRC = textwrap.dedent(r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
""")

LOOP = textwrap.dedent(r"""
#include <cstdio>
#include <chrono>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("ERR %s\n", cudaGetErrorString(e)); return 1; } } while (0)
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
int main() {
  float *a, *b, *c; CK(cudaMalloc(&a, 4)); CK(cudaMalloc(&b, 4)); CK(cudaMalloc(&c, 4));
  for (int i = 0; i < 1000; i++) add<<<1, 32>>>(a, b, c, 1);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  double best = 1e9;
  for (int r = 0; r < 5; r++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; i++) add<<<1, 32>>>(a, b, c, 1);
    auto t1 = std::chrono::steady_clock::now();
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / 20000;
    if (us < best) best = us;
  }
  printf("%f\n", best);
  return 0;
}
""")


def main() -> None:
    args = parse_args(__doc__)
    rep = Report("launch overhead (host µs per launch, tiny kernel, 3 arrays + 1 scalar)")
    n = 500 if args.quick else 3000
    import bridge
    from bridge.contract import ArgSpec, LaunchContract
    if not bridge.gpu_available():
        rep.notes.append(f"no GPU: {bridge.gpu_unavailable_reason()}")
        rep.finish(args.json)
        return
    tmp = tempfile.mkdtemp()
    cu = os.path.join(tmp, "add.cu")
    open(cu, "w").write(SRC)
    ptx_path = os.path.join(tmp, "add.ptx")
    cc = bridge.Device(0).cc
    arch = f"sm_{cc[0]}{cc[1]}"
    subprocess.check_call(["nvcc", "-ptx", f"-arch={arch}", "-O3", cu, "-o", ptx_path])
    ptx = open(ptx_path, "rb").read()

    contract = LaunchContract(
        "add", [ArgSpec.array("a", "f32", 1, access="read", abi="pointer"),
                ArgSpec.array("b", "f32", 1, access="read", abi="pointer"),
                ArgSpec.array("c", "f32", 1, access="write", abi="pointer"),
                ArgSpec.scalar("n", "i32")],
        launch_bounds=1024, requires=["len(a) == n", "len(b) == n", "len(c) == n"])
    mod = bridge.load_module(ptx, contracts={"add": contract})
    k = mod.add
    launch = k[1, 32]
    n1 = 1

    xb, yb, zb = (bridge.from_host(np.random.rand(1).astype(np.float32)) for _ in range(3))
    launch(xb, yb, zb, n1)
    bridge.synchronize()
    rep.row("bridge, bridge arrays", host_us(lambda: launch(xb, yb, zb, n1), n), "us")
    bridge.synchronize()
    dsl_add(xb, yb, zb, n1)
    bridge.synchronize()
    assert np.allclose(zb.to_host(), xb.to_host() + yb.to_host())
    rep.row("DSL simt kernel, bridge arrays (validated)", host_us(lambda: dsl_add(xb, yb, zb, n1), n), "us")
    bridge.synchronize()

    cp = try_import("cupy", rep.missing)
    ours_cupy = None
    dsl_cupy = dsl_torch = None
    raw_cupy = None
    if cp is not None:
        x, y, z = (cp.random.rand(1, dtype=cp.float32) for _ in range(3))
        launch(x, y, z, n1)
        cp.cuda.Device().synchronize()
        z_ref = (x + y).get()
        assert np.allclose(z.get(), z_ref)
        ours_cupy = host_us(lambda: launch(x, y, z, n1), n)
        rep.row("bridge, CuPy arrays (validated)", ours_cupy, "us")
        cp.cuda.Device().synchronize()
        z[...] = 0
        dsl_add(x, y, z, n1)
        cp.cuda.Device().synchronize()
        assert np.allclose(z.get(), z_ref)
        dsl_cupy = host_us(lambda: dsl_add(x, y, z, n1), n)
        rep.row("DSL simt kernel, CuPy arrays (validated)", dsl_cupy, "us")
        dsl_prepared = dsl_add[1, 32]
        rep.row("DSL simt kernel[1, 32], CuPy arrays (validated)",
                host_us(lambda: dsl_prepared(x, y, z, n1), n), "us")
        cp.cuda.Device().synchronize()
        rk = cp.RawModule(path=ptx_path).get_function("add")
        n32 = np.int32(1)
        rk((1,), (32,), (x, y, z, n32))
        raw_cupy = host_us(lambda: rk((1,), (32,), (x, y, z, n32)), n)
        rep.row("CuPy RawKernel (no validation)", raw_cupy, "us")
        cp.cuda.Device().synchronize()
        core = try_import("cuda.core", rep.missing)
        if core is not None:
            try:
                try:
                    from cuda.core import Device, LaunchConfig, ObjectCode, launch as core_launch
                except ImportError:
                    from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch as core_launch
                d = Device(0)
                d.set_current()
                st = d.create_stream()
                ker = ObjectCode.from_ptx(ptx).get_kernel("add")
                cfg = LaunchConfig(grid=1, block=32)
                xp, yp, zp = x.data.ptr, y.data.ptr, z.data.ptr
                core_launch(st, cfg, ker, xp, yp, zp, n32)
                st.sync()
                rep.row("cuda.core launch (raw pointers, no validation)",
                        host_us(lambda: core_launch(st, cfg, ker, xp, yp, zp, n32), n), "us")
                st.sync()
            except Exception as exc:  # noqa: BLE001
                rep.missing["cuda.core launch"] = repr(exc)[:200]
        nb = try_import("numba.cuda", rep.missing)
        if nb is not None:
            try:
                @nb.jit
                def nadd(a_, b_, c_):
                    i = nb.grid(1)
                    if i < c_.size:
                        c_[i] = a_[i] + b_[i]
                nadd[1, 32](x, y, z)
                nb.synchronize()
                rep.row("numba-cuda, CuPy arrays", host_us(lambda: nadd[1, 32](x, y, z), max(50, n // 10), 20), "us")
                nb.synchronize()
            except Exception as exc:  # noqa: BLE001
                rep.missing["numba-cuda launch"] = repr(exc)[:200]

    torch = try_import("torch", rep.missing)
    ours_torch = torch_add = None
    if torch is not None:
        tx, ty, tz = (torch.rand(1, device="cuda") for _ in range(3))
        launch(tx, ty, tz, n1)
        torch.cuda.synchronize()
        assert torch.allclose(tz, tx + ty)
        ours_torch = host_us(lambda: launch(tx, ty, tz, n1), n)
        rep.row("bridge, torch tensors (validated)", ours_torch, "us")
        torch.cuda.synchronize()
        tz.zero_()
        dsl_add(tx, ty, tz, n1)
        torch.cuda.synchronize()
        assert torch.allclose(tz, tx + ty)
        dsl_torch = host_us(lambda: dsl_add(tx, ty, tz, n1), n)
        rep.row("DSL simt kernel, torch tensors (validated)", dsl_torch, "us")
        torch.cuda.synchronize()
        torch_add = host_us(lambda: torch.add(tx, ty, out=tz), n)
        rep.row("torch.add(out=)", torch_add, "us")
        torch.cuda.synchronize()
        triton = try_import("triton", rep.missing)
        if triton is not None:
            try:
                import triton.language as tl

                @triton.jit
                def tadd(a_, b_, c_, nn, BLOCK: tl.constexpr):
                    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                    m = o < nn
                    tl.store(c_ + o, tl.load(a_ + o, mask=m) + tl.load(b_ + o, mask=m), mask=m)
                tadd[(1,)](tx, ty, tz, 1, BLOCK=128)
                torch.cuda.synchronize()
                rep.row("Triton JIT launch", host_us(lambda: tadd[(1,)](tx, ty, tz, 1, BLOCK=128),
                                                     max(100, n // 3), 50), "us")
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                rep.missing["triton launch"] = repr(exc)[:200]

    loop = os.path.join(tmp, "loop.cu")
    open(loop, "w").write(LOOP)
    try:
        subprocess.check_call(["nvcc", "-O2", f"-arch={arch}", loop, "-o", os.path.join(tmp, "loop")])
        floor = float(subprocess.check_output([os.path.join(tmp, "loop")]).decode().strip())
        rep.row("C++ <<<>>> loop (floor)", floor, "us")
    except Exception as exc:  # noqa: BLE001
        rep.missing["C++ loop"] = repr(exc)[:200]

    # The targets (3.5 us with CuPy args, 4 us with torch args) were set on this H200 when CuPy
    # RawKernel took 4.75 us and torch.add 5.03 us (../shared/anchors). The machine's speed drifts between
    # runs, so each target is scaled by the same peer measured in this run.
    cupy_target = raw_cupy * 3.5 / 4.75 if raw_cupy is not None else None
    torch_target = torch_add * 4.0 / 5.03 if torch_add is not None else None
    if ours_cupy is not None and cupy_target is not None:
        rep.bar("validated launch, CuPy args vs 3.5 us target", ours_cupy, cupy_target, higher_is_better=False,
                bar=1.0, peer_name="0.737x RawKernel (3.5 us target)")
        rep.bar("validated launch vs CuPy RawKernel", ours_cupy, raw_cupy, higher_is_better=False, bar=1.0,
                peer_name="CuPy RawKernel")
    if ours_torch is not None and torch_target is not None:
        rep.bar("validated launch, torch args vs 4 us target", ours_torch, torch_target, higher_is_better=False,
                bar=1.0, peer_name="0.795x torch.add (4 us target)")
    if dsl_cupy is not None and cupy_target is not None:
        rep.bar("DSL kernel launch, CuPy args vs 3.5 us target", dsl_cupy, cupy_target, higher_is_better=False,
                bar=1.0, peer_name="0.737x RawKernel (3.5 us target)")
    if dsl_torch is not None and torch_target is not None:
        rep.bar("DSL kernel launch, torch args vs 4 us target", dsl_torch, torch_target, higher_is_better=False,
                bar=1.0, peer_name="0.795x torch.add (4 us target)")
    rep.finish(args.json)


if __name__ == "__main__":
    main()
