"""tile.block_order(run, group): the order a kernel's blocks take the grid's tiles, in runs of `run`
consecutive tiles (one head's query or key blocks) taken `group` runs at a time, every run's first tile,
then every run's second (dsl/tile/lower/tiles.py interleaved_tile). Causal attention's work falls (or, in
the forward, grows) along a run; the hardware hands blocks out in grid order, so the natural order ends on
one head's heaviest blocks while the others idle. Checked: the order itself (the lowering builds its IR
with the same steps), every tile taken exactly once in the lowered simulator (one tile a block, persistent,
snake, reversed), the natural order's PTX where nothing is reordered, the balance it is for, and each
misuse refused at compile time with the output untouched."""
from __future__ import annotations

import heapq
import hashlib

import numpy as np
import pytest

from dsl import f32, i32, tile
from dsl.tile.errors import TileCompileError
from dsl.tile.lower.tiles import interleaved_tile

TILE = 32


def order(total: int, run: int, group: int) -> list[int]:
    return [interleaved_tile(lin, total, run, group) for lin in range(total)]


def test_runs_are_taken_a_group_at_a_time_first_tiles_first():
    """12 tiles in runs of 4, two runs a group: runs 0 and 1 in turns, then run 2 (a group of one) alone."""
    assert order(12, 4, 2) == [0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10, 11]
    assert order(8, 2, 8) == [0, 2, 4, 6, 1, 3, 5, 7]


@pytest.mark.parametrize("total,run,group", [(12, 4, 2), (64, 8, 3), (96, 32, 8), (5, 1, 4), (30, 6, 5), (1, 1, 2)])
def test_the_order_is_a_permutation(total, run, group):
    assert sorted(order(total, run, group)) == list(range(total))


@pytest.mark.parametrize("run", [0, -3, 5, 13])
def test_a_run_that_does_not_divide_the_tiles_keeps_the_natural_order(run):
    assert order(12, run, 4) == list(range(12))


def make_visit(group: int, persistent: bool = False, lowering: dict | None = None):
    @tile.kernel(persistent=persistent, lowering=lowering)
    def visit(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
        tile.block_order(run, group)
        tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))
    return visit


@pytest.mark.parametrize("persistent,lowering", [(False, None), (False, {"reverse_blocks": True}),
                                                 (True, None), (True, {"persistent_order": "snake"})])
@pytest.mark.parametrize("tiles,run,group", [(24, 3, 4), (24, 8, 2), (20, 5, 8), (7, 7, 3), (12, 0, 4), (12, 5, 2)])
def test_every_tile_is_taken_by_exactly_one_block(persistent, lowering, tiles, run, group, rng):
    """Each tile's sum added once into its own counter (0 where no block took it, twice where two did)."""
    x = rng.random(tiles * TILE).astype(np.float32) + 0.5
    counts = np.zeros(tiles, np.float32)
    make_visit(group, persistent, lowering).simulate_lowered(tile.partition(x, (TILE,)), counts, run,
                                                             blocks=5 if persistent else None)
    np.testing.assert_allclose(counts, x.reshape(tiles, TILE).astype(np.float64).sum(1), rtol=1e-5)


def _body_hash(ptx: str) -> str:
    body = "\n".join(line for line in ptx.splitlines() if not line.strip().startswith((".loc", ".file", "//")))
    return hashlib.sha256(body.replace("visit", "k").replace("plain", "k").encode()).hexdigest()


def test_a_group_of_one_run_is_the_natural_order_and_leaves_the_ptx_as_it_was():
    @tile.kernel
    def plain(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
        tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))
    args = (tile.partition(np.zeros(1024, np.float32), (TILE,)), np.zeros(32, np.float32), 4)
    one, four = (make_visit(g).compile(args, "sm_90").ptx for g in (1, 4))
    assert _body_hash(one) == _body_hash(plain.compile(args, "sm_90").ptx)
    assert "rem.s32" in four or "div.s32" in four


@pytest.mark.parametrize("group", [2, 4, 16])
def test_a_group_left_to_the_lowering_comes_from_the_switch_block_group(group, rng):
    """tile.block_order(run) without a group: the switch block_group's (1, the default, is the natural order
    and the PTX of a kernel without the statement); each group takes every tile once."""
    @tile.kernel
    def by_switch(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
        tile.block_order(run)
        tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))
    args = (tile.partition(np.zeros(1024, np.float32), (TILE,)), np.zeros(32, np.float32), 4)
    natural = _body_hash(by_switch.compile(args, "sm_90").ptx.replace("by_switch", "k"))
    assert natural == _body_hash(make_visit(1).compile(args, "sm_90").ptx)
    grouped = tile.kernel(by_switch.pyfunc, lowering={"block_group": group})
    assert _body_hash(grouped.compile(args, "sm_90").ptx.replace("by_switch", "k")) != natural
    x = rng.random(24 * TILE).astype(np.float32) + 0.5
    counts = np.zeros(24, np.float32)
    grouped.simulate_lowered(tile.partition(x, (TILE,)), counts, 3)
    np.testing.assert_allclose(counts, x.reshape(24, TILE).astype(np.float64).sum(1), rtol=1e-5)


def _flash_attention():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "flash_attention.py"
    spec = importlib.util.spec_from_file_location("flash_attention_block_runs", path)
    fa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fa)
    return fa


@pytest.mark.parametrize("lowering,blocks", [({"block_group": 2, "reverse_blocks": True}, None),
                                             ({"block_group": 16}, None),
                                             ({"block_group": 2, "reverse_blocks": True, "persistent_order": "snake"}, 4)])
def test_flash_attentions_query_blocks_in_turn_still_match_float64(rng, lowering, blocks):
    """examples/flash_attention.py's flash_fwd declares a head's query blocks a run: three heads of four
    query blocks taken two heads at a time, the last first (heaviest-first for causal attention), one tile a
    block or persistent on a snake; the output against float64, every row written."""
    from attention_refs import attention64
    fa = _flash_attention()
    seq, d, heads = 256, 64, 3
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(np.float32) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    args = fa.launch_args(q, k, v, out, seq, True, tensor_cores=False, tiles=(64, 64))
    kern = tile.kernel(fa.flash_fwd.pyfunc, lowering=lowering, persistent=blocks is not None)
    plain = tile.kernel(fa.flash_fwd.pyfunc, lowering={k: v for k, v in lowering.items() if k != "block_group"},
                        persistent=blocks is not None)
    assert _body_hash(kern.compile(args, "sm_80").ptx) != _body_hash(plain.compile(args, "sm_80").ptx)
    kern.simulate_lowered(*args, blocks=blocks)
    np.testing.assert_allclose(out, attention64(q, k, v, seq, True), rtol=1e-4, atol=1e-4)


def _ends(works: list[float], start: list[float]) -> list[float]:
    """Each SM's end time when the blocks `works` take the first free SM in grid order from `start`."""
    free = list(start)
    heapq.heapify(free)
    for w in works:
        heapq.heappush(free, heapq.heappop(free) + w)
    return sorted(free)


def _greedy_makespan(works: list[int], blocks: int) -> float:
    """The hardware's block order: each block to the first free SM, in grid order; worst over mean."""
    return max(_ends([w + 1 for w in works], [0.0] * blocks)) / (sum(w + 1 for w in works) / blocks)


def test_it_evens_out_causal_attentions_backward_blocks():
    """The fused backward at B4 H16 S4096 on 132 SMs: 128 key rows a block, 64 query rows a step, key block j
    of a head seeing 64 - 2 j query blocks. The natural order ends 7 % past the mean (one head's lightest
    blocks run with nothing beside them, its heaviest started last); eight heads' key blocks in turns, within
    1 %."""
    heads, per_head = 64, 32
    works = [64 - 2 * (t % per_head) for t in range(heads * per_head)]
    natural = _greedy_makespan(works, 132)
    ordered = _greedy_makespan([works[interleaved_tile(k, len(works), per_head, 8)] for k in range(len(works))], 132)
    assert natural > 1.06 and ordered < 1.01


def test_only_full_attentions_split_parts_leave_idle_sms_for_a_conversion_beside_them():
    """What a dQ conversion on a lower-priority stream, beside the backward's last launch, could use: only the SMs
    that launch leaves idle (docs/tile.md, "Hiding the dQ conversion"). B4 H16 S4096 D128 on 132 SMs, in query
    steps of a key block (65 a full block): causal attention's last eight heads in a launch of their own, in turns,
    end within 1 % of a block's SM time of each other, while full attention's split parts (68 key blocks in thirds
    after 1980 whole ones) leave more than ten whole blocks' SM time idle (~3200 SM-us at ~2.5 us a step; converting
    61 heads' dQ takes ~1900-4300 SM-us at 100-45 GB/s an SM)."""
    causal = [64 - 2 * (t % 32) + 1 for t in range(8 * 32)]
    ends = _ends([causal[interleaved_tile(k, len(causal), 32, 8)] for k in range(len(causal))], [0.0] * 132)
    assert sum(max(ends) - e for e in ends) < 0.01 * 65 * 132
    whole = _ends([65.0] * 1980, [0.0] * 132)
    parts = _ends([65 / 3] * 204, [max(whole)] * 132)
    assert sum(max(parts) - e for e in parts) > 10 * 65


# ------------------------------------------------------------------------------ misuse
def _kernel_in_loop(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    for _ in range(2):
        tile.block_order(run, 4)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_in_branch(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    if run > 2:
        tile.block_order(run, 4)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_twice(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    tile.block_order(run, 4)
    tile.block_order(run, 2)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_as_value(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    o = tile.block_order(run, 4)  # noqa: F841
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_float_run(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    tile.block_order(run * 0.5, 4)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_run_of_the_tile(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    tile.block_order(run + tile.bid(0), 4)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_bad_group(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    tile.block_order(run, 0)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


def _kernel_runtime_group(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
    tile.block_order(4, run)
    tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))


@pytest.mark.parametrize("fn,needle", [
    (_kernel_in_loop, "a statement at the kernel's top level"),
    (_kernel_in_branch, "a statement at the kernel's top level"),
    (_kernel_as_value, "a statement at the kernel's top level"),
    (_kernel_twice, "given twice"),
    (_kernel_float_run, "`run` must be an integer scalar"),
    (_kernel_run_of_the_tile, "`run` may use only the kernel's scalar parameters"),
    (_kernel_bad_group, "`group` must be a compile-time integer >= 1 (or None: the lowering switch block_group's), "
                        "got 0"),
    (_kernel_runtime_group, "`group` must be a compile-time integer >= 1"),
])
def test_a_misplaced_or_malformed_block_order_is_refused_and_nothing_runs(fn, needle):
    x = np.ones(4 * TILE, np.float32)
    counts = np.full(4, -777.0, np.float32)
    with pytest.raises(TileCompileError, match="tile.block_order") as info:
        tile.kernel(fn).simulate_lowered(tile.partition(x, (TILE,)), counts, 2)
    assert needle in str(info.value)
    assert (counts == -777.0).all()


def test_a_helper_may_not_order_the_blocks():
    @tile.func
    def order_in_helper(run):
        tile.block_order(run, 4)

    @tile.kernel
    def k(x: tile.Partition[f32], counts: tile.Atomic[f32, 1], run: i32):
        order_in_helper(run)
        tile.atomic_add(counts, tile.bid(0), tile.sum(x.load()))
    counts = np.full(4, -777.0, np.float32)
    with pytest.raises(TileCompileError, match="top level"):
        k.simulate_lowered(tile.partition(np.ones(4 * TILE, np.float32), (TILE,)), counts, 2)
    assert (counts == -777.0).all()
