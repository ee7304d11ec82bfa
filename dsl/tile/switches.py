"""The tile lowering's switches, one table: each name, the environment variable that sets its process-wide
default, its choices and its default. A kernel may fix any of them for itself (`@tile.kernel(lowering=
{...})`, or an autotuning configuration's `lowering=`), so one program can run its attention kernel on
a warp-specialised TMA ring and its other kernels on the defaults; what a kernel fixes wins over the
environment. Both are read when a specialisation compiles and are part of the compile caches' keys.
"""
from __future__ import annotations

from typing import Any

from bridge.settings import env_choice, env_switch

GEMM_PIPELINES = ("sync", "ws")
LOOP_PIPELINES = ("cp.async", "tma", "ws")
SETMAXNREG = ("off", "240/24", "232/40", "216/40")
WGMMA_A = ("registers", "shared")
# the cache qualifiers of vector loads (load_hint): PTX ld's .level::eviction_priority and .level::prefetch_size
PERSISTENT_ORDERS = ("strided", "snake")
PINGPONG_SPANS = ("loop", "program")
LOAD_HINTS = ("none", "L2::128B", "L2::256B", "L1::no_allocate.L2::256B")

# name -> (environment variable, choices (None: a bool), default)
SWITCHES: dict[str, tuple[str, tuple | None, Any]] = {
    "tc_matmul": ("KB_TILE_TC_MATMUL", None, True),
    "gemm_pipeline": ("KB_TILE_GEMM_PIPELINE", GEMM_PIPELINES, "sync"),
    "wgmma_products": ("KB_TILE_WGMMA_PRODUCTS", None, True),
    "tf32_transpose": ("KB_TILE_TF32_TRANSPOSE", None, False),
    # how sm_90 loops feed their products' B loads: every thread's cp.async, a TMA ring on mbarriers, or
    # that ring fed by a producer warpgroup (lower/matmul/ring.py, ring_ws.py); stages of the ring
    "loop_pipeline": ("KB_TILE_LOOP_PIPELINE", LOOP_PIPELINES, "cp.async"),
    "loop_stages": ("KB_TILE_LOOP_STAGES", (2, 3), 2),
    # registers a consumer / producer thread of a warp-specialised kernel asks for (setmaxnreg, sm_90a)
    "setmaxnreg": ("KB_TILE_SETMAXNREG", SETMAXNREG, "off"),
    # a ring loop's last product issued in the next iteration, behind its first (lower/matmul/overlap.py)
    "product_overlap": ("KB_TILE_PRODUCT_OVERLAP", None, False),
    # a loop-invariant A operand of sm_90 products held as fragments, or staged once in shared memory for
    # SS wgmma (lower/matmul/shared_a.py)
    "wgmma_a": ("KB_TILE_WGMMA_A", WGMMA_A, "registers"),
    # vector loads of arrays the kernel never writes through the read-only path (ld.global.nc), or plain
    # ld.global as Triton emits them (lower/runs.py)
    "nc_loads": ("KB_TILE_NC_LOADS", None, True),
    # vector loads from global memory (sm_80 on) carry cache qualifiers: an L2 prefetch size (the L2 fetches
    # 128 or 256 bytes around a miss, not the 32-byte sectors asked for), and with L1::no_allocate the lines
    # bypass L1 (streaming data read once); memory-bound streams at the roofline, all of ours, Triton's and
    # torch's 89.5 % of the H100's bandwidth (tutorial 01, 2026-12-05); untimed, so "none"
    "load_hint": ("KB_TILE_LOAD_HINT", LOAD_HINTS, "none"),
    # sm_90 products of warpgroups owning more than 64 rows as one m64 wgmma a slice (lower/frags.py
    # warpgroup_rows), not mma.sync: Triton's 128 x 64 tile on 4 warps; unmeasured on the GPU, so off
    "wgmma_slices": ("KB_TILE_WGMMA_SLICES", None, False),
    # a float multiply whose result only feeds an add or subtract fuses into one fma (Triton's
    # enable_fp_fusion, nvcc's --fmad): one rounding, not two; off, each operation rounds, as the simulators do
    "fp_fusion": ("KB_TILE_FP_FUSION", None, False),
    # f32 math flushes denormal inputs and results to zero (nvcc's -ftz=true; Triton's exp2 is
    # ex2.approx.ftz): exp2 is one MUFU instead of a range test and two multiplies around it
    "ftz": ("KB_TILE_FTZ", None, False),
    # a float division may be a product with the divisor's reciprocal (LLVM's arcp; nvcc's --prec-div=false
    # goes further): divisions by one value share one IEEE reciprocal, so attention's acc / l[:, None] is
    # two reciprocals and 64 multiplies a thread, not 64 IEEE divisions; up to 1 ulp more error
    "div_reciprocal": ("KB_TILE_DIV_RECIPROCAL", None, False),
    # sm_90 stores of tensor-core accumulator tiles staged in swizzled shared memory and written by TMA
    # stores (lower/store_tma.py), as CUTLASS's epilogues: no per-element bounds, edges clipped by the
    # copy engine, and a persistent kernel's next tile starts while the store drains; unmeasured, so off
    "tma_store": ("KB_TILE_TMA_STORE", None, False),
    # under tma_store, where two or more warpgroups each hold a block of whole rows of a stored tile (attention's
    # consumer warpgroups), each stages and stores its rows on its own, between barriers of its 128 threads
    # (lower/store_tma.py rows_split): no block barrier to pull ping-pong's warpgroups into step; in a persistent
    # warp-specialised GEMM also no barrier of both after each tile's loop (lower/matmul/tma.py), so one
    # warpgroup stores its rows while the other runs the next tile's first products: 16384 x 1024 x 1024 bf16
    # 0.969x cuBLAS with staging_rounds against 0.925x without the split (H100 2026-12-07); attention 3-6 % slower
    # at S1024 D128 (H100 2026-12-06); a kernel asks for it (benchmarks/gemm.py's "by-wg" candidates), so off
    "store_by_warpgroup": ("KB_TILE_STORE_BY_WARPGROUP", None, False),
    # a persistent kernel's TMA-store staging tile sized so its GEMM loop keeps every stage it has without
    # one (the tile then stored in rounds, lower/store_tma.py plan_staging), not the whole tile at a stage's
    # cost (128 x 256 x 64 bf16: 4 stages and four rounds of 16 KiB, not 3 and one round); +2 % at 16384 x
    # 1024 x 1024 (0.956x cuBLAS, H100 2026-12-06), 8192^3 not yet timed, so off
    "staging_rounds": ("KB_TILE_STAGING_ROUNDS", None, False),
    # under loop_pipeline "ws", top-level loops after the split one over the same ring loads (causal
    # attention's diagonal loop) share the producer warpgroup's ring (lower/matmul/ring_ws.py) instead
    # of keeping cp.async; off by default (a kernel asks for it: flash_fwd_tuned's ws candidates do;
    # causal +4 %, H100 2026-12-05)
    "ws_chain": ("KB_TILE_WS_CHAIN", None, False),
    # element loads of arrays the kernel never writes issued where the program wrote the tile.load, not at
    # their first use (lower/anchors.py): ahead of a product's wait, so their latency overlaps it; longer
    # lived registers, so a kernel asks for it
    "early_loads": ("KB_TILE_EARLY_LOADS", None, False),
    # a straight-line tile program whose tiles are all inside their arrays (a block-uniform test) runs a copy
    # of itself without per-access bounds tests (lower/interior.py); edge blocks run the tested copy. Twice
    # the code; not yet timed on a GPU, so off
    "interior_tiles": ("KB_TILE_INTERIOR_TILES", None, False),
    # under loop_pipeline "ws" with two consumer warpgroups, a ring loop's two products run in turns
    # (FlashAttention-3's ping-pong, lower/matmul/pingpong.py): one warpgroup's softmax while the other's
    # products run; named barriers the lock-step simulator cannot order (their protocol is model-checked);
    # +5 / +9 % on attention's 128 x 128 rung (H100), off by default: a kernel asks for it (flash_fwd_tuned)
    "pingpong": ("KB_TILE_PINGPONG", None, False),
    # where the ping-pong turns of rotated loops (product_overlap) open and close: around each loop, so the two
    # warpgroups meet after every loop and run their epilogues side by side while the tensor cores idle, or
    # once around the consumers' whole program ("program": every loop of every tile of a persistent block, as
    # one long loop of turns), so one warpgroup's epilogue runs while the other's last products do
    # (lower/matmul/pingpong.py); untimed, so "loop"
    "pingpong_span": ("KB_TILE_PINGPONG_SPAN", PINGPONG_SPANS, "loop"),
    # buffers of a loop-invariant A operand the producer warpgroup copies (wgmma_a "shared": attention's Q) in a
    # persistent block: 2 lets it copy the next tile's while the consumers read this one's, so no tile's first
    # product waits for its copy (lower/matmul/produced_a.py); the operand's size again in shared memory; untimed,
    # so 1
    "produced_a_buffers": ("KB_TILE_PRODUCED_A_BUFFERS", (1, 2), 1),
    # sm_90 products of consecutive independent statements issued together and waited for together
    # (lower/matmul/batches.py), not each waited for before the next is issued; +2.5 / -3 % on the fused
    # attention backward (full / causal, H100), so off
    "product_batches": ("KB_TILE_PRODUCT_BATCHES", None, False),
    # sm_90 products of statements `x = tile.matmul(...)` issued as early as their operands allow and waited
    # for where x is first read, not at once (lower/matmul/hoist.py, batches.py): the attention backward's
    # dP^T on the tensor cores during the softmax, dV during dS, dK while dS^T is staged (FlashAttention-3's
    # order within a warpgroup); more registers live, untimed, so off
    "lazy_waits": ("KB_TILE_LAZY_WAITS", None, False),
    # a relayout through shared memory (a row of one value a thread read in a product's column layout) closes
    # with no barrier of its own: the next barrier, or the next write of its buffer, or the end of its block
    # orders its readers before a rewrite, and back-to-back relayouts take turns in two buffers (lower/kernel.py
    # relayout_scratch; KB_SIM_SHARED_RACES checks the order on the simulator); the fused attention backward's
    # prefetch forms with it: +0-2 % full, -2-4 % causal (its loads scheduled earlier spill; H100 2026-12-06), so off
    "lazy_barriers": ("KB_TILE_LAZY_BARRIERS", None, False),
    # f32 accumulator pairs staged for a TMA store or reduce-add (lower/store_tma.py): lanes of odd rows write
    # the pair two fragments over (one select a value), so a half-warp's four rows fill eight distinct 16-byte
    # chunks of the 128-byte-swizzled slab instead of two rows sharing each chunk pair (2-way bank conflicts,
    # KB_SIM_BANK_CONFLICTS counts them): the fused attention backward +4-7 % (D128 523.6 / 453.8 TFLOP/s against
    # 490.8 / 430.1, D64 378.4 / 323.4 against 362.6 / 309.1; H100 2026-12-06 06:11), so on
    "staging_swap": ("KB_TILE_STAGING_SWAP", None, True),
    # a 1-D f32 variable broadcast over the columns of tensor-core accumulators is held whole by every warp and
    # reaches the columns by shuffles (lower/warp_vectors.py), not through shared memory between two block
    # barriers (attention's lse and Delta rows); untimed, so off
    "warp_vectors": ("KB_TILE_WARP_VECTORS", None, False),
    # blocks take the tiles in reverse order (the last tile first): where the later tiles hold more work
    # (causal attention's later query blocks), the heaviest start first and the grid ends on light ones
    # (FlashAttention-3's longest-first order, lower/tiles.py); +1.4 % on causal attention once, mixed when
    # persistent (H100 / H200 2026-12-05): within run-to-run noise, so off
    "reverse_blocks": ("KB_TILE_REVERSE_BLOCKS", None, False),
    # the order a persistent kernel's blocks take the tiles: "strided" (block c takes c, c + P, c + 2P, ...) or
    # "snake" (rounds of P tiles, the block order reversed every other round: lower/tiles.py snake_walk), which
    # evens out the blocks' sums where work grows along the tiles (causal attention: the worst block 1.27x the
    # mean at S1024 strided, 1.03x snake, by a count of key blocks); untimed, so "strided"
    "persistent_order": ("KB_TILE_PERSISTENT_ORDER", PERSISTENT_ORDERS, "strided"),
    # runs a kernel's tile.block_order(run) takes in turn where it leaves `group` to the lowering (flash_fwd:
    # a head's query blocks): 1 is the natural order; causal attention's blocks end evenly loaded with 8 at
    # S4096, 16 at S1024 (modelled, interop_tests/dsl_tile/test_tile_block_runs.py); untimed, so 1
    "block_group": ("KB_TILE_BLOCK_GROUP", (1, 2, 4, 8, 16), 1),
}


CODEGEN_SWITCHES = frozenset({"fp_fusion", "ftz", "div_reciprocal"})    # read by the code generator (dsl/compiler.py), not the lowering
# the switches the tile Lowerer holds as attributes of its own name (tc_matmul is one of its parameters)
LOWERER_SWITCHES = tuple(name for name in SWITCHES if name not in CODEGEN_SWITCHES and name != "tc_matmul")


def lowering_only(switches: dict[str, Any]) -> dict[str, Any]:
    """The switches the lowering takes (dsl.tile.lower.lower's keywords): all but CODEGEN_SWITCHES."""
    return {k: v for k, v in switches.items() if k not in CODEGEN_SWITCHES}


def from_environment(name: str) -> Any:
    """Switch `name` as the environment sets it (a malformed value is bridge.settings' typed error)."""
    var, choices, default = SWITCHES[name]
    if choices is None:
        return env_switch(var, default)
    if all(isinstance(c, int) for c in choices):
        return int(env_choice(var, tuple(str(c) for c in choices), str(default)))
    return env_choice(var, choices, default)


def check_lowering(lowering: Any) -> tuple[tuple[str, Any], ...]:
    """`lowering=` of @tile.kernel / tile.autotune's Config: a dict of switch names to choices, returned
    as sorted items (hashable, for the cache keys); anything else is an OptionError naming the switch."""
    from dsl.options import OptionError
    if lowering is None:
        return ()
    if not isinstance(lowering, dict):
        raise OptionError("lowering", f"lowering= must be a dict of switch names to choices, got "
                                      f"{type(lowering).__name__}", "e.g. lowering={'loop_pipeline': 'tma'}")
    for name, value in lowering.items():
        if name not in SWITCHES:
            raise OptionError("lowering", f"lowering=: unknown switch {name!r}",
                              f"the switches: {', '.join(SWITCHES)}", item=name)
        _, choices, _ = SWITCHES[name]
        ok = isinstance(value, bool) if choices is None else (
            not isinstance(value, bool) and value in choices and type(value) is type(choices[0]))
        if not ok:
            want = "True or False" if choices is None else "one of " + ", ".join(repr(c) for c in choices)
            raise OptionError("lowering", f"lowering=: {name} must be {want}, got {value!r}", item=name)
    return tuple(sorted(lowering.items()))


def lowering_switches(fixed: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
    """Every switch: what the kernel fixed (`fixed`, check_lowering's items), else the environment's."""
    mine = dict(fixed)
    return {name: mine[name] if name in mine else from_environment(name) for name in SWITCHES}


def switches_key(fixed: tuple[tuple[str, Any], ...] = ()) -> tuple:
    """lowering_switches() for the compile caches' keys: tc_matmul when on (its default), each other
    switch only when not at its default, so the disk keys of every earlier entry stay as they were."""
    s = lowering_switches(fixed)
    return (("tc_matmul",) if s["tc_matmul"] else ()) + \
        (() if s["gemm_pipeline"] == "sync" else (f"gemm_pipeline_{s['gemm_pipeline']}",)) + \
        (() if s["wgmma_products"] else ("no_wgmma_products",)) + \
        (("tf32_transpose",) if s["tf32_transpose"] else ()) + \
        (() if s["loop_pipeline"] == "cp.async" and s["loop_stages"] == 2 else
         (f"loop_{s['loop_pipeline']}{s['loop_stages']}",)) + \
        (() if s["setmaxnreg"] == "off" else (f"setmaxnreg_{s['setmaxnreg']}",)) + \
        (("product_overlap",) if s["product_overlap"] else ()) + \
        (() if s["wgmma_a"] == "registers" else (f"wgmma_a_{s['wgmma_a']}",)) + \
        (("fp_fusion",) if s["fp_fusion"] else ()) + \
        (("ftz",) if s["ftz"] else ()) + \
        (("wgmma_slices",) if s["wgmma_slices"] else ()) + \
        (() if s["nc_loads"] else ("no_nc_loads",)) + \
        (() if s["load_hint"] == "none" else (f"load_hint_{s['load_hint']}",)) + \
        (("tma_store",) if s["tma_store"] else ()) + \
        (("store_by_warpgroup",) if s["store_by_warpgroup"] else ()) + \
        (("staging_rounds",) if s["staging_rounds"] else ()) + \
        (("ws_chain",) if s["ws_chain"] else ()) + \
        (("early_loads",) if s["early_loads"] else ()) + \
        (("interior_tiles",) if s["interior_tiles"] else ()) + \
        (("pingpong",) if s["pingpong"] else ()) + \
        (() if s["pingpong_span"] == "loop" else (f"pingpong_span_{s['pingpong_span']}",)) + \
        (() if s["produced_a_buffers"] == 1 else (f"produced_a_buffers_{s['produced_a_buffers']}",)) + \
        (("product_batches",) if s["product_batches"] else ()) + \
        (("reverse_blocks",) if s["reverse_blocks"] else ()) + \
        (() if s["persistent_order"] == "strided" else (f"persistent_order_{s['persistent_order']}",)) + \
        (() if s["block_group"] == 1 else (f"block_group_{s['block_group']}",)) + \
        (("div_reciprocal",) if s["div_reciprocal"] else ()) + \
        (("lazy_waits",) if s["lazy_waits"] else ()) + \
        (("lazy_barriers",) if s["lazy_barriers"] else ()) + \
        (() if s["staging_swap"] else ("no_staging_swap",)) + \
        (("warp_vectors",) if s["warp_vectors"] else ())
