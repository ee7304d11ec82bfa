"""Tile IR → SIMT IR (dsl/tile/lower.py) → the shared pipeline (`dsl.compiler.compile_ir`: verify,
llvmlite, -O3, PTX), the launch contract of the tile kernel, and the disk cache both models share.

The contract derives everything a launch needs, so a tile kernel launches like any other kernel:
grid = one block per tile of the first partition (`grid_from.tile`; for persistent kernels at most
PERSISTENT_BLOCKS_PER_SM blocks per SM), block = the exact thread count, dynamic shared memory = the
exact bytes the lowering asked for, and relations that make every partition cut into the same tile
grid (each tile block owns one tile of each).
"""
from __future__ import annotations

import json
import time
from typing import Any

from dsl.cache import CacheEntry, DiskCache, cache_enabled, cache_key
from dsl.observe import compiled
from dsl.tile.types import PartitionParamType, ScalarParamType

PERSISTENT_BLOCKS_PER_SM = 2      # grid of a persistent tile kernel: this many blocks per SM


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


def _reads_partition(fn, p) -> bool:
    from dsl.tile import ir as T
    from dsl.tile.lower import _all_exprs
    return any(isinstance(e, T.Load) and e.param is p for e in _all_exprs(fn.body))


def _tile_count(p, ax: int) -> str:
    t = p.type.tile_shape[ax]
    return f"({p.name}.shape[{ax}] + {t - 1}) // {t}" if t > 1 else f"{p.name}.shape[{ax}]"


def contract_for(fn, threads: int, facts: dict[str, dict], relied: set[str],
                 persistent: bool = False) -> dict:
    """The LaunchContract (docs/architecture.md schema v1) of a lowered tile kernel."""
    args = []
    for p in fn.params:
        ty = p.type
        if isinstance(ty, ScalarParamType):
            args.append({"name": p.name, "kind": "scalar", "dtype": ty.dtype.name})
            continue
        access = "read"
        if isinstance(ty, PartitionParamType):
            access = "readwrite" if _reads_partition(fn, p) else "write"
        f = facts.get(p.name, {})
        aligned = p.name in relied and f.get("aligned16")
        args.append({"name": p.name, "kind": "array", "dtype": ty.dtype.name, "ndim": ty.ndim,
                     "layout": f.get("layout", "any"), "align": 16 if aligned else ty.dtype.itemsize,
                     "access": access, "abi": "view"})
    c: dict = {"version": 1, "kernel": fn.name, "domain": 1, "block": {"exact": [threads, 1, 1]},
               "args": args}
    requires = [f"{p.name}.shape[{p.type.ndim - 1}] % 8 == 0" for p in fn.params
                if p.name in relied and facts.get(p.name, {}).get("div8")]
    gp = fn.grid_param
    assert isinstance(gp.type, PartitionParamType)
    for p in fn.params:   # every tile block owns one tile of each partition: one tile grid for all
        if p is gp or not isinstance(p.type, PartitionParamType):
            continue
        requires += [f"{_tile_count(p, ax)} == {_tile_count(gp, ax)}" for ax in range(gp.type.ndim)]
    if requires:
        c["requires"] = requires
    c["grid_from"] = {"arg": gp.name, "tile": list(gp.type.tile_shape)}
    if persistent:
        c["grid_from"]["max_blocks_per_sm"] = PERSISTENT_BLOCKS_PER_SM
    return c


def compile_tile(fn, arch: str, num_warps: int | None = None, facts: dict[str, dict] | None = None,
                 persistent: bool = False) -> CompiledTile:
    """Compile one specialisation for `arch` ("sm_80", "sm_90", ...). The target is the
    arch-specific one (sm_90a) exactly when the lowering used its instructions (wgmma)."""
    from dsl.backend.target import canonical_arch, parse_arch
    from dsl.compiler import compile_ir
    from dsl.options import KernelOptions
    from dsl.tile.lower import lower, pick_threads
    facts = facts or {}
    threads = pick_threads(fn, num_warps)
    # one module per specialisation (bridge.kernel_from_ptx), so the entry keeps the Python name,
    # which is also the contract's "kernel" (the bridge checks they agree)
    info: dict = {}
    simt_fn = lower(fn, threads, fn.name, facts, info, cc=parse_arch(arch), persistent=persistent)
    contract = contract_for(fn, threads, facts, info["relied"], persistent)
    if info["dynamic_smem"]:
        contract["dynamic_smem"] = {"exact": info["dynamic_smem"]}
    target = canonical_arch(arch, specific=info["arch_specific"])
    contract_json = json.dumps(contract)
    ck = compile_ir(simt_fn, KernelOptions(block=(threads, 1, 1), boundscheck=False), target,
                    contract_json=contract_json)
    meta = dict(ck.metadata, arch=target)
    return CompiledTile(ck.ptx, fn.name, contract_json, threads, simt_fn, meta,
                        dynamic_smem=info["dynamic_smem"])


def compile_cached(kernel, sig: tuple, facts: dict[str, dict], arch: str) -> CompiledTile:
    """`compile_tile` behind the disk cache SIMT kernels use (same key discipline: the kernel's source
    and what it references, the signature and facts, the options, the arch, the toolchain). A hit
    needs neither the tile front end nor LLVM."""
    start = time.perf_counter()
    disk = DiskCache() if cache_enabled() else None
    key = None
    if disk is not None:
        t0 = time.perf_counter()
        key = cache_key(kernel.pyfunc, [("tile", *sig), sorted(facts.items())],
                        ("tile", kernel.num_warps, kernel.persistent), arch)
        hit = disk.load(key)
        if hit is not None:
            meta = dict(hit.metadata, cache="disk", key=key, hit_seconds=round(time.perf_counter() - t0, 6))
            compiled("tile", hit.name, arch, "disk", time.perf_counter() - start, key)   # dsl/observe.py
            return CompiledTile(hit.ptx, hit.name, hit.contract_json, int(meta["threads"]), None, meta,
                                dynamic_smem=int(meta.get("dynamic_smem", 0)))
    ck = compile_tile(kernel._ir_for(sig), arch, num_warps=kernel.num_warps, facts=facts,
                      persistent=kernel.persistent)
    ck.metadata.update(threads=ck.threads, dynamic_smem=ck.dynamic_smem, cache="miss")
    if disk is not None:
        disk.store(key, CacheEntry(ck.ptx, ck.name, ck.contract_json, ck.metadata))
        ck.metadata["key"] = key
    compiled("tile", ck.name, arch, "miss" if disk is not None else "off", time.perf_counter() - start, key)
    return ck

