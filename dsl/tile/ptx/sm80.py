"""CPU semantics of the inline PTX the sm_80 tensor-core lowering emits, so the SIMT simulator runs
exactly what an Ampere/Ada GPU build runs: cp.async copies and their groups, ldmatrix (.trans),
mma.sync on packed registers (f16/bf16 m16n8k16, tf32 m16n8k8, f8 m16n8k32), cvt.rna.tf32, register
packing, 32-bit shared loads, and the predicated vector loads and stores of distributed tiles. Each
is the `sim` of an InlinePtx node (dsl/ir/tile_nodes.py; dispatch in dsl/sim/interp.py); memory goes
through the simulator's address model (dsl/sim/addresses.py).

Fragment layouts follow the PTX ISA ("Matrix fragments for mma.m16n8k16 / m16n8k8", "ldmatrix"):
g = lane / 4, t = lane % 4. Products are summed in f64 and rounded to f32 once (the tensor cores'
summation order differs; results agree to f32 rounding of the sum). sm_90's TMA, mbarriers and
wgmma have theirs in dsl/tile/ptx/sm90.py.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from bridge.settings import env_choice
from dsl.sim import arith
from dsl.sim.addresses import GLOBAL_STEP, AsyncCopies
from dsl.sim.faults import SimulationError
from dsl.tile.ptx.mma_types import operand_type
from dsl.tile.sim import tf32_round

_G, _T = np.arange(32) // 4, np.arange(32) % 4
# element (row, col) of each fragment register / half, in register order
F16_A = [(_G, 2 * _T), (_G, 2 * _T + 1), (_G + 8, 2 * _T), (_G + 8, 2 * _T + 1),
         (_G, 2 * _T + 8), (_G, 2 * _T + 9), (_G + 8, 2 * _T + 8), (_G + 8, 2 * _T + 9)]
F16_B = [(2 * _T, _G), (2 * _T + 1, _G), (2 * _T + 8, _G), (2 * _T + 9, _G)]
TF32_A = [(_G, _T), (_G + 8, _T), (_G, _T + 4), (_G + 8, _T + 4)]
TF32_B = [(_T, _G), (_T + 4, _G)]
# m16n8k32 (f8): register r, byte j of A is row g + 8 (r & 1), column 4t + j + 16 (r >> 1); of B, row
# (k) 4t + j + 16 r, column g
F8_A = [(_G + 8 * (r & 1), 4 * _T + j + 16 * (r >> 1)) for r in range(4) for j in range(4)]
F8_B = [(4 * _T + j + 16 * r, _G) for r in range(2) for j in range(4)]
ACC = [(_G, 2 * _T), (_G, 2 * _T + 1), (_G + 8, 2 * _T), (_G + 8, 2 * _T + 1)]


def semantics(fn: Callable, machine: bool = False, per_thread: bool = False) -> Callable:
    """Mark `fn` as the CPU semantics of an InlinePtx (how dsl/sim/interp.py calls it): `per_thread`
    (on the selected lanes, else on whole warps) and `machine` (it also gets the Machine and lanes)."""
    fn.machine, fn.per_thread = machine, per_thread  # type: ignore[attr-defined]
    return fn


def _padded(values: list, pos: np.ndarray, size: int) -> list[np.ndarray]:
    out = []
    for v in values:
        x = np.zeros(size, np.float64)
        x[pos] = np.asarray(v, np.float64)
        out.append(x.reshape(-1, 32))
    return out


def warp_mma(shape: tuple[int, int, int], a_at: list, b_at: list, a: list, b: list, c: list,
             pos: np.ndarray, present: np.ndarray) -> tuple:
    """D = A @ B + C per warp, each operand given element by element at the lanes' fragment positions."""
    m, k, n = shape
    size = len(present)
    pa, pb, pc = _padded(a, pos, size), _padded(b, pos, size), _padded(c, pos, size)
    warps = size // 32
    A, B, C = np.zeros((warps, m, k)), np.zeros((warps, k, n)), np.zeros((warps, m, n))
    for x, (r, col) in zip(pa, a_at):
        A[:, r, col] = x
    for x, (r, col) in zip(pb, b_at):
        B[:, r, col] = x
    for x, (r, col) in zip(pc, ACC):
        C[:, r, col] = x
    D = (A @ B + C).astype(np.float32)
    return tuple(D[:, r, col].reshape(-1)[pos] for r, col in ACC)


def mma_elements(args: list, pos: np.ndarray, present: np.ndarray) -> tuple:
    """mma.sync m16n8k16 on unpacked 16-bit elements (8 of A, 4 of B) and 4 f32 accumulators."""
    return warp_mma((16, 16, 8), F16_A, F16_B, args[0:8], args[8:12], args[12:16], pos, present)


mma_elements = semantics(mma_elements)


def _halves(reg: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    r = np.asarray(reg, np.uint32)
    lo, hi = (r & 0xFFFF).astype(np.uint16), (r >> 16).astype(np.uint16)
    return lo.view(dtype).astype(np.float64), hi.view(dtype).astype(np.float64)


def _bytes_of(reg: np.ndarray, dtype: np.dtype) -> list[np.ndarray]:
    r = np.asarray(reg, np.uint32)
    return [((r >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8).view(dtype).astype(np.float64)
            for j in range(4)]


def mma_packed(a_type: str, b_type: str) -> Callable:
    """mma.sync on packed registers: 4 of A, 2 of B, 4 f32 accumulators (f16/bf16 k16, tf32 k8, f8
    e4m3/e5m2 k32, the two f8 operands of either type)."""
    if a_type in ("e4m3", "e5m2"):
        da, db = (arith.np_dtype(operand_type(t)) for t in (a_type, b_type))

        def run8(args: list, pos: np.ndarray, present: np.ndarray) -> tuple:
            a = [x for r in args[0:4] for x in _bytes_of(r, da)]
            b = [x for r in args[4:6] for x in _bytes_of(r, db)]
            return warp_mma((16, 32, 8), F8_A, F8_B, a, b, args[6:10], pos, present)
        return semantics(run8)
    tname = a_type
    if tname == "tf32":
        def run(args: list, pos: np.ndarray, present: np.ndarray) -> tuple:
            a = [np.asarray(r, np.uint32).view(np.float32) for r in args[0:4]]
            b = [np.asarray(r, np.uint32).view(np.float32) for r in args[4:6]]
            return warp_mma((16, 8, 8), TF32_A, TF32_B, a, b, args[6:10], pos, present)
        return semantics(run)
    dt = arith.np_dtype(operand_type(tname))

    def run16(args: list, pos: np.ndarray, present: np.ndarray) -> tuple:
        a = [h for r in args[0:4] for h in _halves(r, dt)]
        b = [h for r in args[4:6] for h in _halves(r, dt)]
        return warp_mma((16, 16, 8), F16_A, F16_B, a, b, args[6:10], pos, present)
    return semantics(run16)


# mov.b64.opaque: the value itself
identity = semantics(lambda args: np.asarray(args[0]).copy(), per_thread=True)


def pack_halves(dtype) -> Callable:
    """mov.b32 $0, {lo, hi}: two 16-bit values of `dtype` (an IR type) into one register."""
    dt = arith.np_dtype(dtype)

    def run(args: list) -> np.ndarray:
        lo, hi = (np.asarray(x).astype(dt).view(np.uint16).astype(np.uint32) for x in args)
        return lo | (hi << np.uint32(16))
    return semantics(run, per_thread=True)


def cvt_pack(dtype) -> Callable:
    """cvt.rn.{f16,bf16}x2.f32 $0, hi, lo: two f32 rounded to nearest even into one register."""
    dt = arith.np_dtype(dtype)

    def run(args: list) -> np.ndarray:
        with np.errstate(over="ignore"):            # past the 16-bit range rounds to infinity, as cvt.rn does
            lo, hi = (np.asarray(x, np.float32).astype(dt).view(np.uint16).astype(np.uint32) for x in args)
        return lo | (hi << np.uint32(16))
    return semantics(run, per_thread=True)


cvt_rna_tf32 = semantics(lambda args: tf32_round(np.asarray(args[0], np.uint32).view(np.float32)).view(np.uint32),
                         per_thread=True)


def _ld_shared_b32(args: list, mach, lanes: np.ndarray) -> np.ndarray:
    raw = mach.addresses.shared_read(mach.lanes.blk[lanes], args[0], 4)
    return np.ascontiguousarray(raw).view(np.uint32).reshape(-1)


ld_shared_b32 = semantics(_ld_shared_b32, machine=True, per_thread=True)


def st_shared(nbytes: int) -> Callable:
    """st.shared of `nbytes` (8: .v2.f32 of two f32 operands; 4: .b32 of one packed register) at a
    shared-window address, which must be aligned to its width, as on the GPU."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        addr = np.asarray(args[0]).astype(np.int64)
        if (addr % nbytes).any():
            raise SimulationError(f"simulator: a {nbytes}-byte shared store at an address not aligned to {nbytes} bytes")
        vals = [np.asarray(a) for a in args[1:]]
        raw = np.stack([np.ascontiguousarray(x.astype(np.float32 if x.dtype.kind == "f" else np.uint32)).view(np.uint8)
                        .reshape(-1, 4) for x in vals], axis=1).reshape(len(lanes), nbytes)
        mach.addresses.shared_write(mach.lanes.blk[lanes], addr, raw)
    return semantics(run, machine=True, per_thread=True)


st_shared_8, st_shared_4 = st_shared(8), st_shared(4)


def ext_state(mach, key: str, make: Callable):
    """The inline-PTX state `key` of this batch of blocks in Machine.ext, made on first use."""
    found = mach.ext.get(key)
    if found is None:
        found = mach.ext[key] = make()
    return found


def copies(mach) -> AsyncCopies:
    """The pending cp.async copies of this batch of blocks (made on the first copy). KB_SIM_CP_ASYNC_LANDING:
    "wait" (default) lands each copy at the wait_group that completes it, the latest the hardware may (a
    missing wait reads stale data); "issue" lands it at once, the earliest (a buffer overwritten while a
    product still reads it gives the new data). Tests of a pipeline run both."""
    def make() -> AsyncCopies:
        at_issue = env_choice("KB_SIM_CP_ASYNC_LANDING", ("wait", "issue"), "wait") == "issue"
        return AsyncCopies(mach.L, mach.addresses if at_issue else None)
    return ext_state(mach, "cp.async", make)


def _cp_async(args: list, mach, lanes: np.ndarray) -> None:
    """cp.async.cg 16 bytes with src-size 16 (copy) or 0 (zero fill: the source is not read)."""
    dst, src, size = (np.asarray(a) for a in args)
    data = np.zeros((len(lanes), 16), np.uint8)
    full = size == 16
    if full.any():
        data[full] = mach.addresses.global_read(src[full], 16)
    copies(mach).issue(lanes, mach.lanes.blk[lanes], dst, data)


cp_async = semantics(_cp_async, machine=True, per_thread=True)
# fences, prefetches, barrier initialisation fences: the simulator has one proxy and no caches, so a
# write is visible to the next statement already
no_op = semantics(lambda args: None, per_thread=True)
commit_group = semantics(lambda args, mach, lanes: copies(mach).commit(lanes), machine=True, per_thread=True)


def st_global(nbytes: int) -> Callable:
    """st.global of `nbytes` (8: .v2.f32 of two f32 operands; 4: .b32 of one packed register)."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        vals = [np.asarray(a) for a in args[1:]]
        raw = np.stack([np.ascontiguousarray(x.astype(np.float32 if x.dtype.kind == "f" else np.uint32)).view(np.uint8)
                        .reshape(-1, 4) for x in vals], axis=1).reshape(len(lanes), nbytes)
        mach.addresses.global_write(np.asarray(args[0]), raw)
    return semantics(run, machine=True, per_thread=True)


st_global_8, st_global_4 = st_global(8), st_global(4)


# Vector runs of distributed tiles (dsl/tile/lower/runs.py): like the GPU, the simulator refuses an
# access whose address is not aligned to its width (the host array's own address counts), so a
# lowering that vectorises without the alignment it relies on fails on the CPU too.
def _check_aligned(mach, addr: np.ndarray, nbytes: int) -> None:
    for k in np.unique(addr // GLOBAL_STEP):
        if not 1 <= k <= len(mach.addresses.globals):
            continue                     # global_read/global_write name the bad address
        mem = mach.addresses.globals[int(k) - 1]
        base = int(mem.data.__array_interface__["data"][0])
        off = addr[addr // GLOBAL_STEP == k] - int(k) * GLOBAL_STEP
        if ((base + off) % nbytes).any():
            raise SimulationError(f"simulator: a {nbytes}-byte vector access of argument '{mem.name}' at an "
                                  f"address not aligned to {nbytes} bytes (byte {int(off[(base + off) % nbytes != 0][0])})")


def ld_run(dtype, n: int) -> Callable:
    """ld.global(.nc).vN under a predicate: args (address, predicate, padding) -> n element vectors (one,
    not a tuple, for n 1)."""
    dt = arith.np_dtype(dtype)
    nbytes = n * dt.itemsize

    def run(args: list, mach, lanes: np.ndarray) -> tuple:
        addr = np.asarray(args[0]).astype(np.int64)
        on = np.asarray(args[1]) != 0
        out = np.repeat(np.asarray(args[2]).astype(dt)[:, None], n, axis=1)
        if on.any():
            _check_aligned(mach, addr[on], nbytes)
            raw = mach.addresses.global_read(addr[on], nbytes)
            out[on] = np.ascontiguousarray(raw).view(dt).reshape(-1, n)
        return out[:, 0] if n == 1 else tuple(out[:, i] for i in range(n))
    return semantics(run, machine=True, per_thread=True)


def st_run(dtype, n: int) -> Callable:
    """st.global.vN under a predicate: args (address, predicate, n element vectors)."""
    dt = arith.np_dtype(dtype)
    nbytes = n * dt.itemsize

    def run(args: list, mach, lanes: np.ndarray) -> None:
        addr = np.asarray(args[0]).astype(np.int64)
        on = np.asarray(args[1]) != 0
        if not on.any():
            return
        data = np.stack([np.asarray(a).astype(dt) for a in args[2:]], axis=1)[on]
        _check_aligned(mach, addr[on], nbytes)
        mach.addresses.global_write(addr[on], np.ascontiguousarray(data).view(np.uint8).reshape(-1, nbytes))
    return semantics(run, machine=True, per_thread=True)


def named_barrier(first: int) -> Callable:
    """bar.sync 1, n: the threads from tid.x `first` on (a warp-specialised kernel's consumers) meet;
    every running one of them must arrive, as for sync_threads()."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        arrived = np.zeros(mach.L, bool)
        arrived[lanes] = True
        if mach.partial_barrier(arrived, mach.live() & (mach.lanes.tid_lin >= first)) is not None:
            raise SimulationError("simulator: a named barrier reached by only part of its threads")
        mach.pass_barrier(arrived)
    return semantics(run, machine=True, per_thread=True)


def warpgroup_barrier(first: int) -> Callable:
    """bar.sync 4 + g, 128: the 128 threads of warpgroup g of the tile program (tid.x from `first` on)
    meet; every running thread of each warpgroup that reaches it must, block by block."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        arrived = np.zeros(mach.L, bool)
        arrived[lanes] = True
        rel = mach.lanes.tid_lin - first
        # (block, warpgroup) as one number: a block has at most 8 warpgroups, so 64 a block never overlaps
        key = np.where(rel >= 0, np.arange(mach.L) // mach.lanes.T * 64 + rel // 128, -1)
        want = mach.live() & np.isin(key, np.unique(key[arrived]))
        if mach.partial_barrier(arrived, want) is not None:
            raise SimulationError("simulator: a warpgroup's named barrier reached by only part of its threads")
        mach.pass_barrier(arrived)
    return semantics(run, machine=True, per_thread=True)


def turn_sync(barrier: int) -> Callable:
    """bar.sync b, n of a consumer warpgroup's turn (matmul/pingpong.py): the lock-step simulator runs
    both warpgroups as one instruction stream, so there is nothing to order; the protocol is checked
    against a model of the barriers (interop_tests/dsl_tile/test_tile_pingpong.py); only the shared-race
    epoch moves on (dsl/sim/shared_races.py)."""
    def run(args: list, mach, lanes: np.ndarray) -> None:
        arrived = np.zeros(mach.L, bool)
        arrived[lanes] = True
        mach.pass_barrier(arrived)
    return semantics(run, machine=True, per_thread=True)


def turn_arrive(barrier: int) -> Callable:
    """bar.arrive b, n of a consumer warpgroup's turn: as turn_sync, nothing to order here."""
    return semantics(lambda args, mach, lanes: None, machine=True, per_thread=True)


def wait_group(keep: int) -> Callable:
    return semantics(lambda args, mach, lanes: copies(mach).wait(lanes, keep, mach.addresses),
                 machine=True, per_thread=True)


def ldmatrix(trans: bool) -> Callable:
    """ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lanes 8i..8i+7 give the row addresses of matrix i;
    register i of lane l is row l/4, b16 columns 2(l%4), 2(l%4)+1 of matrix i (.trans: of its
    transpose)."""
    def run(args: list, pos: np.ndarray, present: np.ndarray, mach, lanes: np.ndarray) -> tuple:
        size = len(present)
        addr = np.full(size, int(np.asarray(args[0]).reshape(-1)[0]), np.int64)
        addr[pos] = np.asarray(args[0], np.int64)
        blk = np.repeat(np.arange(size // 32) * 32 // mach.lanes.Tp, 32)
        raw = mach.addresses.shared_read(blk, addr, 16)
        m16 = np.ascontiguousarray(raw).view(np.uint16).reshape(-1, 4, 8, 8)   # warp, matrix, row, column
        w = np.arange(size) // 32
        lane = np.arange(size) % 32
        g, t = lane // 4, lane % 4
        out = []
        for i in range(4):
            if trans:
                lo, hi = m16[w, i, 2 * t, g], m16[w, i, 2 * t + 1, g]
            else:
                lo, hi = m16[w, i, g, 2 * t], m16[w, i, g, 2 * t + 1]
            out.append((lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16)))[pos])
        return tuple(out)
    return semantics(run, machine=True)
