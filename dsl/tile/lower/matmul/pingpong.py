"""Ping-pong of a warp-specialised ring loop's two consumer warpgroups (lowering switch `pingpong`,
KB_TILE_PINGPONG, sm_90; FlashAttention-3's inter-warpgroup scheduling).

    for j in range(lo, hi):                                  # run by both consumer warpgroups
        s = tile.matmul(q, tile.transpose(tile.load(k, ...)))   # first product
        ...                                                   # the softmax of s
        acc = acc * alpha[:, None] + tile.matmul(p, tile.load(v, ...))   # last product

Under `loop_pipeline="ws"` two consumer warpgroups run this loop on different rows (64 query rows
each) and each of them waits for every product it issues. Left alone they drift into step: both issue
their products at once and both run their softmax while the tensor cores idle. Here their products
take turns. A warpgroup's *section* runs from the issue of iteration j's last product to the issue of
iteration j + 1's first (in iteration order: its P V, then its next S); a section starts only when
the other warpgroup's section before it has ended, so while one warpgroup's products run on the
tensor cores, the other runs its softmax.

Two named barriers of 256 threads, TURN_BARRIERS (0 is __syncthreads, 1 the consumers' block barrier),
one for each warpgroup's turn: the warpgroup whose turn it is waits on its own (`bar.sync`), the other
arrives on it (`bar.arrive`) when its section ends. Per loop:

    second warpgroup: arrive(first's)       # the first warpgroup takes the first turn
    sync(mine)                              # opens the section holding iteration 0's first product
    for j:
        first product: issue, commit; arrive(other's); wait
        ...
        sync(mine); last product: issue, commit; wait
    first warpgroup: arrive(other's)        # ends its last section (the second's is awaited by nobody)

Under `product_overlap` (matmul/overlap.py: iteration j issues its first product and then iteration
j - 1's last, and runs the code between them while both run) a section is those two issues, as in
FlashAttention-3, where both overlaps were made for each other:

    second warpgroup: arrive(first's)
    for j:
        sync(mine); first product j and last product j - 1 issued, committed; arrive(other's); wait_group 1
        ...
    (the last iteration's last product, alone)
    first warpgroup: sync(mine); arrive(other's)     # takes the second's last arrival, then lets it on
    second warpgroup: sync(mine)            # not into a next loop's first arrival before that one is taken

Each barrier then sees as many arrivals as waits, for any trip count (0 too), so a later loop (causal
attention's diagonal loop) starts from clean barriers. Both warpgroups run the same trips (the loop's
bounds are block-uniform scalars, as the producer warpgroup needs them too). It applies to a ring loop
of a warp-specialised kernel with two consumer warpgroups whose body holds exactly two products in
top-level statements, each reading its B from the ring (never inside an `if`: every warpgroup reaches
every turn), rotated or not. The lock-step simulator runs both warpgroups as one
instruction stream: the turns order nothing there (interop_tests/dsl_tile/test_tile_pingpong.py checks
the protocol the kernel runs against a model of the barriers, every interleaving).

Under pingpong_span "program" the rotated loops neither open nor close their turns: the second warpgroup's
opening arrival comes once before the consumers' program (every loop of every tile a persistent block walks,
ring_ws.lower_split) and the closing hand-over once after it, so the turns run as through one loop of all
their iterations. Around each loop the two warpgroups no longer meet: the first runs its epilogue and its
next tile's first products while the second's last products run. A loop that is not rotated closes the
turns before it and opens them again after it, so every loop's protocol stays one the model accepts.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir import nodes as N
from dsl.ir.types import BOOL
from dsl.tile import ir as T
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.layout import c32
from dsl.tile.lower.matmul.overlap import b_operand
from dsl.tile.lower.matmul.warp_specialised import WS_PRODUCERS
from dsl.tile.lower.pipeline import _exprs_of, _products

TURN_BARRIERS = (2, 3)      # the first consumer warpgroup's turn, the second's
CONSUMERS = 256             # two warpgroups: the 128 threads that wait and the 128 that arrive


@dataclass
class PingPong:
    first: T.Matmul
    last: T.Matmul
    second: N.Var           # is this the second consumer warpgroup
    fired: list             # ("sync" | "arrive", id of the product) emitted (checked after the body)
    rotated: bool           # product_overlap: a section is the first product and the rotated last one


def plan_pingpong(L, loop: T.For, pipe) -> PingPong | None:
    """The turns of `loop` (pipelined by the ring `pipe`), or None where they do not apply."""
    if not (L.pingpong and pipe.ring is not None and pipe.ring.ws and L.T == CONSUMERS):
        return None
    found = [(k, mm) for k, st in enumerate(loop.body) if isinstance(st, (T.Assign, T.Store))
             for e in _exprs_of(st) for mm in _products(e)]
    every = sum(1 for e in T.body_exprs(loop.body) if isinstance(e, T.Matmul))     # in `if`s and atomics too
    if len(found) != 2 or every != 2 or found[0][0] >= found[1][0]:
        return None
    ring_loads = {id(ld) for ld in pipe.loads()}
    (_, first), (_, last) = found
    if any(id(b_operand(mm)) not in ring_loads for mm in (first, last)):
        return None
    rot = pipe.rotation
    if rot is not None and (rot.first is not first or rot.last is not last):
        return None
    return PingPong(first, last, L.new_var(BOOL, "turn2"), [], rot is not None)


def of(pipe, e: T.Matmul) -> PingPong | None:
    """The loop's turns when `e` is one of its two products, else None."""
    pp = pipe.pingpong if pipe is not None else None
    return pp if pp is not None and (e is pp.first or e is pp.last) else None


def _turn(L, pp: PingPong, family: str, own: bool) -> None:
    """`family` on this warpgroup's turn barrier (`own`) or the other's: a constant barrier number in
    each side of a warp-uniform branch (a number in a register makes ptxas reserve all 16 barriers)."""
    first_turn, second_turn = TURN_BARRIERS
    on_second, on_first = (second_turn, first_turn) if own else (first_turn, second_turn)
    L.emit(N.If(N.ReadVar(pp.second),
                L.block_of(lambda: L.asm(family, barrier=on_second, threads=CONSUMERS)),
                L.block_of(lambda: L.asm(family, barrier=on_first, threads=CONSUMERS))))


def _sync(L, pp: PingPong) -> None:
    _turn(L, pp, "bar.sync.turn", own=True)


def _arrive(L, pp: PingPong) -> None:
    _turn(L, pp, "bar.arrive.turn", own=False)


def before_issue(L, pipe, e: T.Matmul) -> None:
    """Right before product `e` is issued: the last product opens this warpgroup's section (rotated:
    the first, which the previous iteration's last follows)."""
    pp = of(pipe, e)
    if pp is not None and e is (pp.first if pp.rotated else pp.last):
        _sync(L, pp)
        pp.fired.append(("sync", id(e)))


def after_commit(L, pipe, e: T.Matmul) -> None:
    """Right after product `e`'s group is committed (rotated: and the last product's behind it): the
    first product ends the section."""
    pp = of(pipe, e)
    if pp is not None and e is pp.first:
        _arrive(L, pp)
        pp.fired.append(("arrive", id(e)))


def _second(L) -> N.Expr:
    """Is this thread in the second consumer warpgroup (the warpgroup index bind_roles took through lane 0,
    so ptxas sees it uniform per warp)."""
    return N.Compare("eq", L.ws_group, c32(WS_PRODUCERS // 128 + 1))


def _open(L, second: N.Expr) -> None:
    """The second warpgroup's arrival that gives the first turn away."""
    L.emit(N.If(second, L.block_of(lambda: L.asm("bar.arrive.turn", barrier=TURN_BARRIERS[0], threads=CONSUMERS)),
                []))


def _close_rotated(L, second: N.Expr) -> None:
    """The rotated protocol's closing hand-over: the first warpgroup takes the second's last arrival and
    hands over, which the second waits for, so that it never arrives twice on the first's barrier before
    one arrival is taken, as a next opening would."""
    first_turn, second_turn = TURN_BARRIERS

    def first() -> None:
        L.asm("bar.sync.turn", barrier=first_turn, threads=CONSUMERS)
        L.asm("bar.arrive.turn", barrier=second_turn, threads=CONSUMERS)
    L.emit(N.If(second, L.block_of(lambda: L.asm("bar.sync.turn", barrier=second_turn, threads=CONSUMERS)),
                L.block_of(first)))


def spans_program(L) -> bool:
    """Do the consumers' program open and close the turns (pingpong_span "program"; ring_ws.lower_split asks
    before it lowers them, the loops follow L.turns_spanned)."""
    return L.pingpong and L.product_overlap and L.pingpong_span == "program" and L.T == CONSUMERS


def program_turns(L, opening: bool) -> None:
    """pingpong_span "program": the consumers' program opens the turns before its first loop and closes them
    after its last (the rotated protocol's hand-over); a rotated loop between leaves them open."""
    (_open if opening else _close_rotated)(L, _second(L))


def start(L, pipe) -> None:
    """Before the loop: which turn is whose, the second warpgroup's arrival that gives the first turn away,
    and the sync that opens the section of iteration 0's first product. Under a program's span a rotated
    loop has none of them (the turns are open), one that is not closes the program's turns first."""
    pp = pipe.pingpong
    L.emit(N.Assign(pp.second, _second(L)))
    if L.turns_spanned:
        if pp.rotated:
            return
        _close_rotated(L, N.ReadVar(pp.second))
    _open(L, N.ReadVar(pp.second))
    if not pp.rotated:          # rotated, the first product's own sync opens the first section
        _sync(L, pp)


def finish(L, pipe, loc) -> None:
    """After the loop: the first warpgroup ends its last section (rotated: _close_rotated's hand-over;
    under a program's span, nothing for a rotated loop and a new opening after one that is not); the turn
    points ran where planned, once an iteration."""
    pp = pipe.pingpong
    want = [("sync", id(pp.first if pp.rotated else pp.last)), ("arrive", id(pp.first))]
    if sorted(pp.fired) != sorted(want):
        raise LoweringError(f"{loc}: internal: the ping-pong turns of this loop were emitted at "
                            f"{len(pp.fired)} points, not at its 2")
    if L.turns_spanned and pp.rotated:      # the consumers' program closes the turns
        return
    if not pp.rotated:
        L.emit(N.If(N.ReadVar(pp.second), [], L.block_of(
            lambda: L.asm("bar.arrive.turn", barrier=TURN_BARRIERS[1], threads=CONSUMERS))))
        if L.turns_spanned:     # and the program's turns open again
            _open(L, N.ReadVar(pp.second))
        return
    _close_rotated(L, N.ReadVar(pp.second))
