"""Triton tutorial 03, matrix multiplication, as a dsl.tile kernel written the way the tutorial writes it:
each tile block computes a (BLOCK_M, BLOCK_N) tile of C = A @ B, walking K in steps of BLOCK_K with an
f32 accumulator, applies a fused leaky-ReLU to the accumulator and stores C in f16. Checked against
NumPy float64 (shapes not multiples of the tile).

    python examples/triton_tutorials/03_matmul.py              # GPU when present, else the simulator
    python examples/triton_tutorials/03_matmul.py --simulate   # the CPU simulator

The K loop `acc = tile.matmul(a_tile, b_tile, acc)` (Triton's `accumulator = tl.dot(a, b, accumulator)`)
is the GEMM loop docs/tile.md describes: on sm_90 TMA copies into swizzled shared memory feeding
warpgroup MMA, on sm_80/89 cp.async + ldmatrix + mma.sync; the epilogue runs on the accumulators in
registers. The tutorial's GROUP_SIZE_M block order is what the compiler does for every GEMM kernel
(groups of 8 tile rows for L2 reuse), and its masks are the partition's edge masking and the loads'
zero padding. `persistent=True` with KB_TILE_GEMM_PIPELINE=ws (the warp-specialised TMA loop, read at
compile time) is the fastest form on the H200 (docs/tile.md, "Persistent kernels").
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import TypeVar, f32, tile

E = TypeVar("E")          # the inputs' dtype (f16 here; bf16 works alike)
O = TypeVar("O")          # C's dtype, bound by its partition
TILE = (128, 256)         # (BLOCK_M, BLOCK_N) of C a block computes
BLOCK_K = 64


@tile.kernel
def matmul_kernel(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[O, 2], BLOCK_K: tile.Constant[int],
                  LEAKY_RELU: tile.Constant[bool]):
    BLOCK_M, BLOCK_N = c.tile_shape
    pid_m, pid_n = tile.bid(0), tile.bid(1)
    accumulator = tile.zeros((BLOCK_M, BLOCK_N), f32)
    for k in range(tile.cdiv(a.shape[1], BLOCK_K)):
        # the loads inside the product: the GEMM loop's pattern (docs/tile.md, "Lowering"); zeros past
        # the edges, as the tutorial's `other=0.0`
        accumulator = tile.matmul(tile.load(a, (pid_m, k), (BLOCK_M, BLOCK_K)),
                                  tile.load(b, (k, pid_n), (BLOCK_K, BLOCK_N)), accumulator)
    if LEAKY_RELU:
        accumulator = tile.where(accumulator >= 0, accumulator, 0.01 * accumulator)
    c.store(accumulator.astype(c.dtype))


persistent_matmul_kernel = tile.kernel(matmul_kernel.pyfunc, persistent=True)


def launch_args(a: Any, b: Any, c: Any, tile_shape: tuple[int, int] = TILE, block_k: int = BLOCK_K,
                leaky_relu: bool = True) -> tuple:
    """matmul_kernel's arguments for C (M, N) = A (M, K) @ B (K, N): C cut into `tile_shape` tiles."""
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k or tuple(c.shape) != (m, n):
        raise ValueError(f"a, b, c: expected (M, K) @ (K, N) -> (M, N), got {tuple(a.shape)} @ {tuple(b.shape)} "
                         f"-> {tuple(c.shape)}")
    return a, b, tile.partition(c, tile_shape), block_k, bool(leaky_relu)


def reference(a: np.ndarray, b: np.ndarray, leaky_relu: bool = True) -> np.ndarray:
    c = a.astype(np.float64) @ b.astype(np.float64)
    return np.where(c >= 0, c, 0.01 * c) if leaky_relu else c


def inputs(m: int, n: int, k: int, dtype=np.float16, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray, what: str, leaky_relu: bool = True) -> None:
    """f32 accumulation of f16 products (exact in f32) leaves a tiny error; the f16 store rounds to
    2^-11 relatively. Allowed: 2^-10 |c| + 1e-5 sum_k |a||b|. Of more than 1024 rows, 64 random ones."""
    if len(a) > 1024:
        rows = np.sort(np.random.default_rng(1).choice(len(a), 64, replace=False))
        got, a = got[rows], a[rows]
    ref = reference(a, b, leaky_relu)
    bound = 2.0 ** -10 * np.abs(ref) + 1e-5 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    err = np.abs(got.astype(np.float64) - ref)
    print(f"{what}: max |ours - NumPy| {err.max():.2e} (largest allowed {bound.max():.2e})")
    assert np.all(err <= bound), (what, float((err / bound).max()))


def run_gpu(m: int, n: int, k: int, persistent: bool = False) -> None:
    import bridge
    a, b = inputs(m, n, k)
    c = bridge.from_host(np.full((m, n), np.nan, np.float16))
    kernel = persistent_matmul_kernel if persistent else matmul_kernel
    kernel(*launch_args(bridge.from_host(a), bridge.from_host(b), c))
    check(c.to_host(), a, b, f"GPU {m}x{n}x{k} f16{' persistent' if persistent else ''}")


def run_simulator(m: int, n: int, k: int, tile_shape: tuple[int, int], block_k: int, leaky_relu: bool = True) -> None:
    a, b = inputs(m, n, k, np.float16)
    c = np.full((m, n), np.nan, np.float16)
    matmul_kernel.simulate(*launch_args(a, b, c, tile_shape, block_k, leaky_relu))
    check(c, a, b, f"simulator {m}x{n}x{k} f16 tile {tile_shape} BLOCK_K {block_k}", leaky_relu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run_gpu(512, 512, 512)
        run_gpu(1000, 1304, 520)            # edges: M, N not multiples of the tile, K of BLOCK_K
        run_gpu(4096, 4096, 4096, persistent=True)
        print("ran on the GPU")
    else:
        run_simulator(96, 80, 72, (32, 32), 16)
        run_simulator(50, 40, 48, (32, 32), 32, leaky_relu=False)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
