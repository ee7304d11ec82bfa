"""CPU semantics of the sm_90 GEMM loop's inline PTX (dsl/tile/lower/matmul/tma.py, matmul/wgmma.py): TMA bulk
tensor copies into swizzled shared memory, mbarriers with transaction counts, and warpgroup MMA reading
its operands through shared-memory matrix descriptors. With these the SIMT simulator runs what an
sm_90a build of the GEMM loop runs (`simulate_lowered(..., tensor_cores=True, arch="sm_90")`).

How the hardware behaviour is modelled:
- Shared-memory swizzles act on address bits (128B: bits 7-9 into 4-6; 64B: 7-8 into 4-5; 32B: bit 7
  into bit 4), which is why the operand stages are 1024-byte aligned.
- A TMA copy reads its box from the array (zero outside it). KB_SIM_TMA_LANDING says when its swizzled
  rows land and its bytes complete on the mbarrier: "issue" (the default) at once, the earliest the
  hardware may (a stage still read after its next copy was issued then reads the new data); "wait" at
  the first mbarrier wait on that barrier, the latest a synchronised reader may observe (a read of a
  stage without its wait then reads the old data). Tests of a ring run both. An mbarrier phase
  completes when its arrivals and its transaction bytes are both used up; waiting on a phase that
  cannot complete any more (no copy in flight in a lock-step simulation) is a SimulationError: a
  deadlock on the GPU.
- A TMA store (cp.async.bulk.tensor ... global.shared::cta) reads its box from shared memory through the
  map's swizzle and writes the part inside the array; a TMA reduce-add (cp.reduce.async.bulk.tensor
  .add) adds it, element by element in the array's type. Under the same KB_SIM_TMA_LANDING it reads at
  issue, or at the cp.async.bulk.wait_group.read that completes its bulk group (shared memory rewritten
  before that wait then reaches the array); a thread that exits with a store not waited for is a
  SimulationError (its block's shared memory would be gone under the copy).
- Every TMA copy's innermost coordinate must fall on a 16-byte boundary of the array's rows, and its
  shared-memory address on a 128-byte one; a store's or reduce-add's coordinates must not be negative
  (a load's may). Each miss is a SimulationError here, as it is an illegal instruction on the GPU (on
  the H200, 2026-12-05: stores at negative coordinates, and at f16 column 60, 120 bytes in).
- A wgmma is recorded when issued, and its product is read from shared memory and added to the
  accumulators only when a `wgmma.wait_group` completes its group (the accumulators pass through the
  wait), so shared memory rewritten before the wait gives a wrong result here as on the device.
  Operand element (row, k) of a K-major descriptor sits at start + (row / 8) SBO + (row % 8) W +
  k bytes (W the swizzle width); of an MN-major one (k, n) at start + (n / (W / esize)) LBO +
  (k / 8) SBO + (k % 8) W + (n % (W / esize)) esize. tf32 operands keep 10 mantissa bits (the low ones
  are ignored, not rounded). Products are summed in f64 and rounded to f32 once.
The model was checked against the bf16 wgmma + TMA GEMM proven on the H200 (row-major B), whose
results it reproduces; the K-major, tf32 and f8 forms use the same address rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bridge.settings import env_choice
from dsl.sim import arith
from dsl.sim.faults import SimulationError
from dsl.tile.ptx.mma_types import WgmmaOp, operand_type
from dsl.tile.ptx.sm80 import ext_state, semantics

SWIZZLE_BITS = {128: 7, 64: 3, 32: 1}          # mask of address bits 7.. XORed into bits 4..
MODE_WIDTH = {1: 128, 2: 64, 3: 32}             # descriptor swizzle mode -> swizzle width in bytes


def _dtype(tname: str) -> np.dtype:
    """The element dtype of a PTX operand type name ("tf32": f32 storage)."""
    return arith.np_dtype(operand_type(tname))


def swizzle(addr: np.ndarray, width: int) -> np.ndarray:
    return addr ^ (((addr >> 7) & SWIZZLE_BITS[width]) << 4) if width in SWIZZLE_BITS else addr


@dataclass
class _Barrier:
    count: int
    pending: int
    tx: int = 0
    phase: int = 0           # completed phases
    copies: list = field(default_factory=list)    # TMA copies not landed yet: (blk, addresses, bytes)


@dataclass
class _Wgmma:
    groups: list = field(default_factory=list)   # committed groups: lists of (da, db, op) records
    open: list = field(default_factory=list)


class _Bars(dict):
    """(block, address) -> _Barrier of a batch of blocks; at the kernel's end none may still expect
    bytes or hold a copy in flight (a block whose shared memory a TMA copy still writes has exited)."""

    def at_exit(self) -> str | None:
        for (blk, addr), b in self.items():
            if b.copies or b.tx:
                return (f"block {blk} ended with an mbarrier (shared address {addr}) still expecting "
                        f"{b.tx + sum(raw.size for _, _, raw in b.copies)} bytes of TMA copies")
        return None


class _Groups(dict):
    """wgmma groups per warpgroup; at the kernel's end every one must have been waited for."""

    def at_exit(self) -> str | None:
        for key, w in self.items():
            if w.groups or w.open:
                return f"warpgroup {key} ended with {len(w.groups) + bool(w.open)} wgmma group(s) never waited for"
        return None


def _state(mach, name: str, make: Callable) -> dict:
    return ext_state(mach, "sm90." + name, make)


# ----------------------------------------------------------------------------------- mbarriers
def _bars(mach) -> dict:
    return _state(mach, "bars", _Bars)


def _complete(b: _Barrier, mach) -> None:
    if b.pending == 0 and b.tx == 0:
        b.phase += 1
        b.pending = b.count
        roles = mach.ext.get("roles")
        if roles is not None:         # a side waiting on this phase may go on (dsl/sim/roles.py)
            roles.notify()


def mbarrier_init(count: int) -> Callable:
    def run(args: list, mach, lanes: np.ndarray) -> None:
        for blk, addr in zip(mach.lanes.blk[lanes], np.asarray(args[0], np.int64)):
            _bars(mach)[int(blk), int(addr)] = _Barrier(count, count)
    return semantics(run, machine=True, per_thread=True)


def _arrive_expect_tx(args: list, mach, lanes: np.ndarray) -> None:
    for blk, addr, tx in zip(mach.lanes.blk[lanes], np.asarray(args[0], np.int64), np.asarray(args[1], np.int64)):
        b = _barrier(mach, int(blk), int(addr))
        b.tx += int(tx)
        b.pending -= 1
        _complete(b, mach)


def _barrier(mach, blk: int, addr: int) -> _Barrier:
    b = _bars(mach).get((blk, addr))
    if b is None:
        raise SimulationError("simulator: an mbarrier used before mbarrier.init")
    return b


def _land(b: _Barrier, mach) -> None:
    """Land the TMA copies still in flight on `b` (KB_SIM_TMA_LANDING=wait) and complete their bytes."""
    copies, b.copies = b.copies, []
    for blk, phys, raw in copies:
        mach.addresses.shared_write(blk, phys, raw[:, None])
        b.tx -= raw.size
    if copies:
        _complete(b, mach)


def _try_wait_parity(args: list, mach, lanes: np.ndarray) -> None:
    """Spin until the phase of parity `parity` has completed. In lock-step it must have already; in a
    concurrent role (dsl/sim/roles.py) the other roles run until it has, or all wait: a deadlock."""
    waits = [(_barrier(mach, int(blk), int(addr)), int(par)) for blk, addr, par in
             zip(mach.lanes.blk[lanes], np.asarray(args[0], np.int64), np.asarray(args[1], np.int64))]

    def ready() -> bool:        # phase `par` (mod 2) completed
        for b, _ in waits:
            _land(b, mach)
        return all((b.phase & 1) != par for b, par in waits)
    roles = mach.ext.get("roles")
    if roles is not None:
        roles.wait_until(ready)
    elif not ready():
        raise SimulationError("simulator: waiting on an mbarrier phase that never completes (a deadlock "
                              "on the GPU: the copies or arrivals it waits for were never issued)")


def _arrive(args: list, mach, lanes: np.ndarray) -> None:
    for blk, addr in zip(mach.lanes.blk[lanes], np.asarray(args[0], np.int64)):
        b = _barrier(mach, int(blk), int(addr))
        b.pending -= 1
        _complete(b, mach)


arrive = semantics(_arrive, machine=True, per_thread=True)
arrive_expect_tx = semantics(_arrive_expect_tx, machine=True, per_thread=True)
try_wait_parity = semantics(_try_wait_parity, machine=True, per_thread=True)


# ----------------------------------------------------------------------------------------- TMA
def _check_copy(what: str, tmap, c0: int, c1: int, smem: int, store: bool = False) -> None:
    """The alignment a TMA copy needs, or the SimulationError the GPU's illegal instruction becomes."""
    itemsize = tmap.mem.data.dtype.itemsize
    if (c0 * itemsize) % 16:
        raise SimulationError(f"simulator: {what} at innermost coordinate {c0} starts {c0 * itemsize} bytes into "
                              f"a row, not on a 16-byte boundary (an illegal instruction on the GPU)")
    if store and min(c0, c1) < 0:
        raise SimulationError(f"simulator: {what} at coordinates ({c0}, {c1}): a store may not start before the "
                              f"array (an illegal instruction on the GPU; a load may, reading zeros)")
    if smem % 128:
        raise SimulationError(f"simulator: {what} with shared-memory address {smem}, not a multiple of 128 "
                              f"bytes (an illegal instruction on the GPU)")


def _tma_load_2d(args: list, mach, lanes: np.ndarray) -> None:
    """cp.async.bulk.tensor.2d ... [dst], [map, {c0, c1}], [bar]: box rows c1.., columns c0.."""
    for k, lane in enumerate(lanes):
        dst, tmap = int(np.asarray(args[0])[k]), np.asarray(args[1], dtype=object).reshape(-1)[k]
        c0, c1, bar = (int(np.asarray(a).reshape(-1)[k]) for a in args[2:5])
        _check_copy("a TMA load", tmap, c0, c1, dst)
        rows, cols = tmap.box
        data = tmap.mem.data
        box = np.zeros((rows, cols), data.dtype)
        r_hi, c_hi = min(data.shape[0], c1 + rows), min(data.shape[1], c0 + cols)
        if r_hi > max(c1, 0) and c_hi > max(c0, 0):
            box[max(c1, 0) - c1:r_hi - c1, max(c0, 0) - c0:c_hi - c0] = data[max(c1, 0):r_hi, max(c0, 0):c_hi]
        raw = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
        linear = dst + np.arange(raw.size, dtype=np.int64)
        phys = swizzle(linear, tmap.swizzle) if tmap.swizzle else linear
        blk = int(mach.lanes.blk[lane])
        b = _barrier(mach, blk, bar)
        b.copies.append((blk, phys, raw))
        if not _lands_at_wait(mach):
            _land(b, mach)
            continue
        roles = mach.ext.get("roles")
        if roles is not None:         # a side waiting on this barrier may now land it and go on
            roles.notify()


def _lands_at_wait(mach) -> bool:
    """KB_SIM_TMA_LANDING ("issue", the default, or "wait"), read once per simulated batch of blocks."""
    return ext_state(mach, "tma.landing",
                     lambda: env_choice("KB_SIM_TMA_LANDING", ("issue", "wait"), "issue") == "wait")


tma_load_2d = semantics(_tma_load_2d, machine=True, per_thread=True)


# --------------------------------------------------------------------------------- TMA stores
@dataclass
class _BulkStore:
    blk: int
    tmap: object
    c0: int
    c1: int
    src: int
    add: bool = False         # a reduce-add (cp.reduce.async.bulk.tensor .add), not a store


class _BulkGroups(dict):
    """lane -> (open stores, committed groups) of cp.async.bulk TMA stores; at the kernel's end no
    thread may have one its wait_group.read has not passed (the block's shared memory, which the copy
    engine may still be reading, is gone when it exits)."""

    def at_exit(self) -> str | None:
        for lane, (opened, groups) in self.items():
            if opened or groups:
                return (f"thread {lane} ended with {len(opened) + sum(map(len, groups))} TMA store(s) its "
                        f"cp.async.bulk.wait_group.read never waited for")
        return None


def _bulk(mach) -> _BulkGroups:
    return _state(mach, "bulk", _BulkGroups)


def _store_box(st: _BulkStore, mach) -> None:
    """Read the box from shared memory (through the map's swizzle) and write the part of it inside
    the array: a TMA store skips box elements past the array's edges."""
    rows, cols = st.tmap.box
    data = st.tmap.mem.data
    nbytes = rows * cols * data.dtype.itemsize
    linear = st.src + np.arange(nbytes, dtype=np.int64)
    phys = swizzle(linear, st.tmap.swizzle) if st.tmap.swizzle else linear
    raw = mach.addresses.shared_read(st.blk, phys, 1).reshape(-1)
    box = np.ascontiguousarray(raw).view(data.dtype).reshape(rows, cols)
    r_lo, c_lo = max(st.c1, 0), max(st.c0, 0)
    r_hi, c_hi = min(data.shape[0], st.c1 + rows), min(data.shape[1], st.c0 + cols)
    if r_hi > r_lo and c_hi > c_lo:
        part = box[r_lo - st.c1:r_hi - st.c1, c_lo - st.c0:c_hi - st.c0]
        if st.add:            # each element one atomic add in the array's type
            data[r_lo:r_hi, c_lo:c_hi] = (data[r_lo:r_hi, c_lo:c_hi] + part).astype(data.dtype)
        else:
            data[r_lo:r_hi, c_lo:c_hi] = part


def _bulk_copy(add: bool) -> Callable:
    """cp.async.bulk.tensor.2d.global.shared::cta [map, {c0, c1}], [src] (`add`: cp.reduce ... .add):
    box rows c1.., columns c0.. Under KB_SIM_TMA_LANDING=issue (the default) the box is read from
    shared memory at once, the earliest the copy engine may; under "wait" at the wait_group.read that
    completes it, the latest (shared memory rewritten before that wait then shows in the array, as it
    may on the GPU)."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        for k, lane in enumerate(lanes):
            tmap = np.asarray(args[0], dtype=object).reshape(-1)[k]
            c0, c1, src = (int(np.asarray(a).reshape(-1)[k]) for a in args[1:4])
            _check_copy("a TMA reduce-add" if add else "a TMA store", tmap, c0, c1, src, store=True)
            st = _BulkStore(int(mach.lanes.blk[lane]), tmap, c0, c1, src, add)
            if not _lands_at_wait(mach):
                _store_box(st, mach)
            _bulk(mach).setdefault(int(lane), ([], []))[0].append(st)
    return semantics(run, machine=True, per_thread=True)


def _bulk_commit(args: list, mach, lanes: np.ndarray) -> None:
    for lane in lanes:
        opened, groups = _bulk(mach).setdefault(int(lane), ([], []))
        groups.append(list(opened))
        opened.clear()


def bulk_wait_read(keep: int) -> Callable:
    """cp.async.bulk.wait_group.read `keep`: all but the `keep` newest bulk groups of the thread have
    read their shared memory (under KB_SIM_TMA_LANDING=wait their stores happen here)."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        for lane in lanes:
            _, groups = _bulk(mach).setdefault(int(lane), ([], []))
            done = groups[:max(0, len(groups) - keep)]
            del groups[:len(done)]
            if _lands_at_wait(mach):
                for group in done:
                    for st in group:
                        _store_box(st, mach)
    return semantics(run, machine=True, per_thread=True)


tma_store_2d, tma_reduce_add_2d = _bulk_copy(False), _bulk_copy(True)
bulk_commit = semantics(_bulk_commit, machine=True, per_thread=True)


# --------------------------------------------------------------------------------------- wgmma


def descriptor(lo: int, hi: int) -> Callable:
    """wgmma.desc: the 64-bit descriptor {start field + lo, hi}."""
    def run(args: list) -> np.ndarray:
        low = (np.asarray(args[0], np.uint64) + np.uint64(lo)) & np.uint64(0xFFFFFFFF)
        return low | (np.uint64(hi) << np.uint64(32))
    return semantics(run, per_thread=True)


def _decode(desc: int) -> tuple[int, int, int, int]:
    """(start, LBO, SBO, swizzle width) of a wgmma matrix descriptor."""
    return (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4, \
        MODE_WIDTH.get(desc >> 62, 0)


def _read(mach, blk: int, addr: np.ndarray, dtype: np.dtype, tname: str) -> np.ndarray:
    es = dtype.itemsize
    raw = mach.addresses.shared_read(blk, addr.reshape(-1), es)
    vals = np.ascontiguousarray(raw).view(dtype).reshape(addr.shape)
    if tname == "tf32":        # the tensor cores read 10 mantissa bits and ignore the rest
        vals = (vals.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return vals.astype(np.float64)


def _operand_kmajor(mach, blk: int, desc: int, rows: int, kbytes: int, tname: str) -> np.ndarray:
    start, _, sbo, width = _decode(desc)
    dt = _dtype(tname)
    es = dt.itemsize
    r = np.arange(rows)[:, None]
    kb = (np.arange(kbytes // es) * es)[None, :]
    addr = start + (r // 8) * sbo + (r % 8) * width + kb
    return _read(mach, blk, swizzle(addr, width), dt, tname)           # [rows, k]


def _operand_mnmajor(mach, blk: int, desc: int, n: int, k: int, tname: str) -> np.ndarray:
    start, lbo, sbo, width = _decode(desc)
    dt = _dtype(tname)
    es = dt.itemsize
    per = width // es
    kk = np.arange(k)[:, None]
    nn = np.arange(n)[None, :]
    addr = start + (nn // per) * lbo + (kk // 8) * sbo + (kk % 8) * width + (nn % per) * es
    return _read(mach, blk, swizzle(addr, width), dt, tname)           # [k, n]


def _register_a(regs: list, at: np.ndarray, pos: np.ndarray, tp: int, tname: str) -> np.ndarray:
    """The 64 x 16 A operand of a register-A wgmma from its warpgroup's lanes `at`: warp w holds rows
    16w.., its registers packed 16-bit pairs at mma.m16n8k16's A positions (g, 2t) (g+8, 2t) (g, 2t+8)
    (g+8, 2t+8), the low half first."""
    dt = _dtype(tname)
    lane = (pos[at] % tp) % 128
    w, g, t = lane // 32, (lane % 32) // 4, lane % 4
    a = np.zeros((64, 16))
    for i, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        r = np.asarray(regs[i], np.uint32)[at]
        lo, hi = (x.astype(np.uint16).view(dt).astype(np.float64) for x in (r & 0xFFFF, r >> 16))
        a[16 * w + g + dr, 2 * t + dc] = lo
        a[16 * w + g + dr, 2 * t + dc + 1] = hi
    return a


def _product(mach, blk: int, da, db: int, op: WgmmaOp) -> np.ndarray:
    """The 64 x n product of one wgmma (32 bytes of K); `da`: A's descriptor, or A itself (a_regs)."""
    ea = _dtype(op.a_type).itemsize
    k = 32 // ea
    if op.a_regs:
        a = da
    elif op.trans_a:                            # MN-major A: [k, 64] in shared memory
        a = _operand_mnmajor(mach, blk, da, 64, k, op.a_type).T
    else:
        a = _operand_kmajor(mach, blk, da, 64, 32, op.a_type)   # [64, k]
    b = _operand_mnmajor(mach, blk, db, op.n, k, op.b_type) if op.trans_b else \
        _operand_kmajor(mach, blk, db, op.n, 32, op.b_type).T             # [k, n]
    return a @ b


def _groups(mach) -> dict:
    return _state(mach, "wgmma", _Groups)


def _warpgroups(mach, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tp = mach.lanes.Tp
    return pos // tp, (pos % tp) // 128


def wgmma(op: WgmmaOp) -> Callable:
    """Record the wgmma for its warpgroup (args: A and B descriptors, scale-d, accumulators); the
    accumulators pass through unchanged until the wait that completes the group."""
    def run(args: list, pos: np.ndarray, present: np.ndarray, mach, lanes: np.ndarray) -> tuple:
        blk, wg = _warpgroups(mach, pos)
        first = 4 if op.a_regs else 1          # A: 4 registers, or one descriptor
        db = np.asarray(args[first], np.uint64)
        if not np.all(np.asarray(args[first + 1]) != 0):
            raise SimulationError("simulator: wgmma with scale-d 0 is not modelled")
        for key in set(zip(blk.tolist(), wg.tolist())):
            at = np.flatnonzero((blk == key[0]) & (wg == key[1]))
            if len(at) != 128:
                raise SimulationError("simulator: a wgmma executed by only part of a warpgroup")
            da = _register_a(args[0:4], at, pos, mach.lanes.Tp, op.a_type) if op.a_regs else \
                int(np.asarray(args[0], np.uint64)[at[0]])
            _groups(mach).setdefault(key, _Wgmma()).open.append((da, int(db[at[0]]), op))
        return tuple(np.asarray(a, np.float32) for a in args[first + 2:])
    return semantics(run, machine=True)


def _commit(args: list, pos: np.ndarray, present: np.ndarray, mach, lanes: np.ndarray) -> None:
    blk, wg = _warpgroups(mach, pos)
    for key in set(zip(blk.tolist(), wg.tolist())):
        st = _groups(mach).setdefault(key, _Wgmma())
        st.groups.append(st.open)
        st.open = []


wgmma_commit = semantics(_commit, machine=True)

# wgmma.fence with the registers it orders passed through (tied operands): unchanged values
wgmma_fence = semantics(lambda args, pos, present: tuple(np.asarray(a) for a in args))


def wgmma_wait(keep: int) -> Callable:
    """wgmma.wait_group `keep`: complete all but the `keep` newest groups of each warpgroup, adding
    their products (read from shared memory now) to the accumulators passing through: n/2 registers
    a slice of the warpgroup's rows, in slice order (WgmmaOp.slice), each slice its products' sum."""
    def run(args: list, pos: np.ndarray, present: np.ndarray, mach, lanes: np.ndarray) -> tuple:
        blk, wg = _warpgroups(mach, pos)
        out = [np.asarray(a, np.float64).copy() for a in args]
        n_regs = len(out)
        lane_in_wg = (pos % mach.lanes.Tp) % 128
        warp, g, t = lane_in_wg // 32, (lane_in_wg % 32) // 4, lane_in_wg % 4
        for key in set(zip(blk.tolist(), wg.tolist())):
            st = _groups(mach).get(key)
            if st is None:
                continue
            done = st.groups[:max(0, len(st.groups) - keep)]
            st.groups = st.groups[len(done):]
            if not done:
                continue
            totals: dict[int, np.ndarray] = {}
            per = n_regs
            for group in done:
                for da, db, op in group:
                    p = _product(mach, key[0], da, db, op)
                    totals[op.slice] = p if op.slice not in totals else totals[op.slice] + p
                    per = op.n // 2
            at = np.flatnonzero((blk == key[0]) & (wg == key[1]))
            for i in range(n_regs):
                s, j = divmod(i, per)
                if s not in totals:
                    continue
                row = 16 * warp[at] + g[at] + 8 * ((j % 4) >= 2)
                col = 8 * (j // 4) + 2 * t[at] + (j % 2)
                out[i][at] += totals[s][row, col]
        return tuple(x.astype(np.float32) for x in out)
    return semantics(run, machine=True)
