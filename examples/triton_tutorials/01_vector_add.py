"""Triton tutorial 01, vector addition, as a dsl.tile kernel written the way the tutorial writes it: each
tile block adds one BLOCK_SIZE slice of x and y and stores it into its slice of the output. Checked
against NumPy float64 with n not a multiple of BLOCK_SIZE (the last block's tail is masked).

    python examples/triton_tutorials/01_vector_add.py              # GPU when present, else the simulator
    python examples/triton_tutorials/01_vector_add.py --simulate   # the CPU simulator

Where Triton computes `offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)` and masks
`offsets < n_elements` by hand, the tile model says the same with a partition: `output` cut into
tiles of BLOCK_SIZE defines the grid (one block per tile) and the only memory a block writes; loads
past the end read 0 and stores past the end are dropped (docs/tile.md, "Safety model").
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import f32, tile

BLOCK_SIZE = 1024        # elements a block adds (8 a thread on 128 threads)


@tile.kernel
def add_kernel(x: tile.Array[f32, 1], y: tile.Array[f32, 1], output: tile.Partition[f32, 1]):
    pid = tile.bid(0)                                  # tl.program_id(axis=0)
    block = output.tile_shape                          # (BLOCK_SIZE,)
    output.store(tile.load(x, pid, block) + tile.load(y, pid, block))


def launch_args(x: Any, y: Any, output: Any, block: int = BLOCK_SIZE) -> tuple:
    """add_kernel's arguments for 1-D x, y and output of one length: output cut into BLOCK_SIZE tiles."""
    if block < 1 or block & (block - 1):
        raise ValueError(f"block: expected a power of two, got {block}")
    if not (len(x) == len(y) == len(output)):
        raise ValueError(f"x, y, output: expected one length, got {len(x)}, {len(y)}, {len(output)}")
    return x, y, tile.partition(output, (block,))


def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) + y.astype(np.float64)


def inputs(n: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def check(got: np.ndarray, x: np.ndarray, y: np.ndarray, what: str) -> None:
    """An f32 sum is the exact sum rounded once: within 2^-24 of it, relatively."""
    ref = reference(x, y)
    err = np.abs(got.astype(np.float64) - ref)
    print(f"{what}: max |ours - NumPy| {err.max():.2e}")
    assert np.all(err <= 2.0 ** -24 * np.abs(ref)), (what, float((err / np.abs(ref)).max()))


def run_gpu(n: int) -> None:
    import bridge
    x, y = inputs(n)
    out = bridge.from_host(np.full(n, np.nan, np.float32))
    add_kernel(*launch_args(bridge.from_host(x), bridge.from_host(y), out))
    check(out.to_host(), x, y, f"GPU n={n}")


def run_simulator(n: int, block: int = BLOCK_SIZE) -> None:
    x, y = inputs(n)
    out = np.full(n, np.nan, np.float32)
    add_kernel.simulate(*launch_args(x, y, out, block))
    check(out, x, y, f"simulator n={n} BLOCK_SIZE {block}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run_gpu(98432)                    # the tutorial's size: 96 full blocks and a tail of 128
        run_gpu((1 << 26) + 3)
        print("ran on the GPU")
    else:
        run_simulator(98432)
        run_simulator(1000, block=256)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
