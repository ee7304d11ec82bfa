"""Registers, spills and shared memory (ptxas -v) of the flash-attention kernels at candidate tiles.

No GPU needed: for one head dim, each kernel of examples/flash_attention.py and
examples/flash_attention_bwd.py at each (own rows, streamed rows) tile and warp count, compiled to PTX
by our compiler and assembled by ptxas, one line of registers, spill bytes and shared memory each, on
sm_90a (warpgroup MMA), sm_80 (mma.sync) and the portable FMA path (KB_TILE_TC_MATMUL=0); other
lowering switches (KB_TILE_LOOP_PIPELINE=tma, ...) apply when set in the environment. Why: the example's tile tables are "the largest tile without register spills",
and this is how that is found for a new head dim (docs/tile.md, "Attention backward").

    python scripts/attention_tile_sweep.py --d 256 --tiles 64x64,64x32 --warps 4,8
    python scripts/attention_tile_sweep.py --d 256 --paths portable --tiles 32x16 --kernels fwd,dq
    python scripts/attention_tile_sweep.py --d 256 --tiles 32x16 --simulate 128   # correctness, no ptxas
    python scripts/attention_tile_sweep.py --d 256 --tiles 64x16 --simulate 64 --lowered sm_90

A tile is OWNxSTREAM: the forward and dQ own query rows and stream key rows, dK/dV owns key rows and
streams query rows. The kernels' own launch_args refuse head dims missing from their tile tables, so
the arguments are built here as they build them, with NumPy arrays standing in for the GPU's.
`--simulate S` instead runs each tile's forward (flash_fwd_lse) and backward on the tile simulator
(f32 inputs, two heads of length S, causal and not) against the examples' float64 references;
with `--lowered PATH` the GPU lowering of that path runs on the SIMT simulator (bf16 on the tensor cores).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
# path -> (arch given to the compiler, KB_TILE_TC_MATMUL, default input dtype)
PATHS = {"sm_90": ("sm_90", "1", "bfloat16"), "sm_80": ("sm_80", "1", "bfloat16"),
         "portable": ("sm_90", "0", "float32")}
KERNELS = ("fwd", "fwd_lse", "dkdv", "dq", "pre")


def parse_tiles(text: str) -> list[tuple[int, int]]:
    """'64x64,64x32' -> [(64, 64), (64, 32)]; ArgumentTypeError (argparse names --tiles) otherwise."""
    tiles = []
    for part in text.split(","):
        try:
            own, stream = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected OWNxSTREAM pairs like 64x32, got {part!r}") from None
        if own <= 0 or stream <= 0:
            raise argparse.ArgumentTypeError(f"expected positive sides, got {part!r}")
        tiles.append((own, stream))
    return tiles


def load_examples(folder: Path) -> tuple[Any, Any]:
    """The forward and backward example modules from `folder` (examples/ by default)."""
    sys.path.insert(0, str(folder))
    import flash_attention
    import flash_attention_bwd
    return flash_attention, flash_attention_bwd


def dtype_of(name: str) -> Any:
    if name == "float32":
        return np.float32
    if name == "float16":
        return np.float16
    import ml_dtypes
    return ml_dtypes.bfloat16


def arrays(d: int, seq: int, group: int, dtype: Any, fill: Any = np.zeros) -> dict[str, np.ndarray]:
    """Stand-ins for every array of the five kernels: 2 * group query heads and 2 key/value heads of
    length `seq` (inputs in `dtype`, made by `fill(shape)`), the outputs and statistics f32 NaN."""
    rows, kv = 2 * group * seq, 2 * seq
    inputs = {name: fill((n, d)).astype(dtype) for name, n in (("q", rows), ("k", kv), ("v", kv), ("dout", rows))}
    shapes = {"o": (rows, d), "lse": (rows,), "delta": (rows,), "dq": (rows, d), "dk": (kv, d), "dv": (kv, d)}
    return {**inputs, **{name: np.full(shape, np.nan, np.float32) for name, shape in shapes.items()}}


def kernel_args(mods: tuple[Any, Any], name: str, a: dict[str, np.ndarray], own: int, stream: int, seq: int,
                causal: bool, group: int = 1) -> tuple[Any, tuple]:
    """(base kernel, arguments) of one kernel at one tile over the arrays `a`, as the examples'
    launch_args build them; `group` is passed only to kernels that take it (grouped-query attention)."""
    from dsl import tile
    fwd, bwd = mods
    d = a["q"].shape[1]
    scale = d ** -0.5
    q, k, v, dout, lse, delta = (a[n] for n in ("q", "k", "v", "dout", "lse", "delta"))
    if name == "pre":
        return bwd.attn_bwd_preprocess, (a["o"], dout, tile.partition(delta, (own,)), d)
    tail = (seq, scale, stream, causal)
    if name == "fwd":
        kern, args = fwd.flash_fwd, (q, k, v, tile.partition(a["o"], (own, d)), *tail)
    elif name == "fwd_lse":
        kern, args = fwd.flash_fwd_lse, (q, k, v, tile.partition(a["o"], (own, d)), tile.partition(lse, (own,)), *tail)
    elif name == "dkdv":
        kern, args = bwd.flash_bwd_dkdv, (q, k, v, dout, lse, delta, tile.partition(a["dk"], (own, d)),
                                          tile.partition(a["dv"], (own, d)), *tail)
    else:
        kern, args = bwd.flash_bwd_dq, (q, k, v, dout, lse, delta, tile.partition(a["dq"], (own, d)), *tail)
    takes_group = "group" in [spec.name for spec in kern.specs]
    return kern, (*args, group) if takes_group else args


_WARPED: dict[tuple[str, int], Any] = {}


def with_warps(kern: Any, warps: int) -> Any:
    """`kern` itself at 4 warps (the examples' default), else tile.kernel(kern.pyfunc, num_warps=warps)."""
    if warps == 4:
        return kern
    from dsl import tile
    return _WARPED.setdefault((kern.name, warps), tile.kernel(kern.pyfunc, num_warps=warps))


def products(ptx: str) -> str:
    """Which instructions the products became."""
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    return "mma.sync" if "mma.sync" in ptx else "fma"


def measure(kern: Any, args: tuple, arch: str) -> dict[str, Any]:
    """ptxas's resources for one specialisation, the dynamic shared memory its contract asks for, the
    product instructions and the slow-path kinds; {"error": text} when compiling or assembling fails."""
    try:
        info = kern.inspect(*args, arch=arch)
        ptx = kern.compile(args, arch).ptx
    except Exception as exc:  # noqa: BLE001  (a sweep reports every failure and goes on)
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    r = info.resources
    return {"arch": info.arch, "registers": r.get("registers"), "spill_stores": r.get("spill_stores"),
            "spill_loads": r.get("spill_loads"), "stack": r.get("stack_frame"), "static_smem": r.get("shared_bytes"),
            "dynamic_smem": (info.contract.get("dynamic_smem") or {}).get("exact", 0), "products": products(ptx),
            "slow": sorted({p.kind for p in info.slow_paths} - {"spills"})}


def sweep(mods: tuple[Any, Any], opts: argparse.Namespace) -> Iterator[tuple[str, str, str, int, dict]]:
    """(path, kernel, tile, warps, measurement) for every combination asked for."""
    for path in opts.paths:
        arch, tc, default_dtype = PATHS[path]
        os.environ["KB_TILE_TC_MATMUL"] = tc
        dtype = dtype_of(opts.dtype or default_dtype)
        for name in opts.kernels:
            tiles = [(opts.pre_rows, 0)] if name == "pre" else opts.tiles
            for own, stream in tiles:
                for warps in ([4] if name == "pre" else opts.warps):
                    if stream and (opts.seq % own or opts.seq % stream):
                        yield path, name, f"{own}x{stream}", warps, {"error": f"--seq {opts.seq} not a multiple"}
                        continue
                    stand_ins = arrays(opts.d, opts.seq, opts.group, dtype)
                    base, args = kernel_args(mods, name, stand_ins, own, stream, opts.seq, opts.causal, opts.group)
                    label = f"{own}" if name == "pre" else f"{own}x{stream}"
                    yield path, name, label, warps, measure(with_warps(base, warps), args, arch)


def simulate(mods: tuple[Any, Any], d: int, own: int, stream: int, seq: int, causal: bool, lowered: str | None = None,
             warps: int = 4, group: int = 1) -> dict[str, float]:
    """Max |ours - float64| / max |float64| of o, lse (forward at this tile) and dq, dk, dv (backward at
    this tile): on the tile simulator with f32 inputs, or with `lowered` the GPU lowering on the SIMT
    simulator (kernel.simulate_lowered): "sm_90"/"sm_80" with bf16 inputs on the tensor cores,
    "portable" with f32 inputs."""
    fwd, bwd = mods
    rng = np.random.default_rng(d + own + stream)
    a = arrays(d, seq, group, dtype_of("bfloat16" if lowered in ("sm_90", "sm_80") else "float32"),
               rng.standard_normal)
    os.environ["KB_TILE_TC_MATMUL"] = "0" if lowered == "portable" else "1"
    for name in ("fwd_lse", "pre", "dkdv", "dq"):
        kern, args = kernel_args(mods, name, a, 64 if name == "pre" else own, stream, seq, causal, group)
        if lowered is None:
            kern.simulate(*args)
        else:
            with_warps(kern, warps).simulate_lowered(*args, tensor_cores=lowered != "portable", arch=PATHS[lowered][0])
    q, k, v, dout = (a[n].astype(np.float64) for n in ("q", "k", "v", "dout"))
    k3, v3 = (np.repeat(x.reshape(-1, seq, d), group, axis=0) for x in (k, v))
    s = q.reshape(-1, seq, d) @ k3.transpose(0, 2, 1) * d ** -0.5
    s = np.where(np.tril(np.ones((seq, seq), bool)) | (not causal), s, -np.inf)
    top = s.max(-1, keepdims=True)
    want = {"o": fwd.reference(*(a[n] for n in ("q", "k", "v")), seq, causal, *([group] if group > 1 else [])),
            "lse": (top + np.log(np.exp(s - top).sum(-1, keepdims=True))).reshape(-1),
            **dict(zip(("dq", "dk", "dv"), bwd.reference(*(a[n] for n in ("q", "k", "v", "dout")), seq, causal,
                                                         *([group] if group > 1 else []))))}
    return {n: float(np.abs(a[n] - want[n]).max() / np.abs(want[n]).max()) for n in want}


def row(path: str, name: str, label: str, warps: int, m: dict) -> str:
    head = f"{path:<9} {name:<8} {label:<8} {warps:>2}w "
    if "error" in m:
        return head + "FAILED " + m["error"]
    slow = f"  slow: {','.join(m['slow'])}" if m["slow"] else ""
    return (head + f"{m['registers']:>4} regs  spill {m['spill_stores']:>5}/{m['spill_loads']:<5} stack {m['stack']:>5}  "
            f"smem {m['static_smem']:>6}+{m['dynamic_smem']:<6} {m['products']}{slow}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=256, help="head dim")
    ap.add_argument("--tiles", type=parse_tiles, default=parse_tiles("64x64,64x32"), help="OWNxSTREAM,...")
    ap.add_argument("--warps", type=lambda s: [int(w) for w in s.split(",")], default=[4], help="e.g. 4,8")
    ap.add_argument("--paths", type=lambda s: s.split(","), default=list(PATHS), help=",".join(PATHS))
    ap.add_argument("--kernels", type=lambda s: s.split(","), default=list(KERNELS), help=",".join(KERNELS))
    ap.add_argument("--seq", type=int, default=256, help="sequence length of the stand-in arrays")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                    help="input dtype (default bf16 on the tensor-core paths, f32 on the portable one)")
    ap.add_argument("--group", type=int, default=1, help="query heads per key/value head (GQA)")
    ap.add_argument("--full", dest="causal", action="store_false", help="non-causal (default causal)")
    ap.add_argument("--pre-rows", type=int, default=64, help="rows a block of the preprocess kernel owns")
    ap.add_argument("--simulate", type=int, metavar="S", help="check each tile on the simulator at length S")
    ap.add_argument("--lowered", choices=list(PATHS), help="with --simulate: run this path's lowering")
    ap.add_argument("--examples", type=Path, default=REPO / "examples", help="folder of the two examples")
    opts = ap.parse_args(argv)
    for bad in set(opts.paths) - set(PATHS):
        ap.error(f"--paths: {bad!r} is not one of {', '.join(PATHS)}")
    for bad in set(opts.kernels) - set(KERNELS):
        ap.error(f"--kernels: {bad!r} is not one of {', '.join(KERNELS)}")
    mods = load_examples(opts.examples)
    if opts.simulate:
        how = f"lowered {opts.lowered}" if opts.lowered else "tile simulator"
        for (own, stream), warps, causal in ((t, w, c) for t in opts.tiles for w in opts.warps for c in (False, True)):
            errs = simulate(mods, opts.d, own, stream, opts.simulate, causal, opts.lowered, warps, opts.group)
            print(f"{how} D{opts.d} S{opts.simulate} {own}x{stream} {warps}w {'causal' if causal else 'full  '} max "
                  f"|ours - float64| / max |float64|: " + "  ".join(f"{k} {e:.1e}" for k, e in errs.items()), flush=True)
        return 0
    print(f"D{opts.d} {'causal' if opts.causal else 'full'} S{opts.seq}; registers a thread, spill stores/loads "
          f"bytes, stack frame, shared static+dynamic bytes, products")
    for result in sweep(mods, opts):
        print(row(*result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
