"""The ping-pong of a warp-specialised loop's two consumer warpgroups (lowering switch `pingpong`,
dsl/tile/lower/matmul/pingpong.py): where the turn barriers go in the PTX, kernels it does not apply to
left byte for byte as they were, and the protocol the kernel runs, recorded in the lock-step simulator
(which runs both warpgroups as one instruction stream and cannot order them), checked against a model of
PTX named barriers in every interleaving of the two warpgroups: no deadlock, no arrival left over, no
warpgroup arriving twice in one phase, and never both warpgroups inside their product sections at once.
The kernels' results against float64 and ptxas: test_flash_attention_ws.py's pingpong variants.
"""
from __future__ import annotations

import importlib.util
import re
from collections import deque
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import tile
from dsl.tile.lower.matmul.pingpong import TURN_BARRIERS
from dsl.tile.ptx import sm80, table
from dsl.tile.switches import switches_key
from attention_refs import attention64
from ptxas_kit import ptxas_verbose

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_pp", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24"}


def flash(lowering: dict, warps: int, d: int, bm: int, bn: int, seq: int, causal: bool, rng=None, heads: int = 2,
          persistent: bool = False):
    kern = tile.kernel(FA.flash_fwd.pyfunc, num_warps=warps, lowering=lowering, persistent=persistent)
    make = (lambda: rng.standard_normal((heads * seq, d))) if rng is not None else (lambda: np.zeros((heads * seq, d)))
    q, k, v = (make().astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    return kern, (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1), out


def ptx(lowering: dict, warps: int = 8, d: int = 128, bm: int = 128, bn: int = 128, causal: bool = False) -> str:
    kern, args, _ = flash(lowering, warps, d, bm, bn, 512, causal)
    return kern.compile(args, "sm_90").ptx


# ------------------------------------------------------------------------------ the PTX
def test_the_first_product_ends_a_turn_and_the_last_one_waits_for_it():
    text = ptx({**WS, "pingpong": True})
    lines = [ln.strip() for ln in text.splitlines()]
    first, second = TURN_BARRIERS
    for op in ("bar.sync", "bar.arrive"):
        for b in (first, second):
            assert f"{op} {b}, 256;" in lines, (op, b)
    commits = [i for i, ln in enumerate(lines) if ln.startswith("wgmma.commit_group")]
    waits = [i for i, ln in enumerate(lines) if ln.startswith("wgmma.wait_group")]
    mmas = [i for i, ln in enumerate(lines) if "wgmma.mma_async" in ln]
    turns = [i for i, ln in enumerate(lines) if re.match(r"bar\.(sync|arrive) [23], 256;", ln)]
    # S = Q K^T: its group committed, then a turn ends (arrive), then the wait for it
    assert any(commits[0] < t < waits[0] and "arrive" in lines[t] for t in turns), lines[commits[0]:waits[0] + 1]
    # O += P V: a turn (sync) between the previous group's wait and its first wgmma
    second_mma = next(i for i in mmas if i > waits[0])
    assert any(waits[0] < t < second_mma and "bar.sync" in lines[t] for t in turns)


def test_rotated_a_turn_is_the_first_product_and_the_previous_last_one_behind_it():
    """product_overlap: sync, S of iteration j and P V of j - 1 issued and committed, arrive, wait_group 1."""
    lines = [ln.strip() for ln in ptx({**WS, "pingpong": True, "product_overlap": True}).splitlines()]
    mmas = [i for i, ln in enumerate(lines) if "wgmma.mma_async" in ln]
    waits = [i for i, ln in enumerate(lines) if ln.startswith("wgmma.wait_group.sync.aligned 1")]
    assert waits, "the rotated loop waits for its first product with one group left in flight"
    section = [i for i in mmas if i < waits[0]]
    commits = [i for i, ln in enumerate(lines) if ln.startswith("wgmma.commit_group") and i < waits[0]]
    syncs = [i for i, ln in enumerate(lines) if re.match(r"bar\.sync [23], 256;", ln) and i < section[0]]
    arrives = [i for i, ln in enumerate(lines) if re.match(r"bar\.arrive [23], 256;", ln) and commits[-1] < i < waits[0]]
    assert len(commits) >= 2 and syncs and arrives, (len(commits), syncs, arrives)


@pytest.mark.parametrize("lowering,warps,bm,bn", [
    ({"loop_pipeline": "tma"}, 4, 64, 64),                                 # one consumer warpgroup, no producer
    ({"loop_pipeline": "tma", "product_overlap": True}, 4, 64, 64),
])
def test_kernels_it_does_not_apply_to_keep_their_ptx_byte_for_byte(lowering, warps, bm, bn):
    assert ptx({**lowering, "pingpong": True}, warps, 128, bm, bn) == ptx(lowering, warps, 128, bm, bn)


def test_the_switch_is_part_of_the_compile_keys():
    assert "pingpong" in switches_key((("pingpong", True),))
    assert "pingpong" not in switches_key((("pingpong", False),))


# ------------------------------------------------------------------------------ the protocol
class Turns:
    """Records each turn barrier a lane runs in the lock-step simulator: (block, tid) -> [(op, barrier)]."""

    def __init__(self) -> None:
        self.ops: dict[tuple[int, int], list[tuple[str, int]]] = {}

    def factory(self, op: str):
        def make(barrier: int):
            def run(args, mach, lanes):
                blocks = mach.lanes.first + mach.lanes.blk[lanes]
                for b, t in zip(blocks.tolist(), mach.lanes.tid_lin[lanes].tolist()):
                    self.ops.setdefault((b, t), []).append((op, barrier))
            return sm80.semantics(run, machine=True, per_thread=True)
        return make

    def warpgroups(self) -> dict[int, tuple[list, list]]:
        """block -> (first consumer warpgroup's sequence, second's); every lane of a warpgroup the same."""
        out = {}
        for block in sorted({b for b, _ in self.ops}):
            seqs = []
            for wg in (1, 2):
                lanes = [self.ops.get((block, t), []) for t in range(128 * wg, 128 * (wg + 1))]
                assert all(s == lanes[0] for s in lanes), f"block {block}: warpgroup {wg}'s lanes differ"
                seqs.append(lanes[0])
            out[block] = tuple(seqs)
        return out


def model_check(seqs: tuple[list, list]) -> None:
    """Every interleaving of the two warpgroups' barrier operations under PTX named-barrier semantics
    (a phase of a 256-thread barrier completes when both warpgroups contributed 128: bar.sync waits for
    it, bar.arrive does not): AssertionError on a deadlock, a leftover arrival, a warpgroup contributing
    twice to one phase, or both warpgroups inside their sections (from passing a sync on their own turn
    barrier to their next arrival on the other's) at once."""
    own = dict(enumerate(TURN_BARRIERS))
    bars = sorted({b for s in seqs for _, b in s})
    start = ((0, 0), tuple(None for _ in bars), (None, None), (False, False))
    seen, todo = {start}, deque([start])
    while todo:
        pos, who, waiting, inside = todo.popleft()
        assert not all(inside), f"both warpgroups in their sections at {pos}"
        moves = 0
        for p in (0, 1):
            if pos[p] == len(seqs[p]):
                continue
            if waiting[p] is not None:          # blocked in a sync until its phase completes
                continue
            op, b = seqs[p][pos[p]]
            k = bars.index(b)
            w, wt, ins = list(who), list(waiting), list(inside)
            assert w[k] != p, f"warpgroup {p} contributes twice to one phase of barrier {b} at {pos}"
            if w[k] is None:                    # the first half of a phase
                w[k] = p
                if op == "sync":
                    wt[p] = b
            else:                               # the phase completes: a waiter on it goes on
                w[k] = None
                other = 1 - p
                if wt[other] == b:
                    wt[other] = None
                    if b == own[other]:
                        ins[other] = True
                if op == "sync" and b == own[p]:
                    ins[p] = True
            if op == "arrive" and b != own[p]:
                ins[p] = False
            np_ = list(pos)
            np_[p] += 1
            if np_[p] == len(seqs[p]):
                ins[p] = False                  # a finished warpgroup holds no section
            state = (tuple(np_), tuple(w), tuple(wt), tuple(ins))
            moves += 1
            if state not in seen:
                seen.add(state)
                todo.append(state)
        done = all(pos[p] == len(seqs[p]) for p in (0, 1))
        assert moves or done, f"deadlock at {pos}: waiting on {waiting}"
        if done:
            assert all(x is None for x in who), f"arrivals left over at the end: {who}"


def _turns_of(monkeypatch, rng, lowering: dict, causal: bool, persistent: bool) -> dict[int, tuple[list, list]]:
    """Each block's two warpgroup turn sequences of the forward under `lowering`, its result against float64."""
    turns = Turns()
    monkeypatch.setattr(sm80, "turn_sync", turns.factory("sync"))
    monkeypatch.setattr(sm80, "turn_arrive", turns.factory("arrive"))
    monkeypatch.setattr(table, "_RESOLVED", {})
    kern, args, out = flash(lowering, 8, 128, 128, 128, 384, causal, rng, persistent=persistent)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90", **({"blocks": 2} if persistent else {}))
    np.testing.assert_allclose(out, attention64(*args[:3], 384, causal), rtol=2e-2, atol=1e-2)
    return turns.warpgroups()


@pytest.mark.slow
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, True)], ids=["d128-full", "d128-causal", "d64-causal"])
@pytest.mark.parametrize("chain", [False, True], ids=["", "chain"])
@pytest.mark.parametrize("overlap", [False, True], ids=["", "overlap"])
def test_the_turns_the_kernel_runs_pass_the_barrier_model_in_every_interleaving(monkeypatch, rng, d, causal, chain,
                                                                                 overlap):
    """Two heads of 384 rows, 128-row blocks: causal blocks run 0, 1 and 2 iterations of the unmasked loop
    and one of the diagonal one (two loops, on one ring with `ws_chain`); rotated or not."""
    turns = Turns()
    monkeypatch.setattr(sm80, "turn_sync", turns.factory("sync"))
    monkeypatch.setattr(sm80, "turn_arrive", turns.factory("arrive"))
    monkeypatch.setattr(table, "_RESOLVED", {})
    kern, args, out = flash({**WS, "pingpong": True, "ws_chain": chain, "product_overlap": overlap}, 8, d, 128, 128,
                            384, causal, rng)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], 384, causal), rtol=2e-2, atol=1e-2)
    per_block = turns.warpgroups()
    assert len(per_block) == 6
    for block, seqs in per_block.items():
        assert seqs[0] and seqs[1], block
        model_check(seqs)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("overlap", [False, True], ids=["", "overlap"])
def test_a_persistent_blocks_turns_over_all_its_tiles_pass_the_barrier_model(monkeypatch, rng, causal, overlap):
    """A persistent kernel (each role walks the block's tiles, ring_ws.lower_split): two blocks of three
    tiles each run the turns of those tiles (block b: tiles b, b + 2, b + 4), one after another, as the
    kernel of a block a tile runs them; a block's whole sequence passes the model in every interleaving."""
    lowering = {**WS, "pingpong": True, "ws_chain": True, "product_overlap": overlap}
    tiles, walks = (_turns_of(monkeypatch, rng, lowering, causal, persistent) for persistent in (False, True))
    assert sorted(tiles) == list(range(6)) and sorted(walks) == [0, 1]
    for block, seqs in walks.items():
        for wg in (0, 1):
            assert seqs[wg] == sum((tiles[t][wg] for t in (block, block + 2, block + 4)), []), (block, wg)
        model_check(seqs)


def _protocol(trips: int, rotated: bool = False) -> tuple[list, list]:
    """The protocol pingpong.py emits for one loop of `trips` iterations, written out by hand."""
    a, b = TURN_BARRIERS
    if rotated:
        return ([("sync", a), ("arrive", b)] * (trips + 1),
                [("arrive", a)] + [("sync", b), ("arrive", a)] * trips + [("sync", b)])
    first = [("sync", a)] + [("arrive", b), ("sync", a)] * trips + [("arrive", b)]
    second = [("arrive", a), ("sync", b)] + [("arrive", a), ("sync", b)] * trips
    return first, second


@pytest.mark.parametrize("trips", [0, 1, 3])
@pytest.mark.parametrize("rotated", [False, True], ids=["", "rotated"])
def test_the_model_passes_the_protocol_for_any_trip_count(trips, rotated):
    model_check(_protocol(trips, rotated))


@pytest.mark.parametrize("rotated", [False, True], ids=["", "rotated"])
def test_the_model_passes_loops_run_one_after_another(rotated):
    """Causal attention's two loops (the first may run no iteration): the barriers must be clean between."""
    for trips in ((0, 1), (2, 1), (1, 0)):
        firsts, seconds = zip(*(_protocol(t, rotated) for t in trips))
        model_check((sum(firsts, []), sum(seconds, [])))


def test_the_model_catches_a_second_loop_that_arrives_before_the_first_loops_last_arrival_is_taken():
    """The rotated protocol without its closing hand-over (as first built): the second warpgroup's next
    loop arrives on the first's barrier while its last arrival is still there."""
    a, b = TURN_BARRIERS
    first = [("sync", a)]                                   # no iteration, then only the closing sync
    second = [("arrive", a)]
    with pytest.raises(AssertionError, match="twice"):
        model_check((first + [("sync", a), ("arrive", b), ("sync", a)], second + [("arrive", a), ("sync", b), ("arrive", a)]))


def test_the_model_catches_a_deadlock_a_leftover_arrival_and_two_warpgroups_in_their_sections():
    first, second = _protocol(2)
    with pytest.raises(AssertionError, match="deadlock"):
        model_check((first, second[1:]))                 # the first turn never given away
    with pytest.raises(AssertionError, match="left over"):
        model_check((first + [("arrive", TURN_BARRIERS[0])], second))
    with pytest.raises(AssertionError, match="twice"):
        model_check((first, [("arrive", TURN_BARRIERS[0])] + second))
    a, b = TURN_BARRIERS
    with pytest.raises(AssertionError, match="both warpgroups"):   # each gives the other its turn up front
        model_check(([("arrive", b), ("sync", a), ("sync", 4)], [("arrive", a), ("sync", b), ("arrive", 4)]))


# ------------------------------------------------------------------------------ pingpong_span "program"
SPAN = {**WS, "pingpong": True, "ws_chain": True, "product_overlap": True}


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("persistent", [False, True], ids=["", "persistent"])
def test_a_program_span_runs_the_turns_of_all_its_loops_as_one_loop(monkeypatch, rng, causal, persistent):
    """pingpong_span "program": a block's turns (persistent: over its three tiles; causal: two loops a tile)
    are one rotated loop's protocol of all their iterations, opened and closed once, where the default span
    hands over after every loop; both pass the barrier model in every interleaving."""
    around = _turns_of(monkeypatch, rng, SPAN, causal, persistent)
    spanned = _turns_of(monkeypatch, rng, {**SPAN, "pingpong_span": "program"}, causal, persistent)
    assert sorted(spanned) == sorted(around) and len(spanned) == (2 if persistent else 6)
    for block, seqs in spanned.items():
        trips = len(seqs[0]) // 2 - 1
        assert seqs == _protocol(trips, rotated=True), block
        model_check(seqs)
        loops = len(around[block][0]) // 2 - trips     # each loop of the default span adds one hand-over
        assert loops == (3 if persistent else 1) * (2 if causal else 1), block
        model_check(around[block])


@pytest.mark.slow
def test_a_loop_that_is_not_rotated_closes_a_programs_turns_and_opens_them_again(monkeypatch, rng):
    """Under the program's span a ping-pong loop without the rotation (here: every loop, the rotation's plan
    refused) closes the open turns before its own protocol and opens them after it: a sequence of protocols
    each of which the model accepts, and the result unchanged."""
    from dsl.tile.lower import loops as tile_loops
    monkeypatch.setattr(tile_loops.overlap, "plan_rotation", lambda *a: None)
    a, b = TURN_BARRIERS
    opening, closing = [[], [("arrive", a)]], [[("sync", a), ("arrive", b)], [("sync", b)]]
    for block, seqs in _turns_of(monkeypatch, rng, {**SPAN, "pingpong_span": "program"}, True, True).items():
        for wg in (0, 1):
            head, tail = len(opening[wg]) + len(closing[wg]), len(closing[wg])
            assert seqs[wg][:head] == opening[wg] + closing[wg] and seqs[wg][-tail:] == closing[wg], (block, wg)
        model_check(seqs)


def test_the_program_span_changes_only_a_rotated_ping_pong_kernel(tmp_path):
    """Without product_overlap (or ping-pong) the span has nothing to open: the PTX byte for byte as before;
    with both, fewer turn barriers in the code (no hand-over after each loop), and ptxas assembles the
    persistent kernel's (causal: two loops a tile)."""
    for lowering in ({**WS, "pingpong": True}, {**WS, "product_overlap": True}):
        assert ptx({**lowering, "pingpong_span": "program"}) == ptx(lowering)
    per_loop = ptx({**SPAN}, causal=True)
    spanned = ptx({**SPAN, "pingpong_span": "program"}, causal=True)
    count = lambda text: len(re.findall(r"bar\.(?:sync|arrive) [23], 256;", text))   # noqa: E731
    assert count(spanned) < count(per_loop)
    assert "pingpong_span_program" in switches_key((("pingpong_span", "program"),))
    assert not any("pingpong_span" in k for k in switches_key((("pingpong_span", "loop"),)))
    kern, args, _ = flash({**SPAN, "pingpong_span": "program"}, 8, 128, 128, 128, 512, True, persistent=True)
    text = kern.compile(args, "sm_90").ptx
    ptxas_verbose(text, "sm_90a", tmp_path)             # fails where ptxas refuses it
    assert "bar.arrive 2, 256;" in text
