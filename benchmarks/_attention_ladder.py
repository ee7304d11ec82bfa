"""The flash-attention forward ladder of benchmarks/attention.py --ladder: the example's kernel under each
lowering switch of the TMA-ring steps (docs/tile.md, "Lowering"), each checked against SDPA, then timed
against SDPA's flash and cuDNN backends in the same run, with a short table at the end.

Each rung compiles a fresh kernel object with its switches set in the environment (the switches are
read when a kernel compiles and are part of the cache keys), so one process times them all.
"""
from __future__ import annotations

import os
from typing import Any

from _bench_kit import time_interleaved

SHAPES = [(4, 16, 4096, 128), (4, 16, 4096, 64), (4, 16, 1024, 128), (4, 16, 4096, 256)]
# (a rung whose tiles name no tile for a shape's head dim skips that shape: the D256 rungs, the others at D256)
# label -> (switches, warps, {head dim: (query rows, key rows)}); warps None and tiles None: the example's own
ONE = None
TWO = {64: (128, 128), 128: (128, 64)}
WS = {"KB_TILE_LOOP_PIPELINE": "ws"}
REGS = {**WS, "KB_TILE_SETMAXNREG": "240/24"}
FTZ = {"KB_TILE_FP_FUSION": "1", "KB_TILE_FTZ": "1"}
LADDER: dict[str, tuple[dict, int | None, dict | None]] = {
    "cp.async (default)": ({}, None, ONE),
    "tma S2": ({"KB_TILE_LOOP_PIPELINE": "tma"}, None, ONE),
    "tma S3": ({"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_LOOP_STAGES": "3"}, None, ONE),
    "tma S2 overlap": ({"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_PRODUCT_OVERLAP": "1"}, None, ONE),
    "ws BM128": (WS, 8, TWO),
    "ws BM128 setmaxnreg": (REGS, 8, TWO),
    "ws BM128 setmaxnreg overlap": ({**REGS, "KB_TILE_PRODUCT_OVERLAP": "1"}, 8, TWO),
    "ws BM128 S3 setmaxnreg overlap": ({**REGS, "KB_TILE_LOOP_STAGES": "3", "KB_TILE_PRODUCT_OVERLAP": "1"}, 8, TWO),
    "ws 128x128 setmaxnreg": (REGS, 8, {64: (128, 128), 128: (128, 128)}),
    # Q read by the tensor cores from shared memory (KB_TILE_WGMMA_A=shared, FlashAttention-3's SS S = Q K^T)
    "cp.async Q shared": ({"KB_TILE_WGMMA_A": "shared"}, None, ONE),
    "tma S2 Q shared": ({"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_WGMMA_A": "shared"}, None, ONE),
    "ws 128x128 setmaxnreg Q shared": ({**REGS, "KB_TILE_WGMMA_A": "shared"}, 8, {64: (128, 128), 128: (128, 128)}),
    # fma for the scale-and-subtract and exp2 as one ex2.approx.ftz (tutorial 06's best rows, docs/tile.md)
    "tma S2 fp_fusion ftz": ({"KB_TILE_LOOP_PIPELINE": "tma", **FTZ}, None, ONE),
    "ws 128x128 setmaxnreg fp_fusion ftz": ({**REGS, **FTZ}, 8, {64: (128, 128), 128: (128, 128)}),
    # the output tile through swizzled shared memory and TMA stores (KB_TILE_TMA_STORE, 2026-12-05)
    "tma S2 fp_fusion ftz tma-store": ({"KB_TILE_LOOP_PIPELINE": "tma", **FTZ, "KB_TILE_TMA_STORE": "1"}, None, ONE),
    "ws 128x128 setmaxnreg fp_fusion ftz tma-store": ({**REGS, **FTZ, "KB_TILE_TMA_STORE": "1"}, 8,
                                                      {64: (128, 128), 128: (128, 128)}),
    # causal: the diagonal loop on the producer's ring too (KB_TILE_WS_CHAIN, 2026-12-05), not on cp.async
    "ws 128x128 setmaxnreg fp_fusion ftz chain": ({**REGS, **FTZ, "KB_TILE_WS_CHAIN": "1"}, 8,
                                                  {64: (128, 128), 128: (128, 128)}),
    # the two consumer warpgroups' products in turns (KB_TILE_PINGPONG, FlashAttention-3's ping-pong, 2026-12-05)
    "ws 128x128 setmaxnreg fp_fusion ftz chain pingpong": ({**REGS, **FTZ, "KB_TILE_WS_CHAIN": "1",
                                                           "KB_TILE_PINGPONG": "1"}, 8,
                                                          {64: (128, 128), 128: (128, 128)}),
    # and the intra-warpgroup overlap with it: a turn issues S of block j and P V of block j - 1 (FlashAttention-3)
    "ws 128x128 setmaxnreg fp_fusion ftz chain overlap pingpong": ({**REGS, **FTZ, "KB_TILE_WS_CHAIN": "1",
                                                                   "KB_TILE_PRODUCT_OVERLAP": "1",
                                                                   "KB_TILE_PINGPONG": "1"}, 8,
                                                                  {64: (128, 128), 128: (128, 128)}),
}
PERSISTENT: set[str] = set()     # rungs whose kernel is persistent (tile.kernel(..., persistent=True))


def _derive(label: str, suffix: str, env: dict | None = None, persistent: bool = False) -> str:
    """Rung `label + suffix`: `label`'s switches with `env` added, persistent if asked or if `label` is."""
    LADDER[label + suffix] = ({**LADDER[label][0], **(env or {})},) + LADDER[label][1:]
    if persistent or label in PERSISTENT:
        PERSISTENT.add(label + suffix)
    return label + suffix


_R = "ws 128x128 setmaxnreg fp_fusion ftz chain"
_OPP = _R + " overlap pingpong"
# causal: the last query blocks (the heaviest) first (KB_TILE_REVERSE_BLOCKS)
_derive(_R + " pingpong", " reversed", {"KB_TILE_REVERSE_BLOCKS": "1"})
# three stages in the ring (K and V of three key blocks in flight: 192 KiB at D128)
LADDER[_R.replace("128x128", "128x128 S3") + " overlap pingpong"] = (
    {**LADDER[_OPP][0], "KB_TILE_LOOP_STAGES": "3"},) + LADDER[_OPP][1:]
# a persistent kernel (one block an SM walking the tiles; each role its own walk, so the producer fills the
# next tile's stages while the consumers store this one: ring_ws.lower_split), the heaviest causal blocks first
_derive(_derive(_OPP, " persistent", persistent=True), " reversed", {"KB_TILE_REVERSE_BLOCKS": "1"})
_derive(_R + " pingpong", " persistent", persistent=True)
# the output tile through swizzled shared memory and TMA stores (the consumers go on while the copy drains)
for _label in (_OPP, _OPP + " persistent", _OPP + " persistent reversed"):
    _derive(_label, " tma-store", {"KB_TILE_TMA_STORE": "1"})
# divisions by one value as one reciprocal and products (the epilogue's acc / l: 64 IEEE divisions a thread)
for _label in (_OPP, _OPP + " persistent"):
    _derive(_label, " rcp", {"KB_TILE_DIV_RECIPROCAL": "1"})
# Q read by the tensor cores from shared memory, copied there by the producer's TMA (matmul/produced_a.py;
# prefetched for the next tile in a persistent block), not held as A fragments loaded by the consumers
for _label in (_OPP, _OPP + " persistent"):
    _derive(_label, " Q-tma", {"KB_TILE_WGMMA_A": "shared"})
# D256 on a producer warpgroup: 128 x 64 tiles, Q from the producer into shared memory (its 64 registers of A
# fragments a thread are what kept D256 off warpgroup MMA: the example's own D256 launch is the cp.async loop)
_D256 = "D256 ws 128x64 setmaxnreg fp_fusion ftz Q-tma"
LADDER[_D256] = ({**REGS, **FTZ, "KB_TILE_WS_CHAIN": "1", "KB_TILE_WGMMA_A": "shared"}, 8, {256: (128, 64)})
_derive(_D256, " pingpong", {"KB_TILE_PINGPONG": "1"})
_derive(_D256, " overlap pingpong", {"KB_TILE_PINGPONG": "1", "KB_TILE_PRODUCT_OVERLAP": "1"})
# all of them: persistent, Q by the producer, one reciprocal a row; not persistent (causal's best without
# persistence, 2026-12-06: the hardware's block order balances causal's uneven tiles), and with the heaviest
# causal blocks first, persistent or not
_derive(_OPP + " persistent Q-tma", " rcp", {"KB_TILE_DIV_RECIPROCAL": "1"})
_derive(_OPP + " Q-tma", " rcp", {"KB_TILE_DIV_RECIPROCAL": "1"})
_derive(_OPP + " persistent Q-tma rcp", " reversed", {"KB_TILE_REVERSE_BLOCKS": "1"})
_derive(_OPP + " rcp", " reversed", {"KB_TILE_REVERSE_BLOCKS": "1"})
# the output tile by TMA stores, each consumer warpgroup staging and storing its own 64 rows between barriers
# of its own (store_by_warpgroup): the block-wide staging met both warpgroups twice and lost 0.5 % (H100
# 2026-12-05 18:02); what is left at S1024 is the tile boundary (docs/tile.md). Lost too: S1024 full 469.9 against
# 500.1 TFLOP/s persistent, causal on the snake 338.1 against 349.5 (H100 2026-12-06 17:07)
_WG_STORE = {"KB_TILE_TMA_STORE": "1", "KB_TILE_STORE_BY_WARPGROUP": "1"}
for _label in (_OPP + " persistent Q-tma rcp", _OPP + " Q-tma rcp"):
    _derive(_label, " tma-store-wg", _WG_STORE)
# a persistent block's tiles in a snake (persistent_order): rounds of one tile a block, every other round in
# reverse block order, so causal attention's blocks carry even work (strided, the worst block 1.27x the mean at
# S1024, 1.12x at S4096, by a count of key blocks; the snake's 1.03x): S1024 causal bf16 out 1.064x cuDNN against
# 0.924x strided (H100 2026-12-06 13:57)
_SNAKE = {"KB_TILE_PERSISTENT_ORDER": "snake"}
_derive(_OPP + " persistent Q-tma rcp", " snake", _SNAKE)
_derive(_OPP + " persistent Q-tma rcp snake", " tma-store-wg", _WG_STORE)
# causal: several heads' query blocks in turn, the last (heaviest) first (flash_fwd's tile.block_order under the
# switch block_group, with reverse_blocks): one tile a block, the hardware's grid order ended on one head's heaviest
# blocks, 1.07x the mean at S4096 and 1.23x at S1024 in a model, 1.003x with 8 heads, 1.03x with 16 at S1024;
# persistent on a snake, 1.003x: heads-16 reversed at S1024 causal 0.984x cuDNN against 0.892x (H100 2026-12-06 13:57)
for _label, _group in ((_OPP + " Q-tma rcp", "8"), (_OPP + " Q-tma rcp", "16"), (_OPP + " persistent Q-tma rcp snake", "8")):
    _derive(_label, f" heads-{_group} reversed", {"KB_TILE_BLOCK_GROUP": _group, "KB_TILE_REVERSE_BLOCKS": "1"})
# the ping-pong turns opened once for the consumers' whole program (pingpong_span "program"), not around each
# loop: the warpgroups no longer meet after every loop (causal: two a tile) and tile, so one's epilogue runs
# beside the other's last products; aimed at S1024's tile boundaries (docs/tile.md); untimed
_SPAN = {"KB_TILE_PINGPONG_SPAN": "program"}
for _label in (_OPP + " persistent Q-tma rcp", _OPP + " persistent Q-tma rcp snake", _OPP + " Q-tma rcp"):
    _derive(_label, " span", _SPAN)
# two buffers of Q in a persistent block (produced_a_buffers): the producer copies the next tile's Q during this
# tile's loop, not after both warpgroups release it, so no tile's first product waits for Q's copy; untimed
_Q2 = {"KB_TILE_PRODUCED_A_BUFFERS": "2"}
for _label in (_OPP + " persistent Q-tma rcp", _OPP + " persistent Q-tma rcp snake"):
    _derive(_derive(_label, " Q2", _Q2), " span", _SPAN)
# the output in the inputs' dtype, as SDPA returns it (the other rungs write f32: twice the bytes)
for _label in (_R + " pingpong", _OPP, _R.replace("128x128", "128x128 S3") + " overlap pingpong",
               _OPP + " persistent", _OPP + " persistent reversed", _OPP + " tma-store",
               _OPP + " persistent tma-store", _OPP + " persistent reversed tma-store", _OPP + " rcp",
               _OPP + " persistent rcp", _OPP + " Q-tma", _OPP + " persistent Q-tma", _OPP + " persistent Q-tma rcp",
               _OPP + " Q-tma rcp", _OPP + " persistent Q-tma rcp reversed", _OPP + " rcp reversed",
               _OPP + " persistent Q-tma rcp tma-store-wg", _OPP + " Q-tma rcp tma-store-wg",
               _OPP + " persistent Q-tma rcp snake", _OPP + " persistent Q-tma rcp snake tma-store-wg",
               _OPP + " Q-tma rcp heads-8 reversed", _OPP + " Q-tma rcp heads-16 reversed",
               _OPP + " persistent Q-tma rcp snake heads-8 reversed", _OPP + " persistent Q-tma rcp span",
               _OPP + " persistent Q-tma rcp snake span", _OPP + " Q-tma rcp span",
               _OPP + " persistent Q-tma rcp Q2", _OPP + " persistent Q-tma rcp Q2 span",
               _OPP + " persistent Q-tma rcp snake Q2", _OPP + " persistent Q-tma rcp snake Q2 span",
               _D256 + " pingpong", _D256 + " overlap pingpong"):
    _derive(_label, " ->bf16")
OUT_IN_INPUT_DTYPE = {label for label in LADDER if label.endswith(" ->bf16")}
SWITCHES = ("KB_TILE_LOOP_PIPELINE", "KB_TILE_LOOP_STAGES", "KB_TILE_SETMAXNREG", "KB_TILE_PRODUCT_OVERLAP",
            "KB_TILE_WGMMA_A", "KB_TILE_FP_FUSION", "KB_TILE_FTZ", "KB_TILE_TMA_STORE", "KB_TILE_WS_CHAIN",
            "KB_TILE_EARLY_LOADS", "KB_TILE_INTERIOR_TILES", "KB_TILE_PINGPONG", "KB_TILE_PRODUCT_BATCHES",
            "KB_TILE_REVERSE_BLOCKS", "KB_TILE_DIV_RECIPROCAL", "KB_TILE_LAZY_WAITS", "KB_TILE_STORE_BY_WARPGROUP",
            "KB_TILE_PERSISTENT_ORDER", "KB_TILE_BLOCK_GROUP", "KB_TILE_PINGPONG_SPAN",
            "KB_TILE_PRODUCED_A_BUFFERS")


class switched:
    """Set a rung's switches (and clear the others) for the block; restore the environment after."""

    def __init__(self, env: dict) -> None:
        self.env, self.saved = env, {}

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in SWITCHES}
        for k in SWITCHES:
            os.environ.pop(k, None)
        os.environ.update(self.env)

    def __exit__(self, *exc) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rung_call(fa, tile, label: str, q, k, v, out, s: int, d: int, causal: bool) -> tuple:
    """(kernel, arguments) of rung `label`, compiled now (its first launch) under its switches."""
    env, warps, tiles = LADDER[label]
    with switched(env):
        kern = tile.kernel(fa.flash_fwd.pyfunc, num_warps=warps, persistent=label in PERSISTENT)
        if tiles is None:
            args = fa.launch_args(q, k, v, out, s, causal)
        else:
            bm, bn = tiles[d]
            args = (q, k, v, tile.partition(out, (bm, d)), s, d ** -0.5, bn, causal, 1)
        kern(*args)
    return kern, args


def ladder_cases(rep: Any, torch, fa, reps: int, quick: bool, rungs: list[str] | None = None,
                 shapes: list[tuple[int, int]] | None = None) -> list[str]:
    """Time every rung (or those of `rungs`) and SDPA's flash and cuDNN backends at SHAPES (S4096 D128 only
    when `quick`; only the (S, D) of `shapes` where given), causal and not; rows into `rep`, the table
    printed; returns the failures."""
    unknown = [r for r in rungs or () if r not in LADDER]
    if unknown:
        raise ValueError(f"--ladder-rungs: unknown {unknown}; expected labels of {list(LADDER)}")
    known = [(s, d) for _, _, s, d in SHAPES]
    if shapes is not None and (not shapes or any(x not in known for x in shapes)):
        raise ValueError(f"--ladder-shapes: {shapes}; expected S x D pairs of {known}")
    from _attention_bwd import sdpa_forward_peers

    from dsl import tile
    failed: list[str] = []
    table: dict[str, dict[str, str]] = {}
    chosen = [x for x in SHAPES if (x[2], x[3]) in shapes] if shapes else SHAPES[:1] if quick else SHAPES
    for b, h, s, d in chosen:
        g = torch.Generator(device="cuda").manual_seed(s + d)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        flat = [x.reshape(-1, d) for x in (q, k, v)]
        for causal in (False, True):
            case = f"S{s} D{d} {'causal' if causal else 'full'}"
            fns, ref = sdpa_forward_peers(rep, f"ladder {case}", q, k, v, causal)
            for label in rungs or LADDER:
                if LADDER[label][2] is not None and d not in LADDER[label][2]:
                    continue                    # no tile of this rung for this head dim
                out = torch.full((b * h * s, d), float("nan"), device="cuda",
                                 dtype=q.dtype if label in OUT_IN_INPUT_DTYPE else torch.float32)
                try:
                    kern, args = rung_call(fa, tile, label, *flat, out, s, d, causal)
                except Exception as exc:       # noqa: BLE001 - a rung that does not build is a row, not the end
                    failed.append(f"{case}: {label}: {type(exc).__name__}: {exc}"[:300])
                    continue
                err = (out.reshape(q.shape) - ref.float()).abs().max().item() if ref is not None else 0.0
                if not err < 3e-2:
                    failed.append(f"{case}: {label}: max |ours - SDPA| = {err}")
                    continue
                fns[label] = (lambda i, kk=kern, a=args: kk(*a))
            ms = time_interleaved(fns, reps=reps)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
            cudnn = tf.get("sdpa cuDNN")
            for label in fns:
                extra = {"vs_cudnn": round(tf[label] / cudnn, 3)} if cudnn else {}
                rep.row(f"ladder {case}: {label}", tf[label], "TFLOP/s", ms=round(ms[label], 3), **extra)
                table.setdefault(label, {})[case] = f"{tf[label]:.0f}" + (f" ({tf[label] / cudnn:.2f})" if cudnn else "")
    print_table(table)
    return failed


def print_table(table: dict[str, dict[str, str]]) -> None:
    """Rungs x cases: TFLOP/s (ratio to SDPA cuDNN in the same run)."""
    cases = list(dict.fromkeys(c for row in table.values() for c in row))
    print("\nflash-attention ladder, bf16 B4 H16, TFLOP/s (x SDPA cuDNN, same run)")
    print(f"  {'rung':<32}" + "".join(f"{c:>20}" for c in cases))
    for label, row in table.items():
        print(f"  {label:<32}" + "".join(f"{row.get(c, '-'):>20}" for c in cases))
