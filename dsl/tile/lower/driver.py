"""The lowering's driver: the tile kernel lowered to a SIMT IR function (kernel.Lowerer), again while its
layouts settle (a loop-carried variable hinted into a fragment layout is created in it the next time) and
again with less when its shared memory cannot be launched (TMA-store staging, SS operands, rings, the
tensor cores, given up in that order), and the block size a kernel gets when it names none."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.tile import ir as T
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.kernel import Lowerer
from dsl.tile.lower.shared import opt_in_bytes


def lower(fn: T.TileFunction, threads: int, kernel_name: str, facts: dict[str, dict] | None = None,
          info: dict | None = None, cc: int = 0, persistent: bool = False, tc_matmul: bool = False,
          gemm_pipeline: str = "sync", wgmma_products: bool = True, tf32_transpose: bool = False,
          **loop_switches) -> N.Function:
    """Tile IR → SIMT IR kernel with an exact block of `threads` threads (power of two, >= 32).
    `facts`: per array parameter {"layout": "C"|"any", "aligned16": bool, "div8": bool, "div16": bool} known at
    launch. `info` receives "relied" (parameters whose facts the code relies on: the contract states
    them), "dynamic_smem" (bytes of dynamic shared memory the launch must provide) and
    "arch_specific" (the code uses instructions of the arch-specific target, e.g. sm_90a's wgmma).
    `gemm_pipeline`: the sm_90 TMA GEMM loop's pipeline (dsl/tile/compile.py gemm_pipeline);
    `wgmma_products`: sm_90 tile.matmul products on warpgroup MMA where they fit (compile.py);
    `tf32_transpose`: sm_90 tf32 GEMM loops stage a row-major B through registers (compile.py);
    `loop_switches`: loop_pipeline, loop_stages, setmaxnreg, product_overlap, wgmma_a, wgmma_slices,
    nc_loads, tma_store, ws_chain, early_loads, interior_tiles, pingpong, product_batches,
    reverse_blocks, lazy_waits, staging_rounds, lazy_barriers, staging_swap, warp_vectors, load_hint,
    store_by_warpgroup, persistent_order, block_group (dsl/tile/switches.py)."""
    if threads < 32 or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two >= 32, got {threads}")
    from dsl.tile.lower.index_aliases import inline_index_aliases
    fn = inline_index_aliases(fn)       # `qb = q0 + i; tile.load(q, (qb, 0), ...)`: the loop still pipelines
    if loop_switches.get("lazy_waits") and cc >= 90:      # products as early as their operands allow
        from dsl.tile.lower.matmul.hoist import hoist_products
        fn = hoist_products(fn)
    from dsl.tile.lower.matmul.mma_sync import MAX_STAGES, SMEM_LIMIT
    # Layouts settle by lowering again: a lowering that finds a variable carried through a loop in a
    # fragment layout (mma accumulators, their row vectors, an A operand used every iteration) hints
    # it, and the next lowering creates the variable in that layout, so the loop keeps it in registers
    # instead of converting it through shared memory each iteration. Hints only grow (first one wins, but
    # for one change of an accumulator layout a variable: Lowerer.hint).
    hints: dict[int, tuple] = {}
    rehinted: set[int] = set()          # variables whose accumulator hint changed once (Lowerer.hint)
    pipelines = True
    for _ in range(6):
        lw = Lowerer(fn, threads, kernel_name, facts, max_stages=MAX_STAGES, cc=cc, persistent=persistent,
                     tc_matmul=tc_matmul, layout_hints=hints, rehinted=rehinted, pipelines=pipelines,
                     gemm_pipeline=gemm_pipeline, wgmma_products=wgmma_products, tf32_transpose=tf32_transpose,
                     **loop_switches)
        out = lw.lower()
        if lw.new_hints:
            hints = {**hints, **lw.new_hints}
        elif lw.pipelined_loops and lw.smem_bytes() > SMEM_LIMIT:
            pipelines = False       # the pipelined operand buffers crowd out the rest: go without
        else:
            break
    again = _smem_fallback(lw, cc, tc_matmul, loop_switches)
    if again is not None:       # this lowering's shared memory cannot be launched: lower with less
        switches, slow = again
        try:
            out = lower(fn, threads, kernel_name, facts, info, cc, persistent, gemm_pipeline=gemm_pipeline,
                        wgmma_products=wgmma_products, tf32_transpose=tf32_transpose, **switches)
        except LoweringError as err:     # the portable path fails too: say both, not only its reason
            if tc_matmul and not switches["tc_matmul"]:
                raise LoweringError(f"{fn.name}: the tensor-core products need {lw.smem_bytes()} bytes of "
                                    f"shared memory (limit {SMEM_LIMIT}), and the portable FMA path tried "
                                    f"instead fails too: {err}") from None
            raise
        if info is not None and slow is not None:
            from dsl.perf import SlowPath
            info["slow_paths"] = [SlowPath(*slow, fn.loc.line, fn.loc.file)] + info.get("slow_paths", [])
        return out
    if lw.smem_bytes() > SMEM_LIMIT:
        raise LoweringError(f"{fn.name}: needs {lw.smem_bytes()} bytes of static shared memory for "
                            f"relayouts (limit {SMEM_LIMIT}); use smaller tiles")
    if info is not None:
        info["relied"] = set(lw.relied)
        info["dynamic_smem"] = lw.dyn_bytes
        info["arch_specific"] = lw.arch_specific
        info["slow_paths"] = list(dict.fromkeys(lw.slow_paths))
    return out


def _smem_fallback(lw: Lowerer, cc: int, tc_matmul: bool,
                   loop_switches: dict) -> tuple[dict, tuple[str, str] | None] | None:
    """When lowering `lw` took more shared memory than a launch can give: the switches to lower again
    with, in order of what to give up first, and the slow path (kind, reason) to report, or None when it
    fits. Q staged for SS wgmma (matmul/shared_a.py) goes back to registers; TMA rings that each fit
    their loop's budget (matmul/ring.py) but not together go back to cp.async; tensor-core buffers past
    the static limit go to the portable FMA path."""
    from dsl.tile.lower.matmul.mma_sync import SMEM_LIMIT
    from dsl.tile.lower.store_tma import staging_bytes
    need, room = lw.dyn_bytes + lw.smem_bytes(), opt_in_bytes(cc)
    keys = {key[0] for key in lw.wgmma_stages}
    base = dict(loop_switches, tc_matmul=tc_matmul)
    staged = staging_bytes(lw)
    if staged and need > room:
        return {**base, "tma_store": False}, (
            "tma-store-fallback", f"the TMA-store epilogue (tma_store) stages a tile in {staged} "
            f"bytes of shared memory of its own, and with it the kernel needs {need} bytes, more than a block "
            f"may opt into ({room}), so its accumulator tiles are stored directly; use fewer stages or "
            f"smaller tiles, or cast the result to 16 bits before the store")
    if "A" in keys and need > room:
        return {**base, "wgmma_a": "registers"}, None
    if "ring" in keys and need > room:
        return {**base, "loop_pipeline": "cp.async"}, (
            "ring-fallback", f"the TMA rings of this kernel's loops (loop_pipeline "
            f"{loop_switches.get('loop_pipeline')!r}) need {need} bytes of shared memory, more than a block "
            f"may opt into ({room}), so every loop keeps cp.async; use fewer stages, smaller tiles or fewer loops")
    if lw.smem_bytes() > SMEM_LIMIT and tc_matmul:
        return {**base, "tc_matmul": False}, (
            "fma-product", f"the tensor-core products need {lw.smem_bytes()} bytes of static shared memory "
            f"(limit {SMEM_LIMIT}), so the whole kernel uses the portable FMA path; use smaller tiles")
    return None


def pick_threads(fn: T.TileFunction, num_warps: int | None = None) -> int:
    """Threads per block: num_warps*32 if given, else from the largest tile (about 8 elements per
    thread, between 64 and 512)."""
    if num_warps is not None:
        return 32 * num_warps
    biggest = 1
    for e in T.body_exprs(fn.body):
        biggest = max(biggest, e.type.size)
        if isinstance(e, T.Matmul):
            return 256 if e.type.size >= 128 * 128 else 128
    t = 64
    while t < 512 and t * 8 < biggest:
        t *= 2
    return t

