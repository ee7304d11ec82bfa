"""Triton tutorial 04, low-memory dropout, as a dsl.tile kernel written the way the tutorial writes it:
instead of reading a stored keep-mask, each element draws its own random number from (seed, element
index) with a counter-based generator, keeps the element when the number is above p and scales the
kept ones by 1 / (1 - p). The same seed gives the same mask, bit for bit, whatever the block size,
so the backward pass needs only the seed. Checked against NumPy float64 (the mask exactly, against a
NumPy twin of the generator) and statistically (keep rate, neighbours, two seeds).

    python examples/triton_tutorials/04_dropout.py              # GPU when present, else the simulator
    python examples/triton_tutorials/04_dropout.py --simulate   # the CPU simulator

The generator. Triton's `tl.rand(seed, offsets)` is Philox; dsl.tile has no random op, so the kernel
builds one from u32 integer ops (wrapping multiplies, xor, logical shifts), written out inline
because a tile kernel cannot call a helper function yet. It is a keyed hash of the element index:
two rounds of an xor-shift-multiply mixer (each round a bijection of u32; the constants 0x21F0AAAD
and 0x735A2D97 with shifts 16, 15, 15 are those a published search for two-multiply 32-bit hashes
found, Wellons' "hash prospector", with a good avalanche), the seed xored in before the first and
added (times the golden ratio 0x9E3779B9) before the second, so that two seeds are not shifted copies
of one stream. The top 24 bits make a uniform f32 in [0, 1). `random_numpy` is its
NumPy twin. It is a statistical generator for dropout masks, not a cryptographic one, and element
indices are i32 (arrays below 2^31 elements).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import f32, tile, u32

BLOCK_SIZE = 1024        # elements a block handles (8 a thread on 128 threads)


@tile.kernel
def seeded_dropout(x: tile.Array[f32, 1], output: tile.Partition[f32, 1], p: f32, seed: u32):
    BLOCK, = output.tile_shape
    offsets = (tile.bid(0) * BLOCK + tile.arange(BLOCK)).astype(u32)    # the element's counter
    # random = tl.rand(seed, offsets), spelled out (module docstring: "The generator")
    h = offsets ^ seed
    h = (h ^ (h >> 16)) * 0x21F0AAAD
    h = (h ^ (h >> 15)) * 0x735A2D97
    h = h ^ (h >> 15)
    h = h + seed * 0x9E3779B9 + 0x7F4A7C15
    h = (h ^ (h >> 16)) * 0x21F0AAAD
    h = (h ^ (h >> 15)) * 0x735A2D97
    h = h ^ (h >> 15)
    random = (h >> 8).astype(f32) * (1.0 / 16777216.0)                  # top 24 bits: [0, 1)
    x_keep = random > p
    scale = 1.0 / (1.0 - p)               # one division a block; the tutorial's x / (1 - p) is one an element
    output.store(tile.where(x_keep, tile.load(x, tile.bid(0), (BLOCK,)) * scale, 0.0))


def launch_args(x: Any, output: Any, p: float, seed: int, block: int = BLOCK_SIZE) -> tuple:
    """seeded_dropout's arguments for 1-D f32 x and output of one length."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p: expected a probability in [0, 1), got {p}")
    if not 0 <= seed < 2 ** 32:
        raise ValueError(f"seed: expected an unsigned 32-bit integer, got {seed}")
    if len(x) != len(output) or len(x) >= 2 ** 31:
        raise ValueError(f"x, output: expected one length below 2^31, got {len(x)} and {len(output)}")
    return x, tile.partition(output, (block,)), np.float32(p), np.uint32(seed)


def random_numpy(n: int, seed: int) -> np.ndarray:
    """The kernel's random numbers for elements 0 .. n - 1 (float64, each exactly its f32 value)."""
    u = np.uint32
    h = np.arange(n, dtype=u) ^ u(seed)
    with np.errstate(over="ignore"):
        for r in range(2):
            if r:
                h = h + u(seed) * u(0x9E3779B9) + u(0x7F4A7C15)
            h = (h ^ (h >> u(16))) * u(0x21F0AAAD)
            h = (h ^ (h >> u(15))) * u(0x735A2D97)
            h = h ^ (h >> u(15))
    return (h >> u(8)).astype(np.float64) * 2.0 ** -24


def reference(x: np.ndarray, p: float, seed: int) -> np.ndarray:
    keep = random_numpy(len(x), seed) > np.float32(p)
    return np.where(keep, x.astype(np.float64) / (1.0 - np.float64(np.float32(p))), 0.0)


def check(got: np.ndarray, x: np.ndarray, p: float, seed: int, what: str) -> None:
    """The mask exactly (x has no zeros), the kept values to f32 division, the keep rate within 5 sigma
    of 1 - p, and pairs of neighbours kept together within 5 sigma of (1 - p)^2."""
    ref = reference(x, p, seed)
    kept, want = got != 0, ref != 0
    assert np.array_equal(kept, want), (what, "mask differs", int((kept != want).sum()))
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= 1e-6 * np.abs(ref)), (what, float(err.max()))
    n, q = len(x), 1.0 - p
    rate, pairs = kept.mean(), (kept[1:] & kept[:-1]).mean()
    print(f"{what}: mask equal to NumPy's, max |ours - NumPy| {err.max():.2e}, keep rate {rate:.4f} "
          f"(1 - p = {q}), neighbours both kept {pairs:.4f} ({q * q:.4f})")
    assert abs(rate - q) <= 5 * np.sqrt(p * q / n), (what, rate)
    assert abs(pairs - q * q) <= 5 * np.sqrt(q * q * (1 - q * q) / n) * 2, (what, pairs)   # x2: overlapping pairs


def inputs(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    x[x == 0] = 1.0                        # a zero would look dropped
    return x


def run(n: int, p: float, seeds: tuple[int, int], blocks: tuple[int, int], gpu: bool) -> None:
    """Dropout of one x with seeds[0] at two block sizes (the same output, bit for bit), then with
    seeds[1] (another mask: agreeing on about p^2 + (1-p)^2 of the elements)."""
    x = inputs(n)
    outs = []
    for seed, block in ((seeds[0], blocks[0]), (seeds[0], blocks[1]), (seeds[1], blocks[0])):
        if gpu:
            import bridge
            out = bridge.from_host(np.full(n, np.nan, np.float32))
            seeded_dropout(*launch_args(bridge.from_host(x), out, p, seed, block))
            outs.append(out.to_host())
        else:
            outs.append(np.full(n, np.nan, np.float32))
            seeded_dropout.simulate(*launch_args(x, outs[-1], p, seed, block))
        check(outs[-1], x, p, seed, f"{'GPU' if gpu else 'simulator'} n={n} p={p} seed={seed} BLOCK {block}")
    assert np.array_equal(outs[0], outs[1]), "the same seed gave another output at another block size"
    agree = ((outs[0] != 0) == (outs[2] != 0)).mean()
    want = p * p + (1 - p) ** 2
    print(f"seeds {seeds[0]} and {seeds[1]}: masks agree on {agree:.4f} of the elements ({want:.4f} if independent)")
    assert abs(agree - want) <= 5 * np.sqrt(want * (1 - want) / n), agree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run((1 << 24) + 5, 0.5, (123, 512), (1024, 4096), gpu=True)
        run(1_000_003, 0.1, (0, 0xFFFFFFFF), (1024, 256), gpu=True)
        print("ran on the GPU")
    else:
        run(100_003, 0.5, (123, 512), (1024, 256), gpu=False)
        run(20_001, 0.2, (0, 0xFFFFFFFF), (1024, 2048), gpu=False)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
