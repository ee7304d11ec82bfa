"""Lowering of tile reductions (sum max min argmax argmin).

Fast path (softmax/layernorm rows, full sums): when every output element gathers values from ALL
threads (the kept axes have strides >= T in the D layout), each thread reduces its own elements per
output in registers, a warp butterfly (shfl.xor) combines lanes, lane 0 of each warp writes one
partial per output to shared memory, and every thread finishes the W = T/32 partials.
Otherwise the tile goes through shared memory and each output element is reduced by its owner thread.
"""
from __future__ import annotations

import math

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, I32, ScalarType
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, U_MAX, MmaLayout, c32, flat_of, iadd, imul, ir32, strides


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
    N_, Tn, kept, sst = x.size, L.T, R.kept, R.sst
    fast = (N_ >= Tn and all(R.shape[k] == 1 or sst[k] >= Tn for k in kept)) or (N_ < Tn and R.n_out == 1)
    if not fast:
        return _reduce_via_smem(L, e, x, R.comb, R.acc_t, kept, R.kshape, R.n_out, R.finish, R.conv)
    partial = _warp_butterfly(R, _thread_partials(R))
    if Tn // 32 == 1 and R.n_out <= U_MAX:
        return R.finish([partial[o] for o in range(R.n_out)], "U")
    return _across_warps(R, partial)


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


def _thread_partials(R: _Reduction) -> dict[int, tuple]:
    """Per thread, per output (static grouping): threads past the tile contribute the identity."""
    L, comb, acc_t = R.L, R.comb, R.acc_t
    partial: dict[int, tuple] = {}
    own = L.geo.owner(R.x.size)
    for r, el in enumerate(R.x.elems):
        coords = L.geo.coords(R.shape, r)
        o = R.out_index(coords)
        assert isinstance(o, int)
        v = R.conv(el)
        idx = L.tmp(ir32(R.arg_index(coords))) if comb.arg else None
        if own is not True:
            ident, iid = comb.identity()
            v = L.tmp(N.IfExp(own, v, ident, acc_t))
            if comb.arg:
                idx = L.tmp(N.IfExp(own, idx, iid, I32))
        item = (L.tmp(v), idx)
        partial[o] = item if o not in partial else comb(partial[o], item)
    return partial


def _warp_butterfly(R: _Reduction, partial: dict[int, tuple]) -> dict[int, tuple]:
    L, comb = R.L, R.comb
    for o, (v, i) in list(partial.items()):
        for m in (16, 8, 4, 2, 1):
            ov = L.tmp(N.Warp("shfl_xor", [v, c32(m)], R.acc_t))
            oi = L.tmp(N.Warp("shfl_xor", [i, c32(m)], I32)) if comb.arg else None
            v, i = comb((v, i), (ov, oi))
        partial[o] = (v, i)
    return partial


def _across_warps(R: _Reduction, partial: dict[int, tuple]) -> LV:
    """One partial per (output, warp) through shared memory, combined by every thread."""
    L, comb, acc_t, n_out = R.L, R.comb, R.acc_t, R.n_out
    W = L.T // 32
    same = (acc_t == I32 or acc_t == BOOL)
    vbuf = L.scratch(acc_t, n_out * W * (2 if comb.arg and same else 1))
    ibuf = L.scratch(I32, n_out * W * (2 if same else 1)) if comb.arg else None
    ioff = n_out * W if same else 0
    warp = L.tmp(N.BinOp("rshift", L.geo.tid, c32(5), I32))
    lane0 = N.Compare("eq", N.BinOp("and_", L.geo.tid, c32(31), I32), c32(0))

    def write():
        for o, (v, i) in partial.items():
            L.smem_store(vbuf, iadd(o * W, warp), v)
            if comb.arg:
                L.smem_store(ibuf, iadd(ioff + o * W, warp), i)
    L.guarded(lane0, write)
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


def _reduce_via_smem(L, e, x: LV, comb: _Comb, acc_t, kept, kshape, n_out, finish, conv) -> LV:
    shape = x.shape
    sst = strides(shape)
    buf = L.write_scratch(x)
    red = [k for k in range(len(shape)) if k not in kept]
    length = 1
    for k in red:
        length *= shape[k]
    rshape = tuple(shape[k] for k in red)
    vals = []
    for r in range(L.geo.per_thread(n_out)):
        oc = L.geo.coords(kshape, r)
        full = [0] * len(shape)
        for k, c in zip(kept, oc):
            full[k] = c
        base = L.tmp(ir32(flat_of(full, shape)), "base")
        accv = L.new_var(acc_t, "acc")
        acci = L.new_var(I32, "acci") if comb.arg else None
        ident, iid = comb.identity()
        L.emit(N.Assign(accv, ident))
        if acci is not None:
            L.emit(N.Assign(acci, iid))
        j = L.new_var(I32, "j")

        def body():
            # offset of reduced position j inside the tile
            off = 0
            rst = strides(rshape)
            for k, rs, sz in zip(red, rst, rshape):
                ck = N.BinOp("and_", N.BinOp("rshift", N.ReadVar(j), c32(rs.bit_length() - 1), I32),
                             c32(sz - 1), I32)
                off = iadd(off, imul(ck, sst[k]))
            v = conv(L.smem_load(buf, iadd(base, off), x.dtype))
            item = (L.tmp(v), N.ReadVar(j) if comb.arg else None)
            nv, ni = comb((N.ReadVar(accv), N.ReadVar(acci) if acci else None), item)
            L.emit(N.Assign(accv, nv))
            if acci is not None:
                L.emit(N.Assign(acci, ni))
        L.emit(N.ForRange(j, c32(0), c32(length), c32(1), L.block_of(body)))
        vals.append((N.ReadVar(accv), N.ReadVar(acci) if acci else None))
    L.sync()
    return finish(vals, "D")


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
