"""The tile model's front stages of the compile pipeline (dsl/compiler.py names them; this module,
above it, defines them): `tile_frontend` (the kernel's Python function -> tile IR) and `tile_lower`
(tile IR -> typed SIMT IR, for the lowering settings a tile CompileContext carries)."""
from __future__ import annotations

from typing import Any

from dsl.compiler import CompileContext, Stage, render_ir
from dsl.options import KernelOptions


class TileLowering:
    """What the tile_lower stage reads besides the tile IR (`ctx.tile`), and what it leaves there for
    the launch contract: `relied` (parameters whose facts the code relies on), `dynamic_smem`.
    `switches`: the lowering's environment switches (dsl.tile.compile.lowering_switches()).
    `requires`, `group_m`: the kernel's relations and block order, for the tile IR the tile_frontend
    stage builds."""
    __slots__ = ("num_warps", "facts", "persistent", "lineinfo", "switches", "relied", "dynamic_smem",
                 "requires", "group_m", "launch")

    def __init__(self, switches: dict, num_warps: int | None = None, facts: dict[str, dict] | None = None,
                 persistent: bool = False, lineinfo: bool = True) -> None:
        self.switches, self.num_warps, self.facts = switches, num_warps, facts or {}
        self.persistent, self.lineinfo = persistent, lineinfo
        self.relied: set[str] = set()
        self.dynamic_smem = 0
        self.requires: tuple[str, ...] = ()
        self.group_m: int | None = None
        self.launch = None            # the kernel's launch features (dsl/tile/launch.py)


def tile_frontend(value: Any, ctx: CompileContext):
    from dsl.tile.frontend import TileFrontend
    if ctx.pyfunc is None:
        raise TypeError("ctx.pyfunc: the tile_frontend stage needs the kernel's Python function "
                        "(dsl.tile.compile.tile_context(..., kernel=, sig=)), got None")
    return TileFrontend(ctx.pyfunc, list(ctx.signature), ctx.kernel_name,
                        getattr(ctx.tile, "requires", ()), getattr(ctx.tile, "group_m", None),
                        getattr(ctx.tile, "launch", None)).build()


def tile_lower(fn, ctx: CompileContext):
    """Tile IR -> typed IR for ctx.tile's settings. The lowering settles what the shared tail
    compiles for: the target (sm_90a when it used wgmma) and the kernel's exact block."""
    from dsl.backend.target import canonical_arch, parse_arch
    from dsl.tile.lower import lower, pick_threads
    from dsl.tile.switches import lowering_only
    t = ctx.tile
    if not isinstance(t, TileLowering):
        raise TypeError(f"ctx.tile: expected the tile lowering's settings (a TileLowering; "
                        f"dsl.tile.compile.tile_context builds a context with them), got {t!r}")
    info: dict = {}
    simt_fn = lower(fn, pick_threads(fn, t.num_warps), fn.name, t.facts, info, cc=parse_arch(ctx.arch),
                    persistent=t.persistent, **lowering_only(t.switches))
    t.relied, t.dynamic_smem = info["relied"], info["dynamic_smem"]
    slow = getattr(ctx, "slow_paths", None)
    if slow is not None:
        slow.extend(info.get("slow_paths", ()))     # dsl/perf.py: where the lowering left the fast path
    ctx.arch = canonical_arch(ctx.arch, specific=info["arch_specific"])
    ctx.options = KernelOptions(block=simt_fn.exact_block, boundscheck=False, lineinfo=t.lineinfo)
    return simt_fn


def render_tile_ir(fn) -> str:
    from dsl.tile.printer import format_tile_function
    return format_tile_function(fn)


TILE_FRONT: tuple[Stage, ...] = (Stage("tile_frontend", tile_frontend, render_tile_ir),
                                 Stage("tile_lower", tile_lower, render_ir))
