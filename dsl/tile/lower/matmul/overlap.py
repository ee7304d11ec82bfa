"""Overlap of a ring loop's two products with the code between them (KB_TILE_PRODUCT_OVERLAP, sm_90).

    for j in range(stop):
        s = tile.matmul(q, tile.transpose(tile.load(k, (kv0 + j, 0), (BN, D))))   # first product
        ...                                                                       # softmax of s
        acc = tile.matmul(p, tile.load(v, (kv0 + j, 0), (BN, D)), acc * alpha)    # last product

Each product normally waits for its own wgmma group, so the tensor cores idle while the threads run
the code between the products and the threads idle while the tensor cores run. Here the last product
of iteration j is issued in iteration j + 1, right behind the first product: its operands (the packed
A registers and the accumulators, already rescaled) wait in registers, the first product's group is
waited for with wait_group 1, and the last product runs on the tensor cores during the code between
the products; its wait_group 0 comes where its result is first read: the last product's own
accumulator, one iteration later. After the loop the last iteration's last product runs alone.
FlashAttention-3's intra-warpgroup pipelining, as a loop transformation of the lowering.

It applies to a loop fed by a TMA ring (matmul/ring.py) whose body has exactly two products, both
warpgroup MMA with a ring-load B, the last of them a top-level `x = tile.matmul(a, b, acc)` whose
variable x no other statement of the body reads or assigns, kept in the product's accumulator layout
(a hint from an earlier lowering: the lowering runs until its layouts settle). No branch: in the first
iteration the deferred product multiplies zeros (its A registers start at 0) by the first iteration's
B stage, which the waits have made valid, so its accumulators keep their values; the stage of
iteration n - 1 is released after that product's wait. In a chain of loops sharing a ring
(ring_ws.py), the first iteration's deferred product reads its own stage, and the last one's stage is
released after the loop for the next loop's copies.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir import nodes as N
from dsl.ir.types import I32, U32
from dsl.tile import ir as T
from dsl.tile.lower.layout import MmaLayout, c32
from dsl.tile.lower.matmul import ring as R
from dsl.tile.lower.matmul.operands import tc_warps
from dsl.tile.lower.matmul.wgmma import wait_wgmma
from dsl.tile.lower.matmul.wgmma_rs import issue_product
from dsl.tile.lower.pipeline import _exprs_of, _products, iteration, ring_done, trips as pipeline_trips


@dataclass
class Rotation:
    first: T.Matmul
    last: T.Matmul
    target: T.TVar              # the variable the last product is assigned to
    b_last: T.Load              # the last product's ring load
    carry: list[list[N.Var]]    # its packed A registers, 4 per 16 of k a slice, carried into the next iteration


def plan_rotation(L, loop: T.For, pipe) -> Rotation | None:
    """The rotation of `loop` (pipelined by the ring `pipe`), or None where it does not apply."""
    if not (L.product_overlap and pipe.ring is not None):
        return None
    found = [(k, mm) for k, st in enumerate(loop.body) for e in _exprs_of(st) for mm in _products(e)]
    if len(found) != 2 or found[0][0] >= found[1][0]:
        return None
    (_, first), (at, last) = found
    st = loop.body[at]
    if not (isinstance(st, T.Assign) and st.value is last and last.acc is not None):
        return None
    ring_loads = {id(s.load): s.load for s in pipe.stages if not s.aliases}    # each read by its product alone
    b_first, b_last = (b_operand(mm) for mm in (first, last))
    if id(b_first) not in ring_loads or id(b_last) not in ring_loads or b_first is b_last:
        return None
    x = st.var
    for k, other in enumerate(loop.body):
        if k != at and _touches(other, x):
            return None
    (m, kk), (_, n) = last.a.type.shape, last.b.type.shape
    warps = tc_warps(L, m, n, kk, last.a.type.dtype, last.b.type.dtype)
    if warps is None or L.layout_hints.get(id(x)) != ("C", (m, n), *warps):
        return None
    slices = m // (16 * warps[0])       # m64 slices a warpgroup (frags.warpgroup_rows): A registers for each
    carry = [[L.new_var(U32, "pcarry") for _ in range(4)] for _ in range(slices * (kk // 16))]
    return Rotation(first, last, x, b_last, carry)


def b_operand(mm: T.Matmul) -> T.TExpr:
    """The array load a product reads as B (through the transpose of K^T)."""
    return mm.b.operand if isinstance(mm.b, T.Permute) and tuple(mm.b.axes) == (1, 0) else mm.b


def _touches(st: T.TStmt, x: T.TVar) -> bool:
    """Does `st` (or a statement inside it) read or assign variable `x`?"""
    if any(isinstance(s, T.Assign) and s.var is x for s in T.walk_stmts([st])):
        return True
    return any(isinstance(e, T.Read) and e.var is x for e in T.body_exprs([st]))


def rotation_of(L, e: T.Matmul):
    """(pipeline, rotation) when `e` is the last product of a rotated loop being lowered, else None."""
    pipe = L.pipelined.get(id(b_operand(e)))
    rot = getattr(pipe, "rotation", None)
    return (pipe, rot) if rot is not None and rot.last is e else None


def _target(L, rot: Rotation) -> list[N.Var]:
    layout, xs = L.vars[id(rot.target)]
    assert isinstance(layout, MmaLayout), "the rotated product's variable left its accumulator layout"
    return xs


def before_last(L, e: T.Matmul) -> None:
    """Before the last product reads its accumulator: wait for the previous iteration's last product
    (wait_group 0, its accumulators tied through the wait), then release its stage."""
    got = rotation_of(L, e)
    if got is None:
        return
    pipe, rot = got
    wait_wgmma(L, 0, _target(L, rot))
    n = iteration(L, pipe)
    i = pipe.position(rot.b_last)
    L.emit(N.If(N.Compare("gt", n, _first(pipe)), L.block_of(
        lambda: ring_done(L, pipe, i, L.tmp(N.BinOp("sub", n, c32(1), I32), "rprev"), last=True)), []))


def stash_last(L, pipe, b: T.Load, a_regs: list[list[N.Expr]]) -> None:
    """The last product of this iteration: keep its packed A registers for the next iteration (its
    accumulators are the variable's own, assigned by the caller); count its ring load as used."""
    pipe.seen = (pipe.seen or []) + [pipe.position(b)]
    for regs, vals in zip(pipe.rotation.carry, a_regs):
        for v, x in zip(regs, vals):
            L.emit(N.Assign(v, x))


def _issue(L, pipe, n: N.Expr) -> None:
    rot = pipe.rotation
    base = R.wait_full(L, pipe.ring, pipe.position(rot.b_last), n)
    issue_product(L, rot.last, rot.b_last, base, _target(L, rot), [[N.ReadVar(v) for v in regs] for regs in rot.carry])
    L.asm("wgmma.commit_group")


def issue_last(L, pipe, n: N.Expr) -> None:
    """Right after the first product of iteration n: issue iteration n - 1's last product (in
    iteration 0, zeros times iteration 0's stage) as a group of its own."""
    _issue(L, pipe, L.tmp(N.BinOp("max", N.BinOp("sub", n, c32(1), I32), _first(pipe), I32), "rlast"))


def _first(pipe) -> N.Expr:
    """The iteration number of the loop's first iteration: 0, or in a chain of loops sharing a ring
    (ring_ws.py) the iterations the earlier loops ran."""
    return N.ReadVar(pipe.done) if pipe.done is not None else c32(0)


def start(L, pipe) -> None:
    """Before the loop: the carried A registers are zeros."""
    for regs in pipe.rotation.carry:
        for v in regs:
            L.emit(N.Assign(v, N.Const(0, U32)))


def drain(L, pipe) -> None:
    """After the loop: the last iteration's last product, waited for (when the loop ran at all)."""
    rot = pipe.rotation
    trips = pipeline_trips(L, pipe.start, pipe.stop, pipe.step)

    def run() -> None:
        final = L.tmp(N.BinOp("add", _first(pipe), N.BinOp("sub", trips, c32(1), I32), I32), "rlast")
        _issue(L, pipe, final)
        wait_wgmma(L, 0, _target(L, rot))
        if pipe.done is not None:   # a loop after it refills the stage: release it as the loop would
            ring_done(L, pipe, pipe.position(rot.b_last), final, last=True)
    L.emit(N.If(N.Compare("gt", trips, c32(0)), L.block_of(run), []))
