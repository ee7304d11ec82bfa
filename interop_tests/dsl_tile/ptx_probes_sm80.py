"""Probes of the sm_70..sm_89 rows of the PTX table: stores, shared loads, cp.async groups, register
packing, tf32 rounding, ldmatrix, mma.sync, the named barrier and the predicated vector runs. Each reference is NumPy, from the PTX
ISA's description of the instruction (fragment layouts: "Matrix fragments for mma.m16n8k16 / m16n8k8 /
m16n8k32", "ldmatrix"), never from dsl/tile/ptx/sm80.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import ptx_probe_kit as kit
from ptx_probe_kit import Builder, Probe, binop, c32, cu

from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, F64, I32, I64, U16, U32
from dsl.ir import nodes as N

SENTINEL = 0xDEADBEEF


def gaddr(arr: N.Expr, idx: N.Expr) -> TN.GlobalAddress:
    return TN.GlobalAddress(arr, [N.Cast(idx, I64)])


def finite_bits(rng, n: int, dtype) -> np.ndarray:
    """Random bit patterns of a float dtype with every exponent but the all-ones one (no inf/NaN):
    zeros, subnormals and both signs included."""
    dt = np.dtype(dtype)
    info = {2: (np.uint16, 10 if dt == np.float16 else 7, 0x7FFF), 4: (np.uint32, 23, 0x7FFFFFFF)}
    ut, mant, mag = info[dt.itemsize]
    bits = rng.integers(0, 1 << (8 * dt.itemsize), n, dtype=np.uint64).astype(ut)
    top = ut(mag & ~((1 << mant) - 1))
    bits[(bits & top) == top] ^= ut(1 << mant)       # an all-ones exponent loses its lowest bit
    return bits.view(dt)


# ------------------------------------------------------------------------------ global stores
def _store_v2(dtype, family: str) -> Probe:
    n = 64

    def build(b: Builder) -> None:
        x, y, at = b.array("x", dtype), b.array("y", dtype), b.array("at", I32)
        out = b.array("out", dtype, out=True)
        slot = binop("mul", b.load(at, b.tid), c32(2))
        b.asm(family, [gaddr(out, slot), b.load(x, b.tid), b.load(y, b.tid)])

    def inputs(rng):
        if dtype == F32:
            x, y = finite_bits(rng, n, np.float32), finite_bits(rng, n, np.float32)
        else:
            x, y = rng.integers(0, 1 << 32, (2, n), dtype=np.uint64).astype(np.uint32)
        return {"x": x, "y": y, "at": rng.permutation(n).astype(np.int32),
                "out": np.full(2 * n, SENTINEL, np.uint32).view(kit.np_dtype(dtype))}

    def reference(a):
        out = a["out"].copy()
        out[2 * a["at"]], out[2 * a["at"] + 1] = a["x"], a["y"]
        return {"out": out}
    return Probe(family, n, build, inputs, reference)


def _pair_into_register(family: str, src, dtype):
    """A probe body: `family` of (lo[t], hi[t]) (arrays of `src`) into one register of two `dtype`
    halves, stored with st.global.b32 at out[at[t]], a permuted slot."""
    def build(b: Builder) -> None:
        lo, hi, at = b.array("lo", src), b.array("hi", src), b.array("at", I32)
        out = b.array("out", U32, out=True)
        (reg,) = b.value(family, [b.load(lo, b.tid), b.load(hi, b.tid)], dtype=dtype)
        b.asm("st.global.b32", [gaddr(out, b.load(at, b.tid)), reg])
    return build


def _opaque() -> Probe:
    """mov.b64.opaque of x[t] (64-bit, both halves random), stored with the thread's offset added after it."""
    n = 64

    def build(b: Builder) -> None:
        x, out = b.array("x", I64), b.array("out", I64, out=True)
        (kept,) = b.value("mov.b64.opaque", [b.load(x, b.tid)])
        b.store(out, b.tid, binop("add", kept, N.Cast(b.tid, I64)))

    def inputs(rng):
        return {"x": rng.integers(-(1 << 62), 1 << 62, n, dtype=np.int64), "out": np.zeros(n, np.int64)}

    def reference(a):
        return {"out": a["x"] + np.arange(n, dtype=np.int64)}
    return Probe("mov.b64.opaque", n, build, inputs, reference)


def _pack_store(dtype) -> Probe:
    """mov.b32 {lo, hi} of two 16-bit values, stored with st.global.b32 at a permuted address."""
    n = 64
    build = _pair_into_register("mov.b32.pack", dtype, dtype)

    npd = kit.np_dtype(dtype)

    def inputs(rng):
        return {"lo": finite_bits(rng, n, npd), "hi": finite_bits(rng, n, npd),
                "at": rng.permutation(n).astype(np.int32), "out": np.full(n, SENTINEL, np.uint32)}

    def reference(a):
        out = a["out"].copy()
        lo, hi = (a[k].view(np.uint16).astype(np.uint32) for k in ("lo", "hi"))
        out[a["at"]] = lo | (hi << 16)                # the first operand in the low half
        return {"out": out}
    return Probe(f"mov.b32.pack-{dtype.name}", n, build, inputs, reference)


def _vector_run(dtype, n: int, nc: bool, hint: str = "none") -> Probe:
    """ld.global.run of n elements from a permuted 16-byte-aligned slot where `on`, else the lane's
    padding (`hint`: the load's cache qualifiers, which change no value); st.global.run of them to the
    lane's slot where `keep` (elsewhere the sentinel stays)."""
    lanes = 64
    npd = kit.np_dtype(dtype)

    def build(b: Builder) -> None:
        src, at, on, pad = b.array("src", dtype), b.array("at", I32), b.array("on", I32), b.array("pad", dtype)
        keep, out = b.array("keep", I32), b.array("out", dtype, out=True)
        vals = b.value("ld.global.run", [gaddr(src, binop("mul", b.load(at, b.tid), c32(n))), b.load(on, b.tid),
                                         b.load(pad, b.tid)], dtype=dtype, n=n, nc=nc, hint=hint)
        b.asm("st.global.run", [gaddr(out, binop("mul", b.tid, c32(n))), b.load(keep, b.tid), *vals], dtype=dtype, n=n)

    def values(rng, count):
        if dtype.is_float and npd.itemsize < 8:
            return finite_bits(rng, count, npd)
        if dtype.is_float:
            return rng.standard_normal(count)
        return rng.integers(np.iinfo(npd).min, np.iinfo(npd).max, count, dtype=npd)

    def inputs(rng):
        src = kit.aligned(lanes * n, npd, 16)
        src[:] = values(rng, lanes * n)
        out = kit.aligned(lanes * n, npd, 16)
        out[:] = values(rng, lanes * n)                          # the sentinel where nothing is stored
        return {"src": src, "at": rng.permutation(lanes).astype(np.int32),
                "on": rng.integers(0, 2, lanes, dtype=np.int32), "pad": values(rng, lanes),
                "keep": (rng.integers(0, 4, lanes) != 0).astype(np.int32), "out": out}

    def reference(a):
        got = np.where(a["on"][:, None] != 0, a["src"].reshape(lanes, n)[a["at"]], a["pad"][:, None])
        out = np.where(a["keep"][:, None] != 0, got, a["out"].reshape(lanes, n))
        return {"out": out.reshape(-1).astype(npd)}
    tag = "" if hint == "none" else "-" + hint.replace("::", "_").replace(".", "-")
    return Probe(f"vector-run-{dtype.name}x{n}{'-nc' if nc else ''}{tag}", lanes, build, inputs, reference)


# ------------------------------------------------------------------------------ shared memory
def _ld_shared() -> Probe:
    n = 64

    def build(b: Builder) -> None:
        src, at, out = b.array("src", U32), b.array("at", I32), b.array("out", U32, out=True)
        sh = b.shared_array("words", U32, n)
        b.store(sh, b.tid, b.load(src, b.tid))
        b.sync()
        (w,) = b.value("ld.shared.b32", [TN.SharedAddress(sh, N.Cast(b.load(at, b.tid), I64))])
        b.store(out, b.tid, w)

    def inputs(rng):
        return {"src": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                "at": rng.permutation(n).astype(np.int32), "out": np.full(n, SENTINEL, np.uint32)}
    return Probe("ld.shared.b32", n, build, inputs, lambda a: {"out": a["src"][a["at"]]})


def _cp_async() -> Probe:
    """Two groups of 16-byte copies (lane t: source chunk at[g][t], src-size 16 or 0 = zero fill) into
    shared memory prefilled with a sentinel; wait_group 1 completes the first group (read then), wait_group
    0 the second. Each lane reads only its own copies, so the per-thread waits are all it needs."""
    n = 64

    def build(b: Builder) -> None:
        src, at, size = b.array("src", U32), b.array("at", I32), b.array("size", I32)
        out = b.array("out", U32, out=True)
        sh = b.shared_array("chunks", U32, 2 * n * 4)
        for g in range(2):
            for j in range(4):
                b.store(sh, binop("add", b.lane_index(4, j), c32(g * n * 4)), cu(SENTINEL))
        b.sync()
        for g in range(2):
            mine = binop("add", b.tid, c32(g * n))
            src_chunk = b.load(at, mine)
            b.asm("cp.async.cg", [TN.SharedAddress(sh, N.Cast(binop("mul", mine, c32(4)), I64)),
                                  gaddr(src, binop("mul", src_chunk, c32(4))), N.Cast(b.load(size, mine), U32)])
            b.asm("cp.async.commit_group")
        for g, keep in ((0, 1), (1, 0)):
            b.asm("cp.async.wait_group", keep=keep)
            for j in range(4):
                k = binop("add", b.lane_index(4, j), c32(g * n * 4))
                b.store(out, k, b.load(sh, k))

    def inputs(rng):
        chunks = 3 * n
        return {"src": rng.integers(0, 1 << 32, chunks * 4, dtype=np.uint64).astype(np.uint32),
                "at": rng.choice(chunks, 2 * n, replace=False).astype(np.int32),
                "size": np.where(rng.random(2 * n) < 0.25, 0, 16).astype(np.int32),
                "out": np.full(2 * n * 4, 7, np.uint32)}

    def reference(a):
        words = a["src"].reshape(-1, 4)[a["at"]]          # [copy, 4] the 16 bytes each copy reads
        words[a["size"] == 0] = 0                          # src-size 0: zero filled
        return {"out": words.reshape(-1)}
    return Probe("cp.async", n, build, inputs, reference)


# ------------------------------------------------------------------------------ conversions
def tf32_rna(bits: np.ndarray) -> np.ndarray:
    """f32 bits -> tf32 bits: keep 10 mantissa bits, rounding the 13 dropped ones to nearest with ties
    away from zero (on the magnitude: add half an ulp, then truncate; a carry runs into the exponent)."""
    return (bits.astype(np.uint64) + 0x1000).astype(np.uint32) & np.uint32(0xFFFFE000)


def _cvt_tf32(edges: bool) -> Probe:
    """edges=False: normal values whose rounding stays normal, a third of them exact ties (low 13 bits
    0x1000) and neighbours of ties; edges=True: any finite f32 (zeros, subnormals, the top binade that
    rounds to infinity)."""
    n = 128

    def build(b: Builder) -> None:
        x, out = b.array("x", U32), b.array("out", U32, out=True)
        (r,) = b.value("cvt.rna.tf32.f32", [b.load(x, b.tid)])
        b.store(out, b.tid, r)

    def inputs(rng):
        bits = finite_bits(rng, n, np.float32).view(np.uint32)
        if not edges:
            exp = rng.integers(1, 254, n).astype(np.uint32) << np.uint32(23)
            bits = (bits & np.uint32(0x807FFFFF)) | exp
            low = np.array([0x1000, 0x0FFF, 0x1001, 0x0000, 0x1FFF], np.uint32)[rng.integers(0, 5, n)]
            pick = rng.random(n) < 0.6
            bits[pick] = (bits[pick] & np.uint32(0xFFFFE000)) | low[pick]
        return {"x": bits, "out": np.full(n, SENTINEL, np.uint32)}
    return Probe("cvt.rna.tf32" + ("-edges" if edges else ""), n, build, inputs,
                 lambda a: {"out": tf32_rna(a["x"])})


def bf16_rne_bits(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 bits, round to nearest even, written from the definition: add 0x7FFF plus the
    kept part's lowest bit, drop the low 16 bits (a finite value past the largest rounds to infinity)."""
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) & np.uint32(0xFFFF)


def _cvt_pack(dtype) -> Probe:
    """cvt.rn.{f16,bf16}x2.f32 of (lo[t], hi[t]), stored at a permuted slot. Inputs: f32 around the
    16-bit type's range (its subnormals, ties at the rounding bit, values that round to infinity)."""
    n = 128
    build = _pair_into_register("cvt.rn.pack", F32, dtype)
    drop = 13 if dtype == F16 else 16           # f32 mantissa bits the 16-bit type drops

    def values(rng):
        bits = finite_bits(rng, n, np.float32).view(np.uint32)
        lo_exp, hi_exp = (127 - 26, 127 + 17) if dtype == F16 else (1, 254)
        exp = rng.integers(lo_exp, hi_exp, n).astype(np.uint32) << np.uint32(23)
        bits = (bits & np.uint32(0x807FFFFF)) | exp
        tie = rng.random(n) < 0.3                   # exactly half-way, or either side of it
        half = np.uint32(1 << (drop - 1))
        low = np.array([half, half - 1, half + 1], np.uint32)[rng.integers(0, 3, n)]
        bits[tie] = (bits[tie] & ~np.uint32((1 << drop) - 1)) | low[tie]
        return bits.view(np.float32)

    def inputs(rng):
        return {"lo": values(rng), "hi": values(rng), "at": rng.permutation(n).astype(np.int32),
                "out": np.full(n, SENTINEL, np.uint32)}

    def reference(a):
        out = a["out"].copy()
        if dtype == F16:
            with np.errstate(over="ignore"):        # the inputs that round to infinity, on purpose
                lo, hi = (a[k].astype(np.float16).view(np.uint16).astype(np.uint32) for k in ("lo", "hi"))
        else:
            lo, hi = bf16_rne_bits(a["lo"]), bf16_rne_bits(a["hi"])
        out[a["at"]] = lo | (hi << 16)                # the first operand in the low half
        return {"out": out}
    return Probe(f"cvt.rn.pack-{dtype.name}", n, build, inputs, reference)


# ------------------------------------------------------------------------------ ldmatrix
def _ldmatrix(trans: bool) -> Probe:
    """Lanes store 32 rows of 8 b16 to shared memory; lane l then gives the address of stored row
    rows[l] as row l % 8 of matrix l / 8. Each lane's 4 registers go to out[l, 0..3]."""
    def build(b: Builder) -> None:
        src, rows, out = b.array("src", U16), b.array("rows", I32), b.array("out", U32, out=True)
        sh = b.shared_array("tiles", U16, 32 * 8)
        for j in range(8):
            k = b.lane_index(8, j)
            b.store(sh, k, b.load(src, k))
        b.sync()
        start = binop("mul", b.load(rows, b.tid), c32(8))
        regs = b.value("ldmatrix.x4", [TN.SharedAddress(sh, N.Cast(start, I64))], trans=trans)
        for i, r in enumerate(regs):
            b.store(out, b.lane_index(4, i), r)

    def inputs(rng):
        return {"src": rng.integers(0, 1 << 16, 256, dtype=np.uint64).astype(np.uint16),
                "rows": rng.permutation(32).astype(np.int32), "out": np.full(128, SENTINEL, np.uint32)}

    def reference(a):
        m = a["src"].reshape(32, 8)[a["rows"]].reshape(4, 8, 8).astype(np.uint32)   # matrix, row, col
        lane = np.arange(32)
        g, t = lane // 4, lane % 4
        out = np.zeros((32, 4), np.uint32)
        for i in range(4):
            if trans:     # lane l: elements (2t, g), (2t+1, g) of matrix i
                lo, hi = m[i, 2 * t, g], m[i, 2 * t + 1, g]
            else:         # lane l: elements (g, 2t), (g, 2t+1)
                lo, hi = m[i, g, 2 * t], m[i, g, 2 * t + 1]
            out[:, i] = lo | (hi << 16)
        return {"out": out.reshape(-1)}
    return Probe(f"ldmatrix.x4{'.trans' if trans else ''}", 32, build, inputs, reference)


# ------------------------------------------------------------------------------ mma.sync
_KIND = {"f16": (16, np.float16), "bf16": (16, ml_dtypes.bfloat16), "tf32": (8, np.float32),
         "e4m3": (32, ml_dtypes.float8_e4m3fn), "e5m2": (32, ml_dtypes.float8_e5m2)}


def fragment(tname: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [32 lanes, elements in register order] of an m16n8k* mma.sync operand (PTX ISA
    "Matrix fragments for mma.m16n8k16 / m16n8k8 / m16n8k32"); g = lane / 4, t = lane % 4."""
    lane = np.arange(32)[:, None]
    g, t = lane // 4, lane % 4
    if operand == "c":
        e = np.arange(4)[None, :]
        return g + 8 * (e // 2), 2 * t + e % 2
    if tname in ("f16", "bf16"):
        e = np.arange(8 if operand == "a" else 4)[None, :]
        if operand == "a":
            return g + 8 * ((e // 2) % 2), 2 * t + e % 2 + 8 * (e // 4)
        return 2 * t + e % 2 + 8 * (e // 2), g + 0 * e
    if tname == "tf32":
        e = np.arange(4 if operand == "a" else 2)[None, :]
        if operand == "a":
            return g + 8 * (e % 2), t + 4 * (e // 2)
        return t + 4 * e, g + 0 * e
    e = np.arange(16 if operand == "a" else 8)[None, :]          # f8, k32
    if operand == "a":
        return g + 8 * ((e // 4) % 2), 4 * t + e % 4 + 16 * (e // 8)
    return 4 * t + e % 4 + 16 * (e // 4), g + 0 * e


def random_operand(rng, tname: str, shape) -> np.ndarray:
    """Random values of an mma input type, normal with scale 2 (tf32: f32 with 13 zero low bits)."""
    _, dt = _KIND[tname]
    x = (2 * rng.standard_normal(shape)).astype(np.float32)
    if tname == "tf32":
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return x.astype(dt)


def mma_bound(A, B, C, tname: str) -> np.ndarray:
    """How far a tensor-core result may be from the float64 one: a relative error (f32 accumulation;
    Hopper's f8 MMA keeps fewer accumulator bits) of the sum of the magnitudes of the terms."""
    rel = 2.0 ** -12 if tname in ("e4m3", "e5m2") else 2.0 ** -20
    return rel * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)) + np.abs(C))


def pack_fragment(values: np.ndarray, tname: str, operand: str) -> np.ndarray:
    """[warps, rows, cols] of one operand -> its registers [warps, 32, regs] as u32 (elements in
    register order, the first in the lowest bits)."""
    rows, cols = fragment(tname, operand)
    elems = values[:, rows, cols]                                   # [warps, 32, elements]
    bits = np.ascontiguousarray(elems).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[elems.dtype.itemsize])
    per = 4 // elems.dtype.itemsize
    b = bits.astype(np.uint32).reshape(*elems.shape[:2], -1, per)
    return sum(b[..., j] << np.uint32(8 * elems.dtype.itemsize * j) for j in range(per)).astype(np.uint32)


def _mma_inputs(rng, a_type: str, b_type: str, warps: int) -> dict:
    k = _KIND[a_type][0]
    return {"A": random_operand(rng, a_type, (warps, 16, k)), "B": random_operand(rng, b_type, (warps, k, 8)),
            "C": rng.standard_normal((warps, 16, 8)).astype(np.float32)}


def mma_reference(A, B, C, tname: str) -> dict[str, np.ndarray]:
    """D = A B + C per warp in float64, as each lane holds it ([warps * 32 * 4] f32 accumulators), and
    its error bound ("d~")."""
    D = A.astype(np.float64) @ B.astype(np.float64) + C
    rows, cols = fragment("f16", "c")
    return {"d": D[:, rows, cols].reshape(-1), "d~": mma_bound(A, B, C, tname)[:, rows, cols].reshape(-1)}


def _mma_packed(shape: str, a_type: str, b_type: str) -> Probe:
    warps = 2

    def build(b: Builder) -> None:
        a, bb, c = b.array("a", U32), b.array("b", U32), b.array("c", F32)
        d = b.array("d", F32, out=True)
        args = [b.load(a, b.lane_index(4, r)) for r in range(4)] + \
               [b.load(bb, b.lane_index(2, r)) for r in range(2)] + [b.load(c, b.lane_index(4, r)) for r in range(4)]
        for i, v in enumerate(b.value("mma.sync", args, shape=shape, a_type=a_type, b_type=b_type)):
            b.store(d, b.lane_index(4, i), v)

    def inputs(rng):
        m = _mma_inputs(rng, a_type, b_type, warps)
        rows, cols = fragment("f16", "c")
        return {"a": pack_fragment(m["A"], a_type, "a").reshape(-1), "b": pack_fragment(m["B"], b_type, "b").reshape(-1),
                "c": m["C"][:, rows, cols].reshape(-1), "d": np.full(warps * 128, np.nan, np.float32),
                "_": m}

    return _mma_probe(f"mma.sync-{shape}-{a_type}-{b_type}", a_type, warps, build, inputs)


def _mma_elements(tname: str) -> Probe:
    warps = 2
    dtype = {"f16": F16, "bf16": BF16}[tname]

    def build(b: Builder) -> None:
        a, bb, c = b.array("a", dtype), b.array("b", dtype), b.array("c", F32)
        d = b.array("d", F32, out=True)
        args = [b.load(a, b.lane_index(8, e)) for e in range(8)] + \
               [b.load(bb, b.lane_index(4, e)) for e in range(4)] + [b.load(c, b.lane_index(4, r)) for r in range(4)]
        for i, v in enumerate(b.value("mma.sync.elements", args, tname=tname)):
            b.store(d, b.lane_index(4, i), v)

    def inputs(rng):
        m = _mma_inputs(rng, tname, tname, warps)
        (ar, ac), (br, bc), (cr, cc) = (fragment(tname, o) for o in ("a", "b", "c"))
        return {"a": m["A"][:, ar, ac].reshape(-1), "b": m["B"][:, br, bc].reshape(-1),
                "c": m["C"][:, cr, cc].reshape(-1), "d": np.full(warps * 128, np.nan, np.float32), "_": m}

    return _mma_probe(f"mma.sync.elements-{tname}", tname, warps, build, inputs)


def _mma_probe(name: str, tname: str, warps: int, build, inputs) -> Probe:
    """`inputs` gives the registers and, under "_", the logical matrices the reference multiplies."""
    def reference(a):
        m = a["_"]
        return mma_reference(m["A"], m["B"], m["C"], tname)
    return Probe(name, 32 * warps, build, inputs, reference, exact=False)


# ------------------------------------------------------------------------------ named barrier
def _named_barrier() -> Probe:
    """Warps 1 and 2 (tid.x from 32 on, 64 threads) meet at barrier 1 between writing shared memory
    and reading the other warp's words; warp 0 does not take part."""
    n, first, threads = 96, 32, 64

    def build(b: Builder) -> None:
        x, out = b.array("x", U32), b.array("out", U32, out=True)
        sh = b.shared_array("swap", U32, threads)
        b.when(N.Compare("lt", b.tid, c32(first)), lambda: b.store(out, b.tid, b.load(x, b.tid)))

        def consumers() -> None:
            mine = binop("sub", b.tid, c32(first))
            b.store(sh, mine, b.load(x, b.tid))
            b.asm("bar.sync.named", barrier=1, threads=threads, first=first)
            b.store(out, b.tid, b.load(sh, binop("mod", binop("add", mine, c32(32)), c32(threads))))
        b.when(N.Compare("ge", b.tid, c32(first)), consumers)

    def inputs(rng):
        return {"x": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                "out": np.full(n, SENTINEL, np.uint32)}

    def reference(a):
        x = a["x"]
        return {"out": np.concatenate([x[:32], x[64:96], x[32:64]])}
    return Probe("bar.sync.named", n, build, inputs, reference)


def _turn_barriers() -> Probe:
    """Two warps take turns on barriers 2 and 3 (of 64 threads), as two consumer warpgroups do
    (matmul/pingpong.py): warp 1 gives warp 0 the first turn (arrive 2) and waits for its own (sync
    3); warp 0 takes its turn (sync 2), writes shared memory, and ends it (arrive 3); warp 1 then reads
    the other warp's words. The lock-step simulator runs the warps in program order (the barriers
    order nothing there); on the GPU a turn out of order reads stale words or hangs."""
    n, threads = 64, 64

    def build(b: Builder) -> None:
        x, out = b.array("x", U32), b.array("out", U32, out=True)
        sh = b.shared_array("turns", U32, 32)

        def first() -> None:
            b.asm("bar.sync.turn", barrier=2, threads=threads)
            b.store(sh, b.tid, b.load(x, b.tid))
            b.store(out, b.tid, b.load(x, binop("add", b.tid, c32(32))))
            b.asm("bar.arrive.turn", barrier=3, threads=threads)

        def second() -> None:
            lane = binop("sub", b.tid, c32(32))
            b.asm("bar.arrive.turn", barrier=2, threads=threads)
            b.asm("bar.sync.turn", barrier=3, threads=threads)
            b.store(out, b.tid, b.load(sh, binop("mod", binop("add", lane, c32(5)), c32(32))))
        b.when(N.Compare("lt", b.tid, c32(32)), first)
        b.when(N.Compare("ge", b.tid, c32(32)), second)

    def inputs(rng):
        return {"x": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                "out": np.full(n, SENTINEL, np.uint32)}

    def reference(a):
        x = a["x"]
        return {"out": np.concatenate([x[32:64], np.roll(x[:32], -5)])}
    return Probe("bar.sync.turn + bar.arrive.turn", n, build, inputs, reference)


def _warpgroup_barriers() -> Probe:
    """Two warpgroups (256 threads) each write their 128 words of shared memory, meet on a barrier of
    their own (4 and 5, 128 threads each: a warpgroup's own epilogue, lower/store_tma.py) and read the
    word of the thread 32 lanes on in their warpgroup, a word another warp wrote."""
    n = 256

    def build(b: Builder) -> None:
        x, out = b.array("x", U32), b.array("out", U32, out=True)
        sh = b.shared_array("groups", U32, n)
        b.store(sh, b.tid, b.load(x, b.tid))
        b.when(N.Compare("lt", b.tid, c32(128)), lambda: b.asm("bar.sync.warpgroup", barrier=4, first=0))
        b.when(N.Compare("ge", b.tid, c32(128)), lambda: b.asm("bar.sync.warpgroup", barrier=5, first=0))
        group = binop("mul", binop("floordiv", b.tid, c32(128)), c32(128))
        b.store(out, b.tid, b.load(sh, binop("add", group, binop("mod", binop("add", b.tid, c32(32)), c32(128)))))

    def inputs(rng):
        return {"x": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                "out": np.full(n, SENTINEL, np.uint32)}

    def reference(a):
        x = a["x"]
        return {"out": np.concatenate([np.roll(x[:128], -32), np.roll(x[128:], -32)])}
    return Probe("bar.sync.warpgroup", n, build, inputs, reference)


def probes() -> list[Probe]:
    return [
        _store_v2(F32, "st.global.v2.f32"), _store_v2(U32, "st.global.v2.b32"), _opaque(),
        _pack_store(F16), _pack_store(BF16), _cvt_pack(F16), _cvt_pack(BF16), _ld_shared(), _cp_async(),
        _cvt_tf32(False), _cvt_tf32(True), _ldmatrix(False), _ldmatrix(True),
        _mma_packed("m16n8k16", "f16", "f16"), _mma_packed("m16n8k16", "bf16", "bf16"),
        _mma_packed("m16n8k8", "tf32", "tf32"), _mma_packed("m16n8k32", "e4m3", "e4m3"),
        _mma_packed("m16n8k32", "e5m2", "e4m3"), _mma_elements("f16"), _mma_elements("bf16"),
        _named_barrier(), _turn_barriers(), _warpgroup_barriers(), _vector_run(F16, 8, True), _vector_run(BF16, 2, False), _vector_run(F32, 4, False),
        _vector_run(U32, 2, True), _vector_run(F64, 2, True), _vector_run(I64, 2, False),
        _vector_run(F32, 1, True), _vector_run(F64, 1, False),
        _vector_run(F32, 4, True, "L1::no_allocate.L2::256B"), _vector_run(F16, 8, False, "L2::128B"),
    ]
