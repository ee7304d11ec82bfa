"""The tile pipeline of dsl/compiler.py (tile_frontend → tile IR, tile_lower → SIMT IR, then the tail
both models share: verify, llvmlite, -O3, PTX), the launch contract of the tile kernel, and the disk
cache both models share.

The contract derives everything a launch needs, so a tile kernel launches like any other kernel:
grid = one block per tile of the first partition (`grid_from.tile`; for persistent kernels at most
PERSISTENT_BLOCKS_PER_SM blocks per SM), block = the exact thread count, dynamic shared memory = the
exact bytes the lowering asked for, and relations that make every partition cut into the same tile
grid, or as many tiles for a partition of another ndim (each tile block owns one tile of each).
"""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from dsl.cache import CacheEntry, DiskCache, cache_enabled, cache_key
from dsl.observe import compiled
from dsl.tile.switches import from_environment, lowering_switches, switches_key
from dsl.tile.types import PartitionParamType, row_divisor, tiles_by_number

if TYPE_CHECKING:
    from dsl.compiler import CompileContext

PERSISTENT_BLOCKS_PER_SM = 2      # grid of a persistent tile kernel: this many blocks per SM ...
SM_SHARED_BYTES = 227 * 1024      # ... or one for a TMA-fed block taking over half an SM's (sm_90)


class CompiledTile:
    """PTX plus what the launcher needs. `simt_ir` is None when the entry came from the disk cache.
    (A plain class: this module is on the cache-hit path.)"""
    __slots__ = ("ptx", "name", "contract_json", "threads", "simt_ir", "metadata", "dynamic_smem")

    def __init__(self, ptx: str, name: str, contract_json: str, threads: int, simt_ir: Any = None,
                 metadata: dict | None = None, dynamic_smem: int = 0) -> None:
        self.ptx, self.name, self.contract_json, self.threads = ptx, name, contract_json, threads
        self.simt_ir, self.dynamic_smem = simt_ir, dynamic_smem
        self.metadata = metadata if metadata is not None else {}

    def __repr__(self) -> str:
        return f"CompiledTile(name={self.name!r}, threads={self.threads}, metadata={self.metadata!r})"


def _tile_count(p, ax: int) -> str:
    t = p.type.tile_shape[ax]
    return f"({p.name}.shape[{ax}] + {t - 1}) // {t}" if t > 1 else f"{p.name}.shape[{ax}]"


def _tile_total(p) -> str:
    """The number of tiles of partition `p`, as a relation term (the grid's block count)."""
    counts = [_tile_count(p, ax) for ax in range(p.type.ndim)]
    return " * ".join(f"({c})" if len(counts) > 1 and " " in c else c for c in counts)


def tile_requires(fn, facts: dict[str, dict], relied: set[str]) -> list[str]:
    """The tile model's relations: a last extent divisible by 8 (16 for 1-byte elements: 16-byte rows)
    where the lowering relied on it, and one tile grid for every partition (each tile block owns one
    tile of each): equal tile counts per axis, or in all for a partition of another ndim than the
    grid partition's (types.tiles_by_number)."""
    def rows(p) -> int:        # the divisor of the fact the lowering relied on (16-byte rows)
        return row_divisor(p.type.dtype.itemsize)
    requires = [f"{p.name}.shape[{p.type.ndim - 1}] % {rows(p)} == 0" for p in fn.params
                if p.name in relied and facts.get(p.name, {}).get(f"div{rows(p)}")]
    gp = fn.grid_param
    assert isinstance(gp.type, PartitionParamType)
    for p in fn.params:
        if p is gp or not isinstance(p.type, PartitionParamType):
            continue
        if tiles_by_number(p.type, gp.type):
            requires.append(f"{_tile_total(p)} == {_tile_total(gp)}")
            continue
        requires += [f"{_tile_count(p, ax)} == {_tile_count(gp, ax)}" for ax in range(gp.type.ndim)]
    return requires


def persistent_blocks_per_sm(simt_fn, dynamic_smem: int) -> int:
    """Blocks per SM of a persistent grid: a TMA-fed block (tensor-map parameters) with more than half
    an SM's shared memory runs alone, and a second block per SM would only wait for the first; so does a
    block that reallocates registers between its roles (setmaxnreg, .minnctapersm 1: warp_specialised.
    reallocate sizes it to the SM's whole register file). Other persistent kernels keep
    PERSISTENT_BLOCKS_PER_SM."""
    from dsl.ir.types import TensorMapType
    tma = any(isinstance(p.type, TensorMapType) for p in simt_fn.params)
    alone = (tma and 2 * dynamic_smem > SM_SHARED_BYTES) or getattr(simt_fn, "min_blocks", None) == 1
    return 1 if alone else PERSISTENT_BLOCKS_PER_SM


def contract_for(simt_fn, fn, facts: dict[str, dict], relied: set[str], persistent: bool = False,
                 reads: set[str] | None = None, dynamic_smem: int = 0) -> dict:
    """The LaunchContract (docs/architecture.md schema v1) of the tile kernel `fn` lowered to
    `simt_fn`: the one IR-level builder (dsl/contracts.py) with the tile model's inputs — the grid of
    the first partition (`grid_from.tile`), the tile relations, and 16-byte alignment stated only
    where the lowering relied on it. The block is the lowered kernel's exact block. `reads`: the
    parameters the kernel reads when `simt_fn` has no body (the simulator's validator)."""
    from dsl.contracts import build_contract
    requires = tile_requires(fn, facts, relied) + list(getattr(fn, "requires", ()))
    gp = fn.grid_param
    grid = {"arg": gp.name, "tile": list(gp.type.tile_shape)}
    if persistent:
        grid["max_blocks_per_sm"] = persistent_blocks_per_sm(simt_fn, dynamic_smem)
    aligned = {n for n in relied if facts.get(n, {}).get("aligned16")}
    contract = build_contract(simt_fn, block=simt_fn.exact_block, requires=requires or None, grid_from=grid,
                              strict_domain=True,   # block b owns tile b: a second grid row would repeat it
                              reads=reads, aligned=aligned, launch=getattr(fn, "launch", None))
    if dynamic_smem:             # after grid_from, where tile contracts have always had it
        contract["dynamic_smem"] = {"exact": dynamic_smem}
    atomic = atomic_targets(fn)
    for a in contract["args"]:   # written through atomics only, by any block (docs/architecture.md)
        if a["name"] in atomic:
            a["access"] = "atomic"
    return contract


def atomic_targets(fn) -> set[str]:
    """The tile.Atomic parameters of `fn` (their contract access is "atomic")."""
    from dsl.tile.types import ArrayParamType
    return {p.name for p in fn.params if isinstance(p.type, ArrayParamType) and p.type.atomic}


def validator_contract(fn, threads: int, facts: dict[str, dict], persistent: bool = False) -> dict:
    """The contract the simulator validates against, without lowering the body: the lowered
    kernel's signature (dsl/tile/lower/kernel.py lowered_params) and the partitions the tile IR reads, no
    relied-on facts (the simulator relies on none)."""
    from dsl.ir import nodes as N
    from dsl.tile.lower import lowered_params
    header = N.Function(fn.name, lowered_params(fn, facts), N.VOID, [], True, exact_block=(threads, 1, 1))
    return contract_for(header, fn, facts, set(), persistent, reads=tile_reads(fn))


def tile_reads(fn) -> set[str]:
    """Parameters the tile IR loads or gathers from (partitions included: `out.load()`)."""
    from dsl.tile import ir as T
    return {e.param.name for e in T.body_exprs(fn.body) if isinstance(e, (T.Load, T.Gather))}


def _reads_partition(fn, p) -> bool:
    """Does the tile kernel read argument `p` (dsl/integrations/_kernels.py asks, to zero-fill the
    outputs a kernel accumulates into)? Loads count, and atomic updates (tile.Atomic)."""
    return p.name in tile_reads(fn) or p.name in atomic_targets(fn)


def tc_matmul_enabled() -> bool:
    """tile.matmul outside GEMM loops runs on the tensor cores (dsl/tile/lower/matmul/products.py) unless
    KB_TILE_TC_MATMUL=0 asks for the portable FMA path; part of the disk-cache key when on."""
    return from_environment("tc_matmul")


def gemm_pipeline() -> str:
    """The sm_90 TMA GEMM loop (dsl/tile/lower/matmul/tma.py), KB_TILE_GEMM_PIPELINE: "sync" (default: a
    __syncthreads per k tile, copies S - 2 ahead) or "ws" (warp-specialised: a third warpgroup issues
    the copies through per-stage empty mbarriers, the two others only compute). They tie at the
    best 8192^3 tiles on the H200; sync is ahead at BK=32 (docs/results). Another value is a
    ConfigurationError (it used to mean "sync" silently)."""
    return from_environment("gemm_pipeline")


def wgmma_products_enabled() -> bool:
    """On sm_90, tile.matmul products outside GEMM loops whose warps split M in 16-row slices run on
    warpgroup MMA (dsl/tile/lower/matmul/wgmma_products.py) unless KB_TILE_WGMMA_PRODUCTS=0 keeps them on
    mma.sync; in the disk-cache key when off."""
    return from_environment("wgmma_products")


def tf32_transpose_enabled() -> bool:
    """On sm_90, a tf32 GEMM loop with a row-major B stages B through registers into the K-major
    stage tf32 wgmma reads (dsl/tile/lower/matmul/transposing.py) when KB_TILE_TF32_TRANSPOSE is on;
    off (default) keeps the measured mma.sync loop until the new one is measured. In the disk-cache
    key when on."""
    return from_environment("tf32_transpose")


def tile_context(arch: str, *, num_warps: int | None = None, facts: dict[str, dict] | None = None,
                 persistent: bool = False, lineinfo: bool = True, dump: Any = None, kernel: Any = None,
                 sig: tuple = (), name: str = "kernel") -> CompileContext:
    """A CompileContext for the tile pipeline (dsl/compiler.py): the lowering's settings (the
    switches `kernel` fixes, else the environment's, read now), the stages to dump (`dump=` as compile_ir takes it; None reads
    KB_DUMP), and, for the tile_frontend stage, the kernel's Python function and signature."""
    from dsl.compiler import CompileContext, parse_dump
    from dsl.options import KernelOptions
    from dsl.tile.stages import TILE_FRONT, TileLowering
    lowering = TileLowering(lowering_switches(getattr(kernel, "lowering", ())), num_warps, facts, persistent,
                            lineinfo)
    lowering.requires = tuple(getattr(kernel, "requires", ()))
    lowering.group_m = getattr(kernel, "group_m", None)
    lowering.launch = getattr(kernel, "launch", None)
    return CompileContext(getattr(kernel, "pyfunc", None), list(sig), KernelOptions(), arch,
                          parse_dump(dump, "tile"), name, model="tile", tile=lowering, front=TILE_FRONT)


def compile_tile(fn, arch: str, num_warps: int | None = None, facts: dict[str, dict] | None = None,
                 persistent: bool = False, lineinfo: bool = True, dump: Any = None) -> CompiledTile:
    """Compile one specialisation, given as tile IR, for `arch` ("sm_80", "sm_90", ...): the tile
    pipeline from tile_lower on. The target is the arch-specific one (sm_90a) exactly when the
    lowering used its instructions (wgmma). `dump`: stages to dump, names of the tile pipeline."""
    ctx = tile_context(arch, num_warps=num_warps, facts=facts, persistent=persistent, lineinfo=lineinfo,
                       dump=dump, name=fn.name)
    return _compile(fn, ctx)


def _compile(fn, ctx: CompileContext) -> CompiledTile:
    """Tile IR `fn` (None: run the tile_frontend stage first) -> CompiledTile, through the stages."""
    from dsl.compiler import compile_metadata, run_pipeline
    if fn is None:
        fn = run_pipeline(None, ctx, stop="tile_frontend")
    # one module per specialisation (bridge.kernel_from_ptx), so the entry keeps the Python name,
    # which is also the contract's "kernel" (the bridge checks they agree)
    simt_fn = run_pipeline(fn, ctx, start="tile_lower", stop="tile_lower")
    t = ctx.tile
    contract_json = json.dumps(contract_for(simt_fn, fn, t.facts, t.relied, t.persistent,
                                            dynamic_smem=t.dynamic_smem))
    ptx = run_pipeline(simt_fn, ctx, start="verify")
    meta = dict(compile_metadata(ctx, "none"), arch=ctx.arch)
    # the block: threads, plus a producer warpgroup when warp-specialised
    return CompiledTile(ptx, fn.name, contract_json, simt_fn.exact_block[0], simt_fn, meta,
                        dynamic_smem=t.dynamic_smem)


def _dump_stages(dump: Any) -> frozenset[str]:
    """The tile stages to dump (`dump=`, else KB_DUMP). Without either, the cache-hit path does not
    import the compile pipeline (dsl/compiler.py) at all: a first launch with a warm cache pays only
    for the disk read."""
    if dump is None and not os.environ.get("KB_DUMP"):
        return frozenset()
    from dsl.compiler import parse_dump
    return parse_dump(dump, "tile")


def compile_cached(kernel, sig: tuple, facts: dict[str, dict], arch: str, *, dump: Any = None,
                   cache: bool = True) -> CompiledTile:
    """Compile the @tile.kernel `kernel` for one specialisation behind the disk cache SIMT kernels
    use (same key discipline: the kernel's source and what it references, the signature and facts,
    the options, the arch, the toolchain). A hit needs neither the tile front end nor LLVM. As
    `dsl.compiler.compile_kernel`: `cache=False` bypasses the cache; with stages to dump (`dump=` or
    KB_DUMP) the cache is not read but is written, and `tile_frontend` among them runs the front end
    again (its tile IR is otherwise the kernel's, cached per signature)."""
    start = time.perf_counter()
    dumps = _dump_stages(dump)
    disk = DiskCache() if cache and cache_enabled() else None
    key = None
    if disk is not None:
        t0 = time.perf_counter()
        key = cache_key(kernel.pyfunc, [("tile", *sig), sorted(facts.items())],
                        ("tile", kernel.num_warps, kernel.persistent, kernel.lineinfo)
                        + switches_key(kernel.lowering) + ((("requires", *kernel.requires),) if kernel.requires else ())
                        + ((("group_m", kernel.group_m),) if kernel.group_m is not None else ())
                        + ((("launch", *sorted(kernel.launch.contract_kwargs().items())),)
                           if getattr(kernel, "launch", None) is not None and kernel.launch.contract_kwargs() else ()),
                        arch)
        hit = None if dumps else disk.load(key)
        if hit is not None:
            meta = dict(hit.metadata, cache="disk", key=key, hit_seconds=round(time.perf_counter() - t0, 6))
            compiled("tile", hit.name, arch, "disk", time.perf_counter() - start, key)   # dsl/observe.py
            return CompiledTile(hit.ptx, hit.name, hit.contract_json, int(meta["threads"]), None, meta,
                                dynamic_smem=int(meta.get("dynamic_smem", 0)))
    ctx = tile_context(arch, num_warps=kernel.num_warps, facts=facts, persistent=kernel.persistent,
                       lineinfo=kernel.lineinfo, dump=dumps, kernel=kernel, sig=sig, name=kernel.name)
    ck = _compile(None if "tile_frontend" in dumps else kernel._ir_for(sig), ctx)
    ck.metadata.update(threads=ck.threads, dynamic_smem=ck.dynamic_smem, cache="miss" if cache else "none")
    if disk is not None:
        disk.store(key, CacheEntry(ck.ptx, ck.name, ck.contract_json, ck.metadata))
        ck.metadata["key"] = key
    compiled("tile", ck.name, arch, "miss" if disk is not None else "off", time.perf_counter() - start, key)
    return ck
