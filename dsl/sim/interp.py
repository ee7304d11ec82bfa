"""Runs the typed IR of one kernel over every lane of a batch of blocks at once (lock-step SIMT).

Statements take a full-length bool mask of the lanes executing them and return the mask of lanes that
fall through (Break / Continue / Return / a fault take lanes out). Expressions are evaluated only on the
selected lanes (`sel`) and give NumPy vectors over them (or NumPy scalars for uniform values), so lazy
constructs (IfExp, and/or, guarded regions) never touch memory for lanes that did not choose them.
"""
from __future__ import annotations

import numpy as np

from dsl.ir import nodes as N
from dsl.ir.types import (INDEX, ArrayType, ChunkType, ScalarType, SlotType, ThreadIndexType, TupleType,
                          Type)
from dsl.sim import arith
from dsl.sim.addresses import AddressSpace
from dsl.sim.faults import FaultRecord, SimulationError, where
from dsl.sim.lanes import LaneSpace, count, subsel, to_mask, to_sel, vec
from dsl.sim.launch_ops import LaunchSemantics
from dsl.sim.memory import MemRef, SharedSpace
from dsl.sim.races import RaceLog
from dsl.sim.bank_conflicts import SHARED_PTX, BankConflictLog
from dsl.sim.shared_races import SharedRaceLog
from dsl.sim.warp import check_converged, warp_op

MAX_CALL_DEPTH = 64


class SlotValue:
    """A get_mut() handle per lane: the array, the indices and whether they are in range."""

    def __init__(self, mem: MemRef, idx: list, ok) -> None:
        self.mem, self.idx, self.ok = mem, idx, ok


class Storage:
    """Per-lane storage of one local of any IR type (uniform for arrays)."""

    def __init__(self, t: Type, nlanes: int) -> None:
        self.t, self.L = t, nlanes
        self.data: object = None

    def write(self, sel, value) -> None:
        t = self.t
        if isinstance(t, ArrayType):
            self.data = value
        elif isinstance(t, ScalarType):
            if self.data is None:
                self.data = np.zeros(self.L, arith.np_dtype(t))
            self.data[sel] = arith.as_type(value, t)  # type: ignore[index]
        elif isinstance(t, SlotType):
            if self.data is None:
                self.data = (value.mem, [np.zeros(self.L, np.int64) for _ in value.idx],
                             np.zeros(self.L, bool))
            _, idx, ok = self.data  # type: ignore[misc]
            for dst, src in zip(idx, value.idx):
                dst[sel] = src
            ok[sel] = value.ok
            self.data = (value.mem, idx, ok)
        elif isinstance(t, (TupleType, ThreadIndexType)):
            elems = _tuple_elems(t)
            if self.data is None:
                self.data = [Storage(e, self.L) for e in elems]
            for st, v in zip(self.data, value):  # type: ignore[arg-type]
                st.write(sel, v)
        else:  # ChunkType: an INDEX start
            if self.data is None:
                self.data = np.zeros(self.L, np.int64)
            self.data[sel] = value  # type: ignore[index]

    def read(self, sel):
        t = self.t
        if self.data is None:
            if isinstance(t, (TupleType, ThreadIndexType)):
                self.data = [Storage(e, self.L) for e in _tuple_elems(t)]
            elif isinstance(t, (ArrayType, SlotType)):
                raise SimulationError(f"simulator: local of type {t} read before it was assigned")
            else:
                dt = arith.np_dtype(t) if isinstance(t, ScalarType) else np.dtype(np.int64)
                self.data = np.zeros(self.L, dt)
        if isinstance(t, ArrayType):
            return self.data
        if isinstance(t, SlotType):
            mem, idx, ok = self.data  # type: ignore[misc]
            return SlotValue(mem, [i[sel] for i in idx], ok[sel])
        if isinstance(t, (TupleType, ThreadIndexType)):
            return tuple(st.read(sel) for st in self.data)  # type: ignore[union-attr]
        return self.data[sel]  # type: ignore[index]


def _tuple_elems(t: Type) -> tuple:
    if isinstance(t, ThreadIndexType):
        return (INDEX,) * t.ndim
    return t.elems  # type: ignore[attr-defined]


class Frame:
    """One activation: the kernel, or an inlined device-function call."""

    def __init__(self, fn: N.Function, nlanes: int) -> None:
        self.fn = fn
        self.uniform: dict[int, object] = {}
        self.store: dict[int, Storage] = {}
        self.returned = np.zeros(nlanes, bool)
        self.retval: Storage | None = None
        self.cont: list[np.ndarray] = []


class Machine(LaunchSemantics):
    """Executes one kernel on one LaneSpace (see the module docstring); grid / cluster barriers and
    distributed shared memory are dsl/sim/launch_ops.py."""

    def __init__(self, fn: N.Function, lanes: LaneSpace, params: dict[int, object],
                 shared: SharedSpace, fault: FaultRecord, races: RaceLog | None = None,
                 shared_races: SharedRaceLog | None = None, banks: BankConflictLog | None = None) -> None:
        self.fn, self.lanes, self.shared, self.fault = fn, lanes, shared, fault
        self.races = races                        # writers of global elements (dsl/sim/races.py)
        self.shared_races = shared_races          # shared-memory accesses (dsl/sim/shared_races.py), or None
        self.banks = banks                        # shared wavefronts by site (dsl/sim/bank_conflicts.py), or None
        self.stmt_loc = N.NOLOC                   # the statement being run: its inline PTX's and loads' line
        self.block_epoch = np.zeros(lanes.nblocks, np.int64)   # sync_threads() passed, per block
        self.shared_epoch = np.zeros(lanes.nblocks, np.int64)  # any barrier passed, per block (shared_races)
        self.gid = (lanes.first + lanes.blk) * lanes.T + lanes.tid_lin   # global linear thread ids
        self.L = lanes.L
        self.exited = np.zeros(self.L, bool)
        self.exit_epoch = 0
        self.kernel_frame = Frame(fn, self.L)
        self.kernel_frame.uniform.update(params)
        self.frames = [self.kernel_frame]
        self.consts: dict[int, object] = {}
        self.addresses = AddressSpace(shared)     # raw addresses of inline PTX (dsl/sim/addresses.py)
        # state of stateful inline-PTX semantics (pending copies, mbarriers, wgmma groups), by name
        self.ext: dict[str, object] = {}

    # ------------------------------------------------------------------------------ plumbing
    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def run(self) -> None:
        self.exec_body(self.fn.body, np.ones(self.L, bool))
        if not self.exited.any():           # a fault ends lanes mid-flight: their state proves nothing
            for state in self.ext.values():  # asynchronous work (copies, MMA groups) all completed
                check = getattr(state, "at_exit", None)
                message = check() if check is not None else None
                if message:
                    raise SimulationError(f"{self.fn.name}: simulator: {message}")

    def live(self) -> np.ndarray:
        """Lanes that still run the kernel (not exited by a fault, not returned from the kernel)."""
        return ~(self.exited | self.kernel_frame.returned)

    def _lanes_of(self, sel) -> np.ndarray:
        return np.arange(self.L) if isinstance(sel, slice) else sel

    def _blk(self, mem: MemRef, lanes):
        """Block-in-batch numbers of `lanes` (only shared memory is indexed by block; a cluster peer's
        view, launch_ops.e_ClusterShared, names the block it reads per lane)."""
        if not mem.shared:
            return None
        remote = getattr(mem, "remote", None)
        return self.lanes.blk[lanes] if remote is None else remote[lanes]

    def _exit(self, lanes: np.ndarray) -> None:
        self.exited[lanes] = True
        self.exit_epoch += 1

    def _err(self, node, msg: str) -> SimulationError:
        return SimulationError(f"{self.fn.name}: {msg} at {where(node.loc)}")

    # ----------------------------------------------------------------------------- statements
    def exec_body(self, stmts: list, mask: np.ndarray) -> np.ndarray:
        for s in stmts:
            if not mask.any():
                return mask
            epoch = self.exit_epoch
            mask = getattr(self, "s_" + type(s).__name__)(s, mask)
            if self.exit_epoch != epoch:
                mask = mask & ~self.exited
        return mask

    def s_Assign(self, s: N.Assign, mask):
        self.stmt_loc = s.loc
        sel = to_sel(mask)
        self._var(s.var).write(sel, self.ev(s.value, sel))
        return mask

    def s_ExprStmt(self, s: N.ExprStmt, mask):
        self.stmt_loc = s.loc                   # inline PTX takes its statement's line (bank-conflict sites)
        self.ev(s.value, to_sel(mask))
        return mask

    def s_Store(self, s: N.Store, mask):
        sel = to_sel(mask)
        mem = self.ev(s.array, sel)
        idx = self._indices(s.indices, sel)
        value = self.ev(s.value, sel)
        n = count(sel, self.L)
        lanes = self._lanes_of(sel)
        idx = [vec(i, n) for i in idx]
        value = vec(arith.as_type(value, mem.dtype), n)
        keep = ~self.exited[lanes]
        ok = mem.in_range(idx) if idx else np.ones(n, bool)
        if s.mode == "checked":
            self._fault_lanes(mem, idx, ok & keep, keep, lanes, s.site, s)
        elif s.mode == "unchecked":
            self._require_in_range(mem, idx, ok | ~keep, s)
        keep = keep & ok
        if not keep.all():
            lanes, idx, value = lanes[keep], [i[keep] for i in idx], value[keep]
        self._record_writes(mem, idx, lanes, s)
        mem.store(self._blk(mem, lanes), idx, value)
        return mask

    def _record_writes(self, mem: MemRef, idx: list, lanes: np.ndarray, s) -> None:
        self._count_banks(mem, idx, lanes, "store", s.loc)
        if self.races is not None and not mem.shared:
            self.races.record(mem, idx, self.gid[lanes], self.block_epoch[self.lanes.blk[lanes]], s.loc)
        elif self._watched(mem):
            self.shared_races.store(mem, mem.element_id(self.lanes.blk[lanes], idx), self.gid[lanes],
                                    self.shared_epoch[self.lanes.blk[lanes]], s.loc)

    def _count_banks(self, mem: MemRef, idx: list, lanes: np.ndarray, kind: str, loc) -> None:
        """An IR load or store of a block's own shared buffer, for the bank-conflict counts."""
        if self.banks is None or not _own_shared(mem) or lanes.size == 0:
            return
        flat = np.ravel_multi_index(tuple(np.asarray(i, np.int64) for i in idx), mem.extents) if idx else 0
        addr = self.addresses.shared_address(mem, flat)
        self.banks.record(kind, mem.data.dtype.itemsize, loc, self.lanes.warp_pos[lanes],
                          np.broadcast_to(addr, lanes.shape))

    def _watched(self, mem: MemRef) -> bool:
        """Are `mem`'s accesses checked for shared-memory races: a block's own shared buffer, the log on."""
        return self.shared_races is not None and _own_shared(mem)

    def pass_barrier(self, arrived: np.ndarray) -> None:
        """Lanes `arrived` (a mask) passed a barrier: their blocks' shared-race epoch moves on."""
        self.shared_epoch[arrived.reshape(-1, self.lanes.T).any(axis=1)] += 1

    def s_SlotSet(self, s: N.SlotSet, mask):
        sel = to_sel(mask)
        slot = self.ev(s.slot, sel)
        value = self.ev(s.value, sel)
        n = count(sel, self.L)
        lanes = self._lanes_of(sel)
        keep = vec(slot.ok, n) & ~self.exited[lanes]
        value = vec(arith.as_type(value, slot.mem.dtype), n)
        self._record_writes(slot.mem, [vec(i, n)[keep] for i in slot.idx], lanes[keep], s)
        slot.mem.store(self._blk(slot.mem, lanes[keep]), [vec(i, n)[keep] for i in slot.idx], value[keep])
        return mask

    def s_GuardedRegion(self, s: N.GuardedRegion, mask):
        sel = to_sel(mask)
        mem = self.ev(s.array, sel)
        idx = [vec(i, count(sel, self.L)) for i in self._indices(s.indices, sel)]
        ok = mem.in_range(idx)
        if s.proven:       # the GPU runs the body untested: a lane outside would be a wrong proof
            self._require_in_range(mem, idx, ok | self.exited[self._lanes_of(sel)], s)
        inside = self._mask_from(sel, ok) & ~self.exited
        out = self.exec_body(s.body, inside)
        return (mask & ~inside) | out

    def s_If(self, s: N.If, mask):
        sel = to_sel(mask)
        c = vec(self.ev(s.cond, sel), count(sel, self.L))
        then_m = self._mask_from(sel, c) & ~self.exited
        else_m = mask & ~then_m & ~self.exited
        if s.concurrent:          # roles that wait on each other: coroutines (dsl/sim/roles.py)
            from dsl.sim.roles import Roles
            if "roles" in self.ext:
                raise self._err(s, "nested concurrent roles are not simulated")
            roles = self.ext["roles"] = Roles()
            try:
                outs = roles.run([lambda: self.exec_body(s.then, then_m) if then_m.any() else then_m,
                                  lambda: self.exec_body(s.else_, else_m) if else_m.any() else else_m])
            finally:
                del self.ext["roles"]
            return outs[0] | outs[1]
        out_t = self.exec_body(s.then, then_m) if s.then else then_m
        out_e = self.exec_body(s.else_, else_m) if s.else_ else else_m
        return out_t | out_e

    def s_While(self, s: N.While, mask):
        cur = mask
        while True:
            sel = to_sel(cur)
            c = vec(self.ev(s.cond, sel), count(sel, self.L))
            run = self._mask_from(sel, c) & ~self.exited
            if not run.any():
                break
            cur = self._iterate(s.body, run)
        return mask & ~(self.exited | self.frame.returned)

    def s_ForRange(self, s: N.ForRange, mask):
        sel = to_sel(mask)
        n = count(sel, self.L)
        start, stop, step = (vec(self.ev(e, sel), n).astype(np.int64) for e in (s.start, s.stop, s.step))
        if np.any(step == 0):
            raise self._err(s, "range() step is zero")
        up = np.maximum(0, (stop - start + step - 1) // np.where(step > 0, step, 1))
        down = np.maximum(0, (start - stop - step - 1) // np.where(step < 0, -step, 1))
        trips, first, stride = (np.zeros(self.L, np.int64) for _ in range(3))
        trips[sel] = np.where(step > 0, up, down)
        first[sel], stride[sel] = start, step
        var = self._var(s.var)
        cur, k = mask & ~self.exited, 0
        while True:
            run = cur & (trips > k)
            if not run.any():
                break
            rs = to_sel(run)
            var.write(rs, (first[rs] + k * stride[rs]).astype(arith.np_dtype(_scalar(s.var.type))))
            cur = self._iterate(s.body, run)
            k += 1
        return mask & ~(self.exited | self.frame.returned)

    def s_ChunkLoop(self, s: N.ChunkLoop, mask):
        sel = to_sel(mask)
        start = np.zeros(self.L, np.int64)
        start[sel] = self.ev(s.chunk, sel)
        mem = self.ev(s.array, sel)
        extent = mem.extents[-1]
        n_own = s.chunk.type.n if isinstance(s.chunk.type, ChunkType) else 1
        var = self._var(s.var)
        cur = mask & ~self.exited
        for axis, e in enumerate(s.lead):          # the row must be inside the array
            row = np.full(self.L, -1, np.int64)
            row[sel] = self.ev(e, sel)
            cur &= (row >= 0) & (row < mem.extents[axis])
        for k in range(n_own):
            pos = start + k
            run = cur & (pos >= 0) & (pos < extent)
            if not run.any():
                continue
            rs = to_sel(run)
            var.write(rs, pos[rs])
            out = self._iterate(s.body, run)
            cur = (cur & ~run) | out
        return mask & ~(self.exited | self.frame.returned)

    def _iterate(self, body: list, run: np.ndarray) -> np.ndarray:
        """One loop iteration for lanes `run`; returns lanes that go on (fell through or continued)."""
        self.frame.cont.append(np.zeros(self.L, bool))
        try:
            out = self.exec_body(body, run)
        finally:
            cont = self.frame.cont.pop()
        return (out | cont) & ~self.exited

    def s_Break(self, s, mask):
        return np.zeros(self.L, bool)

    def s_Continue(self, s, mask):
        self.frame.cont[-1] |= mask
        return np.zeros(self.L, bool)

    def s_Return(self, s: N.Return, mask):
        f = self.frame
        if s.value is not None:
            sel = to_sel(mask)
            if f.retval is None:
                f.retval = Storage(s.value.type, self.L)
            f.retval.write(sel, self.ev(s.value, sel))
        f.returned |= mask & ~self.exited
        return np.zeros(self.L, bool)

    def partial_barrier(self, arrived: np.ndarray, want: np.ndarray) -> int | None:
        """The first block where some of the threads `want` (running, taking part) reached a barrier
        that others of them did not (undefined behaviour on the GPU), or None."""
        T = self.lanes.T
        partial = arrived.reshape(-1, T).any(axis=1) & (want & ~arrived).reshape(-1, T).any(axis=1)
        return int(np.flatnonzero(partial)[0]) if partial.any() else None

    def s_SyncThreads(self, s: N.SyncThreads, mask):
        T = self.lanes.T
        arrived = mask.reshape(-1, T)
        missing = (self.live() & ~mask).reshape(-1, T)
        b = self.partial_barrier(mask, self.live())
        if b is not None:
            xyz = tuple(int(v) for v in self.lanes.block_xyz[b])
            raise self._err(s, f"sync_threads() reached by only {int(arrived[b].sum())} of "
                               f"{int((arrived[b] | missing[b]).sum())} running threads of block {xyz} "
                               "(a barrier inside divergent control flow is undefined behaviour on the "
                               "GPU: move it where every thread of the block reaches it)")
        self.block_epoch[arrived.any(axis=1)] += 1
        self.shared_epoch[arrived.any(axis=1)] += 1
        return mask

    # ---------------------------------------------------------------------------- expressions
    def ev(self, e, sel):
        return getattr(self, "e_" + type(e).__name__)(e, sel)

    def _indices(self, exprs: list, sel) -> list:
        out: list = []
        for e in exprs:
            v = self.ev(e, sel)
            if isinstance(v, tuple):
                out.extend(np.asarray(c).astype(np.int64, copy=False) for c in v)
            else:
                out.append(np.asarray(v).astype(np.int64, copy=False))
        return out

    def _mask_from(self, sel, m) -> np.ndarray:
        if isinstance(sel, slice):
            return np.array(m, dtype=bool)
        full = np.zeros(self.L, bool)
        full[sel[m]] = True
        return full

    def _var(self, v: N.Var) -> Storage:
        st = self.frame.store.get(id(v))
        if st is None:
            st = self.frame.store[id(v)] = Storage(v.type, self.L)
        return st

    def e_Const(self, e: N.Const, sel):
        c = self.consts.get(id(e))
        if c is None:
            c = self.consts[id(e)] = arith.const(e.value, e.type)
        return c

    def e_ReadVar(self, e: N.ReadVar, sel):
        return self._var(e.var).read(sel)

    def e_ParamRef(self, e: N.ParamRef, sel):
        f = self.frame
        if id(e.param) in f.uniform:
            return f.uniform[id(e.param)]
        st = f.store.get(id(e.param))
        if st is None:
            raise self._err(e, f"parameter '{e.param.name}' of {f.fn.name} has no value")
        return st.read(sel)

    def e_SharedArray(self, e: N.SharedArray, sel):
        return self.shared.get(e.alloc)

    def e_BinOp(self, e: N.BinOp, sel):
        return arith.binop(e.op, self.ev(e.lhs, sel), self.ev(e.rhs, sel), e.type)

    def e_UnaryOp(self, e: N.UnaryOp, sel):
        return arith.unary(e.op, self.ev(e.operand, sel), e.type)

    def e_Compare(self, e: N.Compare, sel):
        return arith.compare(e.op, self.ev(e.lhs, sel), self.ev(e.rhs, sel), _scalar(e.lhs.type))

    def e_Cast(self, e: N.Cast, sel):
        return arith.cast(self.ev(e.operand, sel), _scalar(e.operand.type), e.type)

    def e_Logical(self, e: N.Logical, sel):
        n = count(sel, self.L)
        a = vec(self.ev(e.lhs, sel), n).astype(bool)
        need = a if e.op == "and" else ~a     # lanes whose result depends on the right side
        res = a.copy()
        if need.any():
            res[need] = vec(self.ev(e.rhs, subsel(sel, need)), int(need.sum())).astype(bool)
        return res

    def e_IfExp(self, e: N.IfExp, sel):
        n = count(sel, self.L)
        c = vec(self.ev(e.cond, sel), n).astype(bool)
        parts = []
        for side, m in ((e.then, c), (e.else_, ~c)):
            k = int(m.sum())
            parts.append((m, self.ev(side, subsel(sel, m)) if k else None, k))
        return _merge(e.type, n, parts)

    def e_ArrayLen(self, e: N.ArrayLen, sel):
        return np.int64(self.ev(e.array, sel).extents[e.axis])

    def e_Special(self, e: N.Special, sel):
        v = self.lanes.special.get(e.name)
        if v is None:
            raise self._err(e, f"unknown special register {e.name!r}")
        return v[sel] if isinstance(v, np.ndarray) else v

    def e_ThreadIndexValue(self, e: N.ThreadIndexValue, sel):
        return tuple(c[sel] for c in self.lanes.thread_index[e.ndim])

    def e_OwnerIndexValue(self, e: N.OwnerIndexValue, sel):
        if e.width is None:
            return (vec(self.e_Special(N.Special("ctaid.x"), sel), count(sel, self.L)),)
        return (self.lanes.thread_index[1][0][sel] // np.int64(e.width),)

    def e_TupleGet(self, e: N.TupleGet, sel):
        return self.ev(e.value, sel)[e.k]

    def e_MakeTuple(self, e: N.MakeTuple, sel):
        return tuple(self.ev(x, sel) for x in e.elems)

    def e_ChunkValue(self, e: N.ChunkValue, sel):
        return self.lanes.thread_index[1][0][sel] * np.int64(e.n)

    def e_ChunkStart(self, e: N.ChunkStart, sel):
        return self.ev(e.chunk, sel)

    def e_Math(self, e: N.Math, sel):
        return arith.math_fn(e.fn, [self.ev(a, sel) for a in e.args], e.type)

    def e_GetMut(self, e: N.GetMut, sel):
        mem = self.ev(e.array, sel)
        n = count(sel, self.L)
        idx = [vec(i, n) for i in self._indices(e.indices, sel)]
        return SlotValue(mem, idx, mem.in_range(idx))

    def e_SlotCheck(self, e: N.SlotCheck, sel):
        return self.ev(e.slot, sel).ok

    def e_Load(self, e: N.Load, sel):
        mem = self.ev(e.array, sel)
        idx = self._indices(e.indices, sel)
        n = count(sel, self.L)
        lanes = self._lanes_of(sel)
        keep = ~self.exited[lanes]
        idx = [vec(i, n) for i in idx]
        ok = mem.in_range(idx)
        if self.banks is not None or self._watched(mem):
            good = ok & keep
            at, gidx = lanes[good], [i[good] for i in idx]
            self._count_banks(mem, gidx, at, "load", e.loc if e.loc is not N.NOLOC else self.stmt_loc)
            if self._watched(mem):
                self.shared_races.load(mem, mem.element_id(self.lanes.blk[at], gidx), self.gid[at],
                                       self.shared_epoch[self.lanes.blk[at]], e.loc)
        if ok.all() and keep.all():
            return mem.load(self._blk(mem, sel), idx)
        if e.check == "fault":
            self._fault_lanes(mem, idx, ok & keep, keep, lanes, e.site, e)
        else:
            self._require_in_range(mem, idx, ok | ~keep, e)
        good = ok & keep
        out = np.zeros(n, mem.data.dtype)
        out[good] = mem.load(self._blk(mem, lanes[good]), [i[good] for i in idx])
        return out

    def e_Atomic(self, e: N.Atomic, sel):
        mem = self.ev(e.array, sel)
        n = count(sel, self.L)
        idx = [vec(i, n) for i in self._indices(e.indices, sel)]
        args = [vec(arith.as_type(self.ev(a, sel), mem.dtype), n) for a in e.args]
        lanes = self._lanes_of(sel)
        keep = ~self.exited[lanes]
        ok = mem.in_range(idx)
        if e.check == "fault":
            self._fault_lanes(mem, idx, ok & keep, keep, lanes, e.site, e)
        else:
            self._require_in_range(mem, idx, ok | ~keep, e)
        good = ok & keep
        out = np.zeros(n, mem.data.dtype)
        value, cmp = (args[1], args[0]) if e.op == "cas" else (args[0], None)
        out[good] = mem.atomic(e.op, self._blk(mem, lanes[good]), [i[good] for i in idx], value[good],
                               None if cmp is None else cmp[good])
        return out

    def _warp_lanes(self, sel, width: int = 32):
        """(warp-padded positions of the selected lanes, which padded lanes take part, the warps (lane
        groups of `width`) where only some live lanes do — or None)."""
        lanes = self.lanes
        pos = lanes.warp_pos[sel]
        present = np.zeros(len(lanes.exists_padded), bool)
        present[pos] = True
        live = np.zeros(len(lanes.exists_padded), bool)
        live[lanes.warp_pos] = self.live()
        present &= live
        return pos, present, check_converged(present, live, width)

    def e_Warp(self, e: N.Warp, sel):
        lanes = self.lanes
        n = count(sel, self.L)
        args = [vec(self.ev(a, sel), n) for a in e.args]
        pos, present, bad = self._warp_lanes(sel, e.width)
        if bad is not None:
            w = int(bad[0])
            b, first = divmod(w * e.width, lanes.Tp)
            xyz = tuple(int(v) for v in lanes.block_xyz[b])
            who = f"warp {first // 32}" if e.width == 32 else \
                f"the {e.width}-lane group at lanes {first % 32}..{first % 32 + e.width - 1} of warp {first // 32}"
            raise self._err(e, f"warp op '{e.op}' executed by only part of {who} of block "
                               f"{xyz} (warp ops use the full mask: every thread of the warp must "
                               "reach them together; threads skipped by an `if`, a guarded store or "
                               "a loop that ended for them are absent)")
        return warp_op(e.op, pos, present, args, e.type, _scalar(e.args[0].type))

    def e_InlinePtx(self, e, sel):
        """Inline PTX of the tile lowering: run through its `sim` semantics (a row of
        dsl/tile/ptx/table.py, or a callable in hand-built IR) when it has them. A warp-collective statement needs whole warps, as e_Warp does; a per-thread one
        (`sim.per_thread`) runs on the selected lanes. `sim.machine`: it also gets this Machine and the
        lanes (shared/global memory, pending copies)."""
        sim = getattr(e, "sim", None)
        if sim is None:
            raise self._err(e, "inline PTX without CPU semantics cannot be simulated (the tile "
                               "lowering takes each statement from dsl/tile/ptx/table.py)")
        n = count(sel, self.L)
        args = [vec(self.ev(a, sel), n) for a in e.args]
        shared = SHARED_PTX.get(getattr(sim, "family", "")) if self.banks is not None else None
        if shared is not None:                # a thread's shared access: the bank-conflict counts
            loc = e.loc if e.loc is not N.NOLOC else self.stmt_loc
            self.banks.record(*shared, loc, self.lanes.warp_pos[self._lanes_of(sel)], np.asarray(args[0], np.int64))
        if hasattr(sim, "resolve"):        # a table row's semantics, loaded on first use
            sim = sim.resolve()
        extra = (self, self._lanes_of(sel)) if getattr(sim, "machine", False) else ()
        if getattr(sim, "per_thread", False):
            return sim(args, *extra)
        pos, present, bad = self._warp_lanes(sel)
        if bad is not None:
            raise self._err(e, "a warp-collective inline PTX statement was executed by only part of a warp")
        return sim(args, pos, present, *extra)

    def e_SharedAddress(self, e, sel):
        mem = self.ev(e.array, sel)
        return self.addresses.shared_address(mem, self.ev(e.index, sel)).astype(np.uint32)

    def e_GlobalAddress(self, e, sel):
        mem = self.ev(e.array, sel)
        off = mem.element_id(None, self._indices(e.indices, sel))     # byte offset of a global element
        return (self.addresses.global_base(mem) + off).astype(np.uint64)

    def e_Call(self, e: N.Call, sel):
        callee = e.callee
        if len(self.frames) >= MAX_CALL_DEPTH:
            raise self._err(e, f"device function calls nested deeper than {MAX_CALL_DEPTH}")
        if callee.extern_name is not None and not callee.body:
            raise self._err(e, f"extern device function '{callee.extern_name}' cannot be simulated")
        vals = [self.ev(a, sel) for a in e.args]
        frame = Frame(callee, self.L)
        for p, v in zip(callee.params, vals):
            if isinstance(p.type, ArrayType):
                frame.uniform[id(p)] = v
            else:
                st = frame.store[id(p)] = Storage(p.type, self.L)
                st.write(sel, v)
        mask = to_mask(sel, self.L) & ~self.exited
        self.frames.append(frame)
        try:
            self.exec_body(callee.body, mask)
        finally:
            self.frames.pop()
        if frame.retval is None:
            if isinstance(callee.return_type, ScalarType):
                return np.zeros(count(sel, self.L), arith.np_dtype(callee.return_type))
            return None
        return frame.retval.read(sel)

    # ------------------------------------------------------------------------------- checks
    def _fault_lanes(self, mem: MemRef, idx, good, keep, lanes, site: int, node) -> None:
        bad = keep & ~good
        if not bad.any():
            return
        p = int(np.flatnonzero(bad)[0])
        index, extent = mem.first_bad_axis(idx, p)
        self.fault.record(site, mem.name, index, extent, node.loc, self.lanes.describe(int(lanes[p])))
        self._exit(lanes[bad])

    def _require_in_range(self, mem: MemRef, idx, ok, node) -> None:
        if ok.all():
            return
        p = int(np.flatnonzero(~ok)[0])
        index, extent = mem.first_bad_axis(idx, p)
        raise self._err(node, f"unchecked access to '{mem.name}' with index {index} outside extent "
                              f"{extent} (undefined behaviour on the GPU; the compiler believed it in "
                              "range: check the kernel's `requires` relations and boundscheck setting)")


def _scalar(t: Type) -> ScalarType:
    """The scalar type a value computes in (owned chunk positions and the like are INDEX ints)."""
    return t if isinstance(t, ScalarType) else INDEX


def _merge(t: Type, n: int, parts: list):
    """Combine per-side results of a lazy IfExp into one vector over the selected lanes."""
    if isinstance(t, (TupleType, ThreadIndexType)):
        elems = _tuple_elems(t)
        return tuple(_merge(et, n, [(m, None if v is None else v[k], c) for m, v, c in parts])
                     for k, et in enumerate(elems))
    dt = arith.np_dtype(t) if isinstance(t, ScalarType) else np.dtype(np.int64)
    out = np.zeros(n, dt)
    for m, v, k in parts:
        if k:
            out[m] = arith.as_type(v, t) if isinstance(t, ScalarType) else v
    return out


__all__ = ["Machine", "SlotValue", "Storage"]


def _own_shared(mem: MemRef) -> bool:
    """A block's own shared buffer (not a cluster peer's, reached through distributed shared memory)."""
    return mem.shared and getattr(mem, "remote", None) is None
