"""Lowering of tile reductions (sum max min argmax argmin).

A D-layout element's output is fixed by the kept axes' bits of its flat index, which are partly
static (the element's place among the thread's runs) and partly the thread id's (_ThreadBits). Each
thread reduces its own elements per static output in registers; a warp butterfly (shfl.xor) over the
lane bits that do not pick the output combines lanes; then either every thread already holds its
outputs (uniform results of a one-warp block, or exactly the D layout of the result: rows inside
each thread's runs), or the lanes whose free bits are 0 write one partial per (output, free warp
bits) to shared memory and the result's threads combine them (softmax/layernorm rows, full sums: W =
T/32 partials). The reduced elements never go through shared memory themselves. mma accumulators
reduce along rows inside their quads (_reduce_mma_rows).
"""
from __future__ import annotations

import math

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, I32, ScalarType
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, U_MAX, MmaLayout, c32, flat_of, iadd, iand, imul, ir32, ishr, log2, strides


def _acc_type(op: str, dt: ScalarType) -> ScalarType:
    if dt.is_half:
        return F32
    return dt


def _identity(op: str, t: ScalarType):
    if op == "sum":
        return 0.0 if t.is_float else 0
    if op in ("max", "argmax"):
        if t.is_float:
            return -math.inf
        return False if t == BOOL else (-(1 << (t.bits - 1)) if t.is_signed else 0)
    if t.is_float:
        return math.inf
    return True if t == BOOL else (((1 << (t.bits - 1)) - 1) if t.is_signed else (1 << t.bits) - 1)


class _Comb:
    """Combines (value, index) pairs for one reduction op."""

    def __init__(self, L, op: str, t: ScalarType) -> None:
        self.L, self.op, self.t = L, op, t
        self.arg = op in ("argmax", "argmin")

    def identity(self) -> tuple[N.Expr, N.Expr | None]:
        v = N.Const(_identity(self.op, self.t), self.t)
        return v, (c32(0x7FFFFFFF) if self.arg else None)

    def __call__(self, a, b):
        L = self.L
        (va, ia), (vb, ib) = a, b
        if self.op == "sum":
            return L.tmp(N.BinOp("add", va, vb, self.t) if self.t != BOOL else N.Logical("or", va, vb)), None
        if self.op in ("max", "min"):
            if self.t == BOOL:
                return L.tmp(N.Logical("or" if self.op == "max" else "and", va, vb)), None
            return L.tmp(N.BinOp(self.op, va, vb, self.t)), None
        better = "gt" if self.op == "argmax" else "lt"
        va, vb, ia, ib = L.tmp(va), L.tmp(vb), L.tmp(ia), L.tmp(ib)
        take = L.tmp(N.Logical("or", N.Compare(better, vb, va),
                               N.Logical("and", N.Compare("eq", vb, va), N.Compare("lt", ib, ia))))
        return (L.tmp(N.IfExp(take, vb, va, self.t)), L.tmp(N.IfExp(take, ib, ia, I32)))


class _Reduction:
    """One tile reduction: the operand, its combiner and accumulator type, which axes are kept, and
    how an element's coordinates name its output and (argmax/argmin) its index."""

    def __init__(self, L, e: T.Reduce, x: LV) -> None:
        self.L, self.e, self.x = L, e, x
        self.acc_t = _acc_type(e.op, x.dtype)
        self.comb = _Comb(L, e.op, self.acc_t)
        self.shape = x.shape
        reduced = set(range(len(self.shape))) if e.axis is None else {e.axis}
        self.kept = [k for k in range(len(self.shape)) if k not in reduced]
        self.kshape = tuple(self.shape[k] for k in self.kept)
        self.n_out = 1
        for s in self.kshape:
            self.n_out *= s
        self.sst = strides(self.shape)

    def arg_index(self, coords):
        return flat_of(coords, self.shape) if self.e.axis is None else coords[self.e.axis]

    def out_index(self, coords):
        return flat_of([coords[k] for k in self.kept], self.kshape)

    def conv(self, v: N.Expr) -> N.Expr:
        return N.Cast(v, self.acc_t) if v.type != self.acc_t else v

    def finish(self, vals: list[tuple[N.Expr, N.Expr | None]], layout: str) -> LV:
        e = self.e
        if self.comb.arg:
            elems = [i for _, i in vals]
        else:
            elems = [self.L.tmp(N.Cast(v, e.type.dtype)) if self.acc_t != e.type.dtype else v for v, _ in vals]
        return LV(layout, e.type.shape, e.type.dtype, elems)  # type: ignore[arg-type]


def lower_reduce(L, e: T.Reduce) -> LV:
    x = L.expr(e.operand)
    if isinstance(x.layout, MmaLayout) and x.layout.wn == 1 and e.axis == 1 and e.op in ("sum", "max", "min"):
        return _reduce_mma_rows(L, e, x)
    x = L.to_layout(x, "D") if not (x.layout == "U") else x
    R = _Reduction(L, e, x)
    if x.layout == "U":
        return _reduce_uniform(R)
    bits = _ThreadBits(R)
    partial = _warp_butterfly(R, _thread_partials(R, bits), bits.lane_free)
    if not bits.kept and not bits.warp_free and R.n_out <= U_MAX:
        return R.finish([partial[o] for o in range(R.n_out)], "U")      # every thread holds every output
    if bits.kept and not bits.warp_free:
        direct = _direct_d(R, bits, partial)
        if direct is not None:
            return direct
    return _across_warps(R, bits, partial)


class _ThreadBits:
    """Which bits of the thread id select outputs. A D element's flat index is its static part plus
    tid << log2(run) (Geometry), and an output index takes the kept axes' bits of the flat index, so
    each thread bit either picks the output (kept) or is reduced over (free). Threads that differ
    only in free lane bits combine by a warp butterfly, in free warp bits through shared memory. A
    tile smaller than the block has thread bits past its size: free, their threads hold the identity."""

    def __init__(self, R: _Reduction) -> None:
        geo, size = R.L.geo, R.x.size
        self.shift = log2(geo.run(size)) if size >= geo.T else 0
        self.kept_at: dict[int, int] = {}        # kept thread bit j -> its bit in the output index
        out_bit = {}
        at = 0
        for k in reversed(R.kept):               # the output index is row-major over the kept axes
            out_bit[k] = at
            at += log2(R.shape[k])
        sst = R.sst
        for j in range(log2(geo.T)):
            p = j + self.shift                   # the flat bit thread bit j lands on
            for k in R.kept:
                lo = log2(sst[k])
                if p < log2(size) and lo <= p < lo + log2(R.shape[k]):
                    self.kept_at[j] = out_bit[k] + p - lo
        free = [j for j in range(log2(geo.T)) if j not in self.kept_at]
        self.lane_free = [j for j in free if j < 5]
        self.warp_free = [j for j in free if j >= 5]
        self.kept = bool(self.kept_at)

    def value(self, t: int) -> int:
        """The thread part of the output index of thread t (Python, for layout checks)."""
        return sum(((t >> j) & 1) << b for j, b in self.kept_at.items())

    def expr(self, tid: N.Expr):
        """The thread part of the output index as an i32 expression (runs of bits move together)."""
        acc, spans = 0, []                        # (first thread bit, first output bit, width)
        for j, b in sorted(self.kept_at.items()):
            if spans and spans[-1][0] + spans[-1][2] == j and spans[-1][1] + spans[-1][2] == b:
                spans[-1] = (spans[-1][0], spans[-1][1], spans[-1][2] + 1)
            else:
                spans.append((j, b, 1))
        for j, b, w in spans:
            acc = iadd(acc, imul(iand(ishr(tid, j), (1 << w) - 1), 1 << b))
        return acc


def _static_out(R: _Reduction, r: int) -> int:
    """The output index of element r's static flat part (the same in every thread)."""
    flat = R.L.geo.static_flat(R.x.size, r)
    return R.out_index([(flat >> log2(st)) & (sh - 1) for st, sh in zip(R.sst, R.shape)])


def _reduce_uniform(R: _Reduction) -> LV:
    """Every thread holds every element: combine them statically."""
    groups: dict[int, list] = {}
    for i, el in enumerate(R.x.elems):
        coords = [(i // st) % sh for st, sh in zip(R.sst, R.shape)]
        item = (R.conv(el), c32(R.arg_index(coords)) if R.comb.arg else None)
        groups.setdefault(R.out_index(coords), []).append(item)
    vals = []
    for o in range(R.n_out):
        acc = groups[o][0]
        for item in groups[o][1:]:
            acc = R.comb(acc, item)
        vals.append(acc)
    return R.finish(vals, "U")


def _thread_partials(R: _Reduction, bits: _ThreadBits) -> dict[int, tuple]:
    """Per thread, per static output part: threads past the tile contribute the identity."""
    L, comb, acc_t = R.L, R.comb, R.acc_t
    partial: dict[int, tuple] = {}
    own = L.geo.owner(R.x.size)
    for r, el in enumerate(R.x.elems):
        o = _static_out(R, r)
        v = R.conv(el)
        idx = L.tmp(ir32(R.arg_index(L.geo.coords(R.shape, r)))) if comb.arg else None
        if own is not True:
            ident, iid = comb.identity()
            v = L.tmp(N.IfExp(own, v, ident, acc_t))
            if comb.arg:
                idx = L.tmp(N.IfExp(own, idx, iid, I32))
        item = (L.tmp(v), idx)
        partial[o] = item if o not in partial else comb(partial[o], item)
    return partial


def _warp_butterfly(R: _Reduction, partial: dict[int, tuple], lanes: list[int]) -> dict[int, tuple]:
    """Combine the lanes that differ in the free lane bits `lanes` (shfl.xor): all of them end with the
    group's value."""
    L, comb = R.L, R.comb
    for o, (v, i) in list(partial.items()):
        for j in sorted(lanes, reverse=True):
            ov = L.tmp(N.Warp("shfl_xor", [v, c32(1 << j)], R.acc_t))
            oi = L.tmp(N.Warp("shfl_xor", [i, c32(1 << j)], I32)) if comb.arg else None
            v, i = comb((v, i), (ov, oi))
        partial[o] = (v, i)
    return partial


def _direct_d(R: _Reduction, bits: _ThreadBits, partial: dict[int, tuple]) -> LV | None:
    """The result in the D layout straight from the registers, when every thread already holds the
    outputs D gives it (a reduction inside each thread's runs, or across rows a thread holds)."""
    geo, n_out = R.L.geo, R.n_out
    if geo.owner(R.x.size) is not True:
        return None
    vals = []
    for r in range(geo.per_thread(n_out)):
        if n_out < geo.T:
            want = [t & (n_out - 1) for t in range(geo.T)]
        else:
            base = geo.static_flat(n_out, r)
            want = [base + (t << log2(geo.run(n_out))) for t in range(geo.T)]
        got = {want[t] - bits.value(t) for t in range(geo.T)}
        if len(got) != 1 or next(iter(got)) not in partial:
            return None
        vals.append(partial[got.pop()])
    return R.finish(vals, "D")


def _across_warps(R: _Reduction, bits: _ThreadBits, partial: dict[int, tuple]) -> LV:
    """Through shared memory: one partial per (output, combination of free warp bits), written by
    the lanes whose free lane bits are 0, then each output combined by the threads that hold it."""
    L, comb, acc_t, n_out = R.L, R.comb, R.acc_t, R.n_out
    tid = L.geo.tid
    W = 1 << len(bits.warp_free)
    same = (acc_t == I32 or acc_t == BOOL)
    vbuf = L.scratch(acc_t, n_out * W * (2 if comb.arg and same else 1))
    ibuf = L.scratch(I32, n_out * W * (2 if same else 1)) if comb.arg else None
    ioff = n_out * W if same else 0
    top = log2(L.T)
    if bits.warp_free == list(range(5, top)):
        wsel = L.tmp(N.BinOp("rshift", tid, c32(5), I32)) if W > 1 else 0
    else:
        wsel = 0
        for i, j in enumerate(bits.warp_free):
            wsel = iadd(wsel, imul(iand(ishr(tid, j), 1), 1 << i))
        wsel = L.tmp(ir32(wsel)) if not isinstance(wsel, int) else wsel
    mask = sum(1 << j for j in bits.lane_free)
    leader = True if mask == 0 else N.Compare("eq", N.BinOp("and_", tid, c32(mask), I32), c32(0))
    mine = L.tmp(ir32(bits.expr(tid))) if bits.kept else 0

    def write():
        for o, (v, i) in partial.items():
            pos = iadd(imul(iadd(mine, o), W), wsel)
            L.smem_store(vbuf, pos, v)
            if comb.arg:
                L.smem_store(ibuf, iadd(ioff, pos), i)
    L.guarded(leader, write)
    L.sync()

    def read(o) -> tuple:
        acc = None
        for w in range(W):
            pos = iadd(imul(o, W), w)
            item = (L.tmp(L.smem_load(vbuf, pos, acc_t)),
                    L.tmp(L.smem_load(ibuf, iadd(ioff, pos), I32)) if comb.arg else None)
            acc = item if acc is None else comb(acc, item)
        return acc
    if n_out <= U_MAX:
        res = R.finish([read(o) for o in range(n_out)], "U")
    else:
        res = R.finish([read(L.tmp(ir32(L.geo.flat(n_out, r)))) for r in range(L.geo.per_thread(n_out))], "D")
    L.sync()
    return res


def _reduce_mma_rows(L, e: T.Reduce, x: LV) -> LV:
    """Row reduction of mma accumulators whose warps split M only: each thread combines its own
    columns of each of its rows, then the four lanes of a quad (which hold the rest of those rows)
    exchange partials with two shuffles. The result stays in registers (MmaRows), where the row
    softmax of flash attention needs it."""
    lay = x.layout
    acc_t = _acc_type(e.op, x.dtype)
    comb = _Comb(L, e.op, acc_t)
    parts: dict[int, tuple] = {}
    for r, el in enumerate(x.elems):
        o = 2 * (r // (lay.nt * 4)) + (1 if r % 4 >= 2 else 0)
        item = (L.tmp(N.Cast(el, acc_t) if el.type != acc_t else el), None)
        parts[o] = item if o not in parts else comb(parts[o], item)
    out = []
    for o in range(2 * lay.mt):
        v = parts[o][0]
        for m in (1, 2):
            v = comb((v, None), (L.tmp(N.Warp("shfl_xor", [v, c32(m)], acc_t)), None))[0]
        out.append(L.tmp(N.Cast(v, e.type.dtype)) if acc_t != e.type.dtype else v)
    return LV(L.rows_of(lay), e.type.shape, e.type.dtype, out)
