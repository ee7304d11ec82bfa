"""Elementwise add of 2^28 float32 (out = a + b): DSL SIMT chunked (chunk_1d(4), 16-byte vector path),
DSL tile add, torch.add, CuPy add, Triton and CUDA C++ (float4, nvcc -O3 on the spot), one process.

Bandwidth counts 3 x 4 bytes per element. Every implementation writes its own poisoned (NaN) output
and must match NumPy bit for bit before it is timed; timing is device events around one launch, L2
flushed before each, implementations interleaved, median of repeats. Bars (DESIGN §7): DSL SIMT chunked
>= 0.97x torch.add, DSL tile add (best tile shape) >= 0.97x torch.add.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from _bench_kit import check_close, gpu_or_note, input_sets, nvcc_module, time_interleaved
from _common import Report, parse_args, try_import

from dsl import f32, simt, tile


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def add_chunked(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)          # this thread owns 4 consecutive elements: 16-byte accesses
    for k in c:
        out[k] = a[k] + b[k]


@tile.kernel
def tile_add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


CPP_SRC = r"""
#include "kernelbridge/kernel_contract.cuh"
// out = a + b, 4 elements per thread through float4 (16-byte) loads and stores, scalar tail.
extern "C" __global__ void __launch_bounds__(256)
add4(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, long long n) {
  const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    const float4 x = *reinterpret_cast<const float4*>(a + i);
    const float4 y = *reinterpret_cast<const float4*>(b + i);
    *reinterpret_cast<float4*>(out + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else {
    for (long long k = i; k < n; ++k) out[k] = a[k] + b[k];
  }
}
KB_CONTRACT(add4, KB_BLOCK(256),
            KB_ARGS(KB_ARRAY_EX(a, f32, 1, read, C, 16), KB_ARRAY_EX(b, f32, 1, read, C, 16),
                    KB_ARRAY_EX(out, f32, 1, write, C, 16), KB_SCALAR(n, i64)),
            KB_REQUIRES("len(a) == n", "len(b) == n", "len(out) == n"), KB_GRID_FROM(out, 4));
"""

TILE_SHAPES = (1024, 2048, 4096)


def build(n: int, torch: Any, cp: Any, triton: Any, rep: Report) -> tuple[dict, dict]:
    """{name: (fn(i), output)} for ours and for the peers that import, plus the host inputs."""
    import bridge
    rng = np.random.default_rng(2026)
    sets = input_sets(3 * n * 4)
    host = [(rng.random(n, dtype=np.float32) - 0.5, rng.random(n, dtype=np.float32) * 3 - 1) for _ in range(sets)]
    dev = [(bridge.from_host(a), bridge.from_host(b)) for a, b in host]

    def poisoned() -> Any:
        return bridge.full((n,), np.nan, "float32")

    impls: dict[str, tuple[Callable[[int], Any], Any]] = {}
    out = poisoned()
    impls["DSL SIMT chunk_1d(4)"] = (lambda i, o=out: add_chunked(*dev[i % sets], o), out)
    for t in TILE_SHAPES:
        out = poisoned()
        part = tile.partition(out, (t,))
        impls[f"DSL tile add, tile ({t},)"] = (lambda i, p=part: tile_add(*dev[i % sets], p), out)
    out = poisoned()
    k = nvcc_module(CPP_SRC, "add4").add4
    impls["CUDA C++ float4 (nvcc -O3)"] = (lambda i, o=out: k(*dev[i % sets], o, n), out)
    if torch is not None:
        tdev = [(torch.from_dlpack(a), torch.from_dlpack(b)) for a, b in dev]
        out = poisoned()
        tout = torch.from_dlpack(out)
        impls["torch.add(out=)"] = (lambda i, o=tout: torch.add(*tdev[i % sets], out=o), out)
        if triton is not None:
            try:
                tk = _triton_add(triton)
                out = poisoned()
                tout2 = torch.from_dlpack(out)
                grid = (triton.cdiv(n, 1024),)
                impls["Triton add (BLOCK 1024)"] = (
                    lambda i, o=tout2: tk[grid](*tdev[i % sets], o, n, BLOCK=1024), out)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                rep.missing["triton add"] = repr(exc)[:200]
    if cp is not None:
        cdev = [(cp.from_dlpack(a), cp.from_dlpack(b)) for a, b in dev]
        out = poisoned()
        cout = cp.from_dlpack(out)
        impls["cupy.add(out=)"] = (lambda i, o=cout: cp.add(*cdev[i % sets], out=o), out)
    return impls, {"host": host, "sets": sets}


def _triton_add(triton: Any) -> Any:
    import triton.language as tl

    @triton.jit
    def tadd(a, b, c, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(c + o, tl.load(a + o, mask=m) + tl.load(b + o, mask=m), mask=m)
    return tadd


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("elementwise add, 2^28 float32 (GB/s, 12 bytes per element)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    torch = try_import("torch", rep.missing)
    cp = try_import("cupy", rep.missing)
    triton = try_import("triton", rep.missing) if torch is not None else None
    n = 1 << 28
    failed: list[str] = []
    try:
        with bridge.use_stream(bridge.Stream()):   # ours, torch, CuPy and Triton all on this stream
            impls, data = build(n, torch, cp, triton, rep)
            checked = {}
            a, b = data["host"][0]
            ref = a + b                                    # NumPy f32 add = IEEE: the GPU must match bit for bit
            del data
            for name, (fn, out) in impls.items():
                try:
                    fn(0)
                    check_close(name, out.to_host(), ref)
                    checked[name] = fn
                except Exception as exc:  # noqa: BLE001 - reported; ours failing fails the run
                    msg = f"{name}: {type(exc).__name__}: {exc}"
                    (failed if name.startswith("DSL") else rep.notes).append(msg)
                    rep.row(name, None, "GB/s", note=msg[:300])
            ms = time_interleaved(checked, reps=8 if args.quick else 25)
        gbs = {k: 3 * n * 4 / (v * 1e-3) / 1e9 for k, v in ms.items()}
        for name, v in gbs.items():
            rep.row(name, v, "GB/s", ms=round(ms[name], 4))
        tiles = {k: v for k, v in gbs.items() if k.startswith("DSL tile")}
        peer = gbs.get("torch.add(out=)")
        if peer is not None:
            if "DSL SIMT chunk_1d(4)" in gbs:
                rep.bar("elementwise add: DSL SIMT chunked vs torch.add", gbs["DSL SIMT chunk_1d(4)"], peer,
                        higher_is_better=True, bar=0.97, peer_name="torch.add")
            if tiles:
                best = max(tiles, key=tiles.get)
                rep.bar(f"elementwise add: DSL tile ({best.split('tile (')[1]} vs torch.add", tiles[best], peer,
                        higher_is_better=True, bar=0.97, peer_name="torch.add")
        else:
            rep.notes.append("torch missing: the bars (vs torch.add) could not be measured")
    finally:
        rep.finish(args.json)
    if failed:
        print("FAILED (wrong results, not timed):\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
