"""Software pipelining of the tensor-core products' operand loads in tile loops (cp.async).

    for j in range(stop):
        s = tile.matmul(q, tile.transpose(tile.load(k, (kv0 + j, 0), (BN, D))))
        ...
        acc = acc + tile.matmul(p, tile.load(v, (kv0 + j, 0), (BN, D)))

Each load that feeds a tensor-core product directly, reads a read-only array with the GEMM loop's
facts (tc_operands.async_ok) and is indexed only by the loop variable and values fixed before
the loop gets its own shared buffer. The copies of iteration 0 are issued before the loop, those of
iteration j+1 right after iteration j's product has read the buffer, so every copy overlaps the rest of
the body (the softmax, the other product) instead of stalling its product. With n such loads the
copy groups stay in one order (L1..Ln, then L1 of the next iteration...), so a product that uses u of
them waits with `cp.async.wait_group n-u`.

The plan predicts the order in which the body stages the loads; the loop's lowering (loops.py) checks
it and lowers the loop again without the pipeline when it differs (never a wrong wait count). This
module holds the plan and what the products call while their loop is lowered (wait_for,
prefetch_next, ring_wait, ring_done): it imports nothing that lowers statements, so the products can
import it and loops.py can import both.

With KB_TILE_LOOP_STAGES=3 (a kernel's `loop_stages`) and every copied load a warpgroup-MMA B
operand, each load keeps three buffers and its copies run two iterations ahead (Triton's cp.async
pipeline with num_stages=3): iteration j + 2 goes into the buffer iteration j - 1 read, which every
warp left before the barrier of iteration j's first wait, so no barrier follows a product; the group
counts generalise to `ahead * n - u`. With the default 2, one buffer a load, refilled right after its
product (one iteration ahead).

On sm_90, KB_TILE_LOOP_PIPELINE=tma or ws replaces the copies of loops whose pipelined loads are all
warpgroup-MMA B operands by a TMA ring on mbarriers (matmul/ring.py); each load then has its own
barriers, so only how often the body uses each load is checked. Loads of one tile (the same array,
tile shape, dtype and index: attention's backward reads its Q and dO tiles in two products each) share
one ring stage: copied once an iteration, waited for at the first product that reads it, released after
the last (`distinct`). A cp.async pipeline keeps one buffer a load: its group counts assume that the
copies are issued in the order the body first reads them.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir import nodes as N
from dsl.ir.types import I32, U32
from dsl.tile.lower.matmul import ring as R
from dsl.tile import ir as T
from dsl.tile.lower.matmul.stages import SWIZZLE_ALIGN, aligned_base
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait, fence_proxy_async
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, async_ok, issue_copies, tc_warps, wgmma_b, wgmma_stage
from dsl.tile.types import PartitionParamType

MULTI_BUDGET = 96 * 1024    # dynamic shared bytes a loop's multi-buffered cp.async stages may take
BUDGET = 40 * 1024          # shared bytes the pipelined buffers may take (of the 48 KiB static; a
                            # kernel whose other buffers then do not fit is lowered again without)
FIRST_SLOT = 100            # scratch slots of the pipelined buffers (lower.scratch)


@dataclass
class Stage:
    load: T.Load
    buf: N.Expr
    stride: int
    swizzled: bool = False      # the B of a warpgroup MMA: 128-byte swizzle atoms (tc_operands.wgmma_b)
    slots: int = 1              # buffers of this load (cp.async, loop_stages 3: one per iteration in flight)
    aliases: tuple = ()         # ring: other loads of the body that read the same tile (distinct)


@dataclass
class Pipeline:
    loop: T.For
    stages: list[Stage]
    var: N.Var | None = None
    stop: N.Expr | None = None
    step: N.Expr | None = None
    used: int = 0               # stages the body has consumed so far, in order
    in_order: bool = True
    start: N.Expr | None = None
    ring: R.Ring | None = None  # a TMA ring feeds the stages instead of cp.async (ring.py)
    seen: list = None           # ring positions the body consumed, in order
    rotation: object = None     # the last product issued in the next iteration (matmul/overlap.py)
    pingpong: object = None     # the two consumer warpgroups' products in turns (matmul/pingpong.py)
    done: N.Var | None = None   # a ring shared by loops run one after another (ring_ws.py chains them):
                                # the iterations the earlier loops ran, where this loop's numbers start

    def accepted(self) -> bool:
        """The body consumed every stage as often as it reads its tile (once, but for a ring's shared
        stages), in the planned order for cp.async's group counts."""
        if self.ring is not None:
            return sorted(self.seen or []) == sorted(i for i, n in enumerate(self.use_counts()) for _ in range(n))
        return self.in_order and self.used == len(self.stages)

    def use_counts(self) -> list[int]:
        """The loads of the body each stage serves (a ring's shared stages more than one)."""
        return [1 + len(st.aliases) for st in self.stages]

    def loads(self) -> list[T.Load]:
        """Every load the body reads through the stages (a stage's own and the loads aliased to it)."""
        return [st.load for st in self.stages] + [ld for st in self.stages for ld in st.aliases]

    @property
    def ahead(self) -> int:
        """cp.async: iterations the copies run ahead of the products (one fewer than the buffers a load,
        or 1 with one buffer: refilled right after its product)."""
        return max(1, self.stages[0].slots - 1)

    def position(self, load: T.Load) -> int:
        return next(i for i, st in enumerate(self.stages) if st.load is load or any(a is load for a in st.aliases))

    def first_use(self, i: int) -> bool:
        """Is the body's next read of stage i its first this iteration (ring: counted by ring_wait)?"""
        return (self.seen or []).count(i) == 0

    def last_use(self, i: int) -> bool:
        """Has the body now read stage i as often as it reads it an iteration (ring_done releases it)?"""
        return (self.seen or []).count(i) == self.use_counts()[i]


def iteration(L, pipe: Pipeline, at: N.Expr | None = None) -> N.Expr:
    """The iteration number n = (j - start) / step (0, 1, ...: ring stages and phases, buffers) of the
    running iteration, or of loop value `at` (also before the loop runs)."""
    n = N.BinOp("sub", N.ReadVar(pipe.var) if at is None else at, pipe.start, I32)
    if not (isinstance(pipe.step, N.Const) and pipe.step.value == 1):
        n = N.BinOp("floordiv", n, pipe.step, I32)
    if pipe.done is not None:
        n = N.BinOp("add", N.ReadVar(pipe.done), n, I32)
    return L.tmp(n, "rit")


def trips(L, start: N.Expr, stop: N.Expr, step: N.Expr) -> N.Expr:
    """Iterations of range(start, stop, step), step > 0 (none when stop <= start)."""
    span = N.BinOp("add", N.BinOp("sub", stop, start, I32), N.BinOp("sub", step, N.Const(1, I32), I32), I32)
    return L.tmp(N.BinOp("max", N.BinOp("floordiv", span, step, I32), N.Const(0, I32), I32), "rtrips")


def index_at(L, pipe: Pipeline, load: T.Load, at: N.Expr) -> list[N.Expr]:
    """`load`'s tile index at loop iteration value `at` (the loop variable's value, not n)."""
    v = L.new_var(I32, "pfit")
    L.emit(N.Assign(v, at))
    saved = L.vars[id(pipe.loop.var)]
    L.vars[id(pipe.loop.var)] = ("U", [v])
    try:
        return [L.scalar(i) for i in load.index]
    finally:
        L.vars[id(pipe.loop.var)] = saved


def ring_wait(L, pipe: Pipeline, load: T.Load) -> tuple[int, N.Expr, N.Expr]:
    """Before a product reads ring load `load` of this iteration: (its position, the iteration
    number, the stage's shared address)."""
    i = pipe.position(load)
    first = pipe.first_use(i)
    pipe.seen = (pipe.seen or []) + [i]
    n = iteration(L, pipe)
    if not first:           # an earlier product of this iteration waited for the same stage
        return i, n, R.stage_address(L, pipe.ring, i, R.stage_of(L, pipe.ring, n)[0])
    return i, n, R.wait_full(L, pipe.ring, i, n)


def ring_done(L, pipe: Pipeline, i: int, n: N.Expr, last: bool | None = None) -> None:
    """After the wait_group that completes the product that read load i of iteration n: release
    its stage when no later product of the iteration reads it (`last`: the caller knows; the rotated
    product of matmul/overlap.py, whose stage serves it alone); tma: the leader copies iteration
    n + S into it."""
    ring = pipe.ring
    if not (pipe.last_use(i) if last is None else last):
        return
    R.release(L, ring, i, n)
    if ring.ws:
        return
    at = L.tmp(N.BinOp("add", N.BinOp("add", pipe.start, N.BinOp("mul", n, pipe.step, I32), I32),
                       N.BinOp("mul", pipe.step, N.Const(ring.S, I32), I32), I32), "rj")
    runs = N.Logical("and", ring.leader, N.Compare("lt", at, pipe.stop))
    nxt = N.BinOp("add", n, N.Const(ring.S, I32), I32)

    def refill() -> None:
        if ring.arrivals:           # every warpgroup released iteration n's use of the stage
            R.producer_wait(L, ring, i, nxt)
        R.issue(L, ring, i, nxt, index_at(L, pipe, pipe.stages[i].load, at))
    L.emit(N.If(runs, L.block_of(refill), []))


def candidate_loads(L, s: T.For) -> list[tuple[T.Load, bool]] | None:
    """The loads loop `s` would copy ahead, each with whether it is a warpgroup-MMA B operand, in
    the order the body stages them; None when the loop does not pipeline."""
    if not (L.pipelines and L.tc_matmul and L.cc >= 80 and isinstance(s.step, T.Const) and s.step.value >= 1):
        return None
    assigned: set[int] = set()
    for st in T.walk_stmts(s.body):
        if isinstance(st, T.For):
            return None                         # nested loops: keep it simple
        if isinstance(st, T.Assign):
            assigned.add(id(st.var))
        if isinstance(st, T.If) and any(isinstance(x, T.Matmul) for b in (st.then, st.else_)
                                        for y in T.walk_stmts(b) for x in _exprs_of(y)):
            return None                         # a product that may not run would break the count
    loads: list[tuple[T.Load, bool]] = []
    for st in s.body:
        for e in _exprs_of(st):
            for mm in _products(e):
                (m, k), (_, n) = mm.a.type.shape, mm.b.type.shape
                if tc_warps(L, m, n, k, mm.a.type.dtype, mm.b.type.dtype) is None:
                    continue
                wg = wgmma_b(L, m, n, k, mm.a.type.dtype, mm.b)
                b = mm.b.operand if isinstance(mm.b, T.Permute) and tuple(mm.b.axes) == (1, 0) else mm.b
                for op in ((b,) if wg is not None else (mm.a, b)):   # a wgmma's A comes from registers
                    if isinstance(op, T.Load) and async_ok(L, op) and not isinstance(op.param.type, PartitionParamType) \
                            and _invariant_index(op, s.var, assigned):
                        loads.append((op, wg is not None))
    return loads or None


def plan(L, s: T.For, ws: bool = False) -> Pipeline | None:
    loads = candidate_loads(L, s)
    if loads is None:
        return None
    # A warp-specialised kernel's loops other than the one it splits at keep cp.async: their ring would be
    # issued by a consumer thread inside the consumer role, which hung on the H200 (tutorial 06, 128x128
    # tiles, D64, causal: the diagonal loop after the split one; 2026-12-04). The producer owns the TMA.
    one = ring_tiles(L, loads)
    wanted = one is not None
    if wanted and (ws or L.ws_tid is None):
        ring, bufs = R.make_ring(L, list(one), ws)
        return ring_pipeline(s, one, bufs, ring)
    if wanted:
        from dsl.perf import SlowPath
        L.slow_paths.append(SlowPath("ws-other-loop", "this loop keeps cp.async: in a warp-specialised kernel "
                                     "only the loop it splits at has a TMA ring (fed by the producer warpgroup)",
                                     s.loc.line, s.loc.file))
    slots = _slots(L, loads)
    if slots > 1:
        stages = [Stage(op, wgmma_stage(L, op.type.dtype, slots * _slot_elems(op) + STAGE_SLACK_ELEMS,
                                        _stage_key(op, i, slots)), _stride(op, True), True, slots)
                  for i, (op, _) in enumerate(loads)]
        return Pipeline(s, stages)
    if sum(_stage_elems(op, swz) * 2 for op, swz in loads) > BUDGET:
        return None
    stages = [Stage(op, wgmma_stage(L, op.type.dtype, _stage_elems(op, swz), _stage_key(op, i, 1)) if swz else
                    L.scratch(op.type.dtype, _stage_elems(op, swz), FIRST_SLOT + i), _stride(op, swz), swz)
              for i, (op, swz) in enumerate(loads)]
    return Pipeline(s, stages)


def ring_tiles(L, loads: list[tuple[T.Load, bool]]) -> dict[T.Load, list[T.Load]] | None:
    """The tiles a ring would hold for a loop's candidate loads (distinct), or None where no ring is
    wanted (matmul/ring.py ring_wanted, its budget counting each tile once)."""
    one = distinct([op for op, _ in loads])
    return one if R.ring_wanted(L, [(op, swz) for op, swz in loads if op in one]) else None


def distinct(loads: list[T.Load]) -> dict[T.Load, list[T.Load]]:
    """`loads` grouped by the tile they read, {first load of the tile: the later ones}, in order. Two
    loads read one tile when they have the same array, tile shape, dtype, padding and index; their
    indices read only the loop variable and values fixed before the loop (candidate_loads), so equal
    index expressions are equal values within an iteration."""
    groups: dict[tuple, T.Load] = {}
    out: dict[T.Load, list[T.Load]] = {}
    for op in loads:
        key = (id(op.param), tuple(op.type.shape), str(op.type.dtype), repr(op.padding),
               tuple(_index_key(i) for i in op.index))
        if None in key[-1] or key not in groups:
            groups.setdefault(key, op)
            out[op] = []
        else:
            out[groups[key]].append(op)
    return out


def _index_key(e: T.TExpr) -> tuple | None:
    """A structural key of scalar index expression `e` (variables and parameters by identity), or None
    for a node this does not compare (then the load keeps a stage of its own)."""
    if isinstance(e, T.Const):
        return ("c", repr(e.value), str(e.type.dtype))
    if isinstance(e, T.Read):
        return ("r", id(e.var))
    if isinstance(e, T.ScalarArg):
        return ("a", id(e.param))
    if isinstance(e, (T.BlockId, T.NumBlocks)):
        return (type(e).__name__, e.axis, id(e.param))
    if isinstance(e, T.ArrayDim):
        return ("d", id(e.param), e.axis)
    if isinstance(e, (T.BinOp, T.Compare)):
        lhs, rhs = _index_key(e.lhs), _index_key(e.rhs)
        return None if lhs is None or rhs is None else (type(e).__name__, e.op, lhs, rhs, str(e.type.dtype))
    if isinstance(e, (T.UnaryOp, T.Cast)):
        inner = _index_key(e.operand)
        return None if inner is None else (type(e).__name__, getattr(e, "op", None), inner, str(e.type.dtype))
    return None


def ring_pipeline(s: T.For, one: dict[T.Load, list[T.Load]], bufs: list[N.Expr], ring: R.Ring) -> Pipeline:
    """The pipeline of loop `s` on `ring`: a stage per tile of `one` (distinct), in `bufs`."""
    stages = [Stage(op, buf, op.type.shape[1], True, aliases=tuple(dups)) for (op, dups), buf in zip(one.items(), bufs)]
    return Pipeline(s, stages, ring=ring)


def _stage_key(op: T.Load, i: int, slots: int) -> tuple:
    """The shared buffer of the i-th pipelined load: keyed by position, shape and dtype, not by loop,
    so loops that run one after another (causal attention's two stages) share their buffers. A loop
    ends with its copies waited for (loops.py: wait_group 0), and the next one's first copies wait
    for a block barrier after it (loops.py)."""
    return ("pipe", i, slots, tuple(op.type.shape), str(op.type.dtype))


def _slots(L, loads: list[tuple[T.Load, bool]]) -> int:
    """Buffers a load of a cp.async loop: loop_stages when it asks for more than 2 and every load is a
    warpgroup-MMA B (its own buffer in dynamic shared memory, whose slots stay 1024-byte aligned)
    within MULTI_BUDGET, else 1."""
    if L.loop_stages <= 2 or not all(swz for _, swz in loads):
        return 1
    # a wgmma B: 16-bit, rows a multiple of 8 and columns of 64 (wgmma_b), so every slot is whole atoms
    assert not any(_slot_elems(op) * op.type.dtype.itemsize % SWIZZLE_ALIGN for op, _ in loads)
    need = sum(L.loop_stages * _slot_elems(op) * op.type.dtype.itemsize + SWIZZLE_ALIGN for op, _ in loads)
    return L.loop_stages if need <= MULTI_BUDGET else 1


def _slot_elems(op: T.Load) -> int:
    return op.type.shape[0] * op.type.shape[1]


def value_of(pipe: Pipeline, k: int) -> N.Expr:
    """The loop value of iteration number k (start + k step): the iterations copied before the loop."""
    if k == 0:
        return pipe.start
    return N.BinOp("add", pipe.start, N.BinOp("mul", pipe.step, N.Const(k, I32), I32), I32)


def stage_base(L, pipe: Pipeline, st: Stage, at: N.Expr | None = None) -> N.Expr:
    """The aligned shared address of `st`'s buffer for the running iteration, or for the iteration of
    loop value `at` (a copy ahead): with several buffers, buffer n mod slots of iteration number n."""
    base = aligned_base(L, st.buf, "swz")
    if st.slots == 1:
        return base
    slot = N.BinOp("mod", iteration(L, pipe, at), N.Const(st.slots, I32), I32)
    off = N.BinOp("mul", N.Cast(slot, U32), N.Const(_slot_elems(st.load) * st.load.type.dtype.itemsize, U32), U32)
    return L.tmp(N.BinOp("add", base, off, U32), "swzs")


def _stride(op: T.Load, swizzled: bool) -> int:
    """Elements a staged row takes: padded by 8 for conflict-free ldmatrix, or the row itself (atoms)."""
    return op.type.shape[1] + (0 if swizzled else 8)


def _stage_elems(op: T.Load, swizzled: bool) -> int:
    return op.type.shape[0] * _stride(op, swizzled) + (STAGE_SLACK_ELEMS if swizzled else 0)


def wait_for(L, pipe: Pipeline, loads: list[T.Load], async_proxy: bool = False) -> None:
    """Before a product that reads `loads` (its pipelined operands, in staging order). `async_proxy`:
    a wgmma reads them, so the copies (generic proxy writes) are fenced for the async proxy."""
    for ld in loads:
        if pipe.position(ld) != pipe.used:
            pipe.in_order = False
        pipe.used += 1
    cp_async_wait(L, pipe.ahead * len(pipe.stages) - len(loads))
    if async_proxy:
        fence_proxy_async(L)
    L.sync()


def prefetch_next(L, pipe: Pipeline, loads: list[T.Load]) -> None:
    """After the product's last read of the buffers: the copies of iteration j + ahead."""
    assert pipe.var is not None and pipe.step is not None and pipe.stop is not None
    step = pipe.step if pipe.ahead == 1 else N.BinOp("mul", pipe.step, N.Const(pipe.ahead, I32), I32)
    nxt = L.tmp(N.BinOp("add", N.ReadVar(pipe.var), step, I32), "pfn")
    runs = L.tmp(N.Compare("lt", nxt, pipe.stop), "pfr")
    for ld in loads:
        issue(L, pipe, pipe.stages[pipe.position(ld)], nxt, runs)


def issue(L, pipe: Pipeline, st: Stage, value: N.Expr, runs: N.Expr) -> None:
    """Copies of `st` for the iteration whose loop value is `value` (when `runs`), then one commit either way."""
    at = L.new_var(I32, "pfit")
    L.emit(N.Assign(at, value))
    saved = L.vars[id(pipe.loop.var)]
    L.vars[id(pipe.loop.var)] = ("U", [at])
    try:
        def copies() -> None:
            base = [L.scalar(i) for i in st.load.index]
            swz = stage_base(L, pipe, st, N.ReadVar(at)) if st.swizzled else None
            issue_copies(L, st.load, st.buf, st.stride, base, swz)
        L.guarded(runs, copies)
    finally:
        L.vars[id(pipe.loop.var)] = saved
    cp_async_commit(L)


def _invariant_index(op: T.Load, loop_var: T.TVar, assigned: set[int]) -> bool:
    for i in op.index:
        for x in T.walk_exprs(i):
            if isinstance(x, T.Read) and x.var is not loop_var and id(x.var) in assigned:
                return False
            if isinstance(x, (T.Load, T.Matmul, T.Reduce)):
                return False
    return True


def _products(e: T.TExpr):
    """Products in the order lower_matmul_tc stages their operands: accumulator, A, then B first."""
    if isinstance(e, T.Matmul):
        for sub in (e.acc, e.a, e.b):
            if sub is not None:
                yield from _products(sub)
        yield e
        return
    for name in ("operand", "lhs", "rhs", "cond", "then", "else_"):
        sub = getattr(e, name, None)
        if isinstance(sub, T.TExpr):
            yield from _products(sub)
    for sub in getattr(e, "args", None) or ():
        yield from _products(sub)


def _exprs_of(s: T.TStmt) -> list[T.TExpr]:
    if isinstance(s, (T.Assign, T.Store)):
        return [s.value]
    if isinstance(s, T.If):
        return [s.cond]
    return []
