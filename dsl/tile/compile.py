"""Tile IR → SIMT IR (dsl/tile/lower.py) → the shared pipeline (`dsl.compiler.compile_ir`: verify,
llvmlite, -O3, PTX), plus the launch contract of the tile kernel."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from dsl.options import KernelOptions
from dsl.tile import ir as T
from dsl.tile.lower import lower, pick_threads
from dsl.tile.types import ArrayParamType, PartitionParamType, ScalarParamType


@dataclass
class CompiledTile:
    ptx: str
    name: str                # PTX entry name (the Python name; one module per specialisation)
    contract_json: str
    threads: int
    simt_ir: object
    metadata: dict = field(default_factory=dict)
    dynamic_smem: int = 0                          # bytes the launch passes as dynamic shared memory
    loaded: dict = field(default_factory=dict)     # device ordinal → bridge.Kernel (dsl/tile/launch.py)


def _reads_partition(fn: T.TileFunction, p: T.TParam) -> bool:
    from dsl.tile.lower import _all_exprs
    return any(isinstance(e, T.Load) and e.param is p for e in _all_exprs(fn.body))


def contract_for(fn: T.TileFunction, threads: int, facts: dict[str, dict], relied: set[str],
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
    if requires:
        c["requires"] = requires
    gp = fn.grid_param.type
    assert isinstance(gp, PartitionParamType)
    if gp.ndim == 1 and gp.tile_shape[0] % threads == 0 and not persistent:
        # 1-D partitions: the contract itself derives grid = ceil(n / tile)
        c["grid_from"] = {"arg": fn.grid_param.name, "per_thread": [gp.tile_shape[0] // threads, 1, 1]}
    return c


def compile_tile(fn: T.TileFunction, arch: str, num_warps: int | None = None,
                 facts: dict[str, dict] | None = None, persistent: bool = False) -> CompiledTile:
    """Compile one specialisation for `arch` ("sm_80", "sm_90", ...)."""
    from dsl.compiler import compile_ir
    facts = facts or {}
    threads = pick_threads(fn, num_warps)
    # one module per specialisation (bridge.kernel_from_ptx), so the entry keeps the Python name,
    # which is also the contract's "kernel" (the bridge checks they agree)
    name = fn.name
    from dsl.backend.target import parse_arch
    info: dict = {}
    simt_fn = lower(fn, threads, name, facts, info, cc=parse_arch(arch), persistent=persistent)
    contract = contract_for(fn, threads, facts, info["relied"], persistent)
    if info["dynamic_smem"]:
        contract["dynamic_smem"] = {"exact": info["dynamic_smem"]}
    ck = compile_ir(simt_fn, KernelOptions(block=(threads, 1, 1), boundscheck=False), arch,
                    contract_json=json.dumps(contract))
    ptx, meta = ck.ptx, dict(ck.metadata)
    if "wgmma." in ptx:
        # warpgroup MMA exists only on the arch-specific target sm_90a (same devices as sm_90)
        ptx = re.sub(r"^\.target sm_90$", ".target sm_90a", ptx, count=1, flags=re.M)
        meta["arch"] = "sm_90a"
    return CompiledTile(ptx, name, json.dumps(contract), threads, simt_fn, meta,
                        dynamic_smem=info["dynamic_smem"])


def param_kinds(fn: T.TileFunction) -> list[str]:
    return ["array" if isinstance(p.type, (ArrayParamType, PartitionParamType)) else "scalar"
            for p in fn.params]
