"""`python -m dsl demo` (or `kernelbridge demo`): one mixed pipeline of a CUDA C++ kernel, a DSL SIMT kernel and a DSL tile
kernel over CuPy/torch arrays, checked against NumPy float64.

    y  = 2.5 * x + y              CUDA C++ `saxpy`, CMake-built, contract read out of its fatbin
    z  = tanh(y) * 0.5 + y        DSL SIMT kernel, chunked ownership (4 elements per thread)
    s  = softmax(z.reshape(R, C)) DSL tile kernel, one row per tile block
    torch.from_dlpack(s).sum(1)   back out to torch, zero-copy

On a GPU it runs there, inside one `bridge.use_stream`. Without a GPU it compiles the same DSL kernels to
PTX (assembled by `ptxas` when present), reads the C++ kernel's contract out of its fatbin, runs the DSL
kernels on the CPU simulator and the C++ step through its NumPy reference — and says so. Whatever is
missing (C++ kernels built without nvcc, ptxas, libdevice) is named with how to get it, and the rest
still runs.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from dsl import f32, simt, tile
from dsl.backend.libdevice import LibdeviceNotFound
from dsl.backend.ptxas import assemble
from dsl.backend.toolkit import locate

ROWS, COLS = 777, 1000          # 777000 elements: not a multiple of any block or chunk
ALPHA = 2.5


@simt.kernel(block=256, requires=["len(y) == len(z)"])
def tanh_residual(y: simt.Array[f32], z: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)           # this thread owns z[4t : 4t+4]; vectorised when aligned
    for k in c:
        z[k] = simt.tanh(y[k]) * 0.5 + y[k]


@tile.kernel
def row_softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-tile.inf)
    e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
    out.store(e / tile.sum(e, axis=1, keepdims=True))


def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    y64 = ALPHA * x.astype(np.float64) + y.astype(np.float64)
    z64 = np.tanh(y64) * 0.5 + y64
    z2 = z64.reshape(ROWS, COLS)
    e = np.exp(z2 - z2.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _tile_shape() -> tuple[int, int]:
    return (1, 1 << (COLS - 1).bit_length())


def run_gpu(x_h: np.ndarray, y_h: np.ndarray) -> np.ndarray:
    import bridge

    have_cupy = "cupy" in sys.modules or _importable("cupy")
    have_torch = _importable("torch")
    n = x_h.size
    stream = bridge.Stream()
    saxpy = _cpp_saxpy()
    if saxpy is None:
        y_h = (ALPHA * x_h + y_h).astype(np.float32)              # the C++ step's NumPy reference
    with bridge.use_stream(stream):
        if have_cupy:
            import cupy as cp
            x, y = cp.asarray(x_h), cp.asarray(y_h)
            src = "CuPy"
        else:
            x, y = bridge.from_host(x_h), bridge.from_host(y_h)
            src = "bridge"
        z = bridge.empty((n,), "float32")
        s = bridge.empty((ROWS, COLS), "float32")
        if saxpy is not None:
            saxpy(ALPHA, x, y, n)                                 # C++ kernel, validated
        tanh_residual(y, z)                                       # DSL SIMT kernel
        row_softmax(z.reshape(ROWS, COLS), tile.partition(s, _tile_shape()))   # DSL tile kernel
        first = "C++ saxpy" if saxpy is not None else "(NumPy saxpy)"
        print(f"  inputs: {src} arrays; {first} -> DSL SIMT tanh_residual -> DSL tile row_softmax "
              f"on one bridge stream (no host sync between steps)")
        if have_torch:
            import torch
            t = torch.from_dlpack(s)
            assert t.data_ptr() == s.ptr, "torch view is not zero-copy"
            sums = t.sum(dim=1)                                   # a torch op, same stream
            print(f"  torch.from_dlpack(s): zero-copy (data_ptr == s.ptr); row sums in "
                  f"[{sums.min().item():.6f}, {sums.max().item():.6f}]")
    stream.synchronize()
    return s.to_host()


def _cpp_saxpy():
    """The C++ saxpy kernel, or None (saying why and how to get it) when the package has no C++ kernels."""
    import bridge
    try:
        return bridge.cpp_kernels.load("saxpy").saxpy
    except bridge.cpp_kernels.CppKernelsMissing as exc:
        print(f"  C++ saxpy: skipped. {exc}")
        print("  -> its NumPy reference stands in for it; the DSL kernels still run")
        return None


def _check_ptx(y: np.ndarray, z: np.ndarray, part) -> None:
    """Compile both DSL kernels to PTX for two archs and assemble them with ptxas when it is found."""
    ptxas = locate("ptxas")
    if not ptxas:
        print(f"  ptxas {ptxas.describe()}")
    for arch in ("sm_80", "sm_90"):
        for name, make in (("tanh_residual", lambda: tanh_residual.ptx(y, z, arch=arch)),
                           ("row_softmax", lambda: row_softmax.ptx(z.reshape(ROWS, COLS), part, arch=arch))):
            try:
                ptx = make()
            except LibdeviceNotFound as exc:
                print(f"  {name:<14} -> no PTX for {arch}: {exc}")
                continue
            if ptxas:
                assemble(ptx, arch)               # raises PtxasError with ptxas's log if it rejects it
                checked = "assembled by ptxas"
            else:
                checked = "not assembled (no ptxas)"
            print(f"  {name:<14} -> PTX for {arch}: {len(ptx.splitlines())} lines, {checked}")


def run_cpu(x_h: np.ndarray, y_h: np.ndarray) -> np.ndarray:
    import bridge
    from bridge.fatbin import embedded_contracts

    y = ALPHA * x_h + y_h                                          # C++ saxpy: NumPy stands in
    try:
        fatbin = bridge.cpp_kernels.path("saxpy")
    except bridge.cpp_kernels.CppKernelsMissing as exc:
        print(f"  C++ saxpy: not available. {exc}")
    else:
        contract = embedded_contracts(fatbin.read_bytes())["saxpy"]
        print(f"  C++ saxpy: contract read from {fatbin.name}: {contract[:72]}...")
    print("  C++ saxpy cannot run without a GPU: its NumPy reference stands in for it")
    z = np.empty_like(y)
    s = np.empty((ROWS, COLS), np.float32)
    part = tile.partition(s, _tile_shape())
    _check_ptx(y, z, part)
    t0 = time.perf_counter()
    tanh_residual.simulate(y, z)
    row_softmax.simulate(z.reshape(ROWS, COLS), part)
    print(f"  simulated both DSL kernels on the CPU in {time.perf_counter() - t0:.2f} s")
    return s


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not usable here"
        return False


def main(argv: list[str] | None = None) -> int:
    import bridge

    rng = np.random.default_rng()
    x = rng.standard_normal(ROWS * COLS).astype(np.float32)
    y = rng.standard_normal(ROWS * COLS).astype(np.float32)
    expected = reference(x, y)
    if bridge.gpu_available():
        d = bridge.Device(0)
        print(f"kernelbridge demo: running on the GPU ({d.name}, compute capability {d.cc[0]}.{d.cc[1]})")
        try:
            got = run_gpu(x, y)
            where = "GPU"
        except LibdeviceNotFound as exc:
            print(f"  the DSL kernels need libdevice for tanh/exp: {exc}")
            print("  -> running them on the CPU simulator instead")
            got = run_cpu(x, y)
            where = "CPU simulator"
    else:
        print(f"kernelbridge demo: NO GPU ({bridge.gpu_unavailable_reason()})")
        print("  -> compiling the DSL kernels to PTX and running them on the CPU simulator instead")
        got = run_cpu(x, y)
        where = "CPU simulator"
    err = float(np.abs(got - expected).max() / np.abs(expected).max())
    ok = err < 1e-5
    print(f"  max relative error vs NumPy float64: {err:.2e}")
    print(f"{'PASS' if ok else 'FAIL'} ({where})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
