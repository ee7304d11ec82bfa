"""Probes of the sm_90 rows of the PTX table, which only make sense in combination: mbarriers + TMA
(init, fence.mbarrier_init, prefetch.tensormap, arrive.expect_tx, arrive, try_wait.parity,
cp.async.bulk.tensor.2d) and warpgroup MMA (fence.proxy.async, wgmma.fence, mma_async from shared
descriptors or registers, commit_group, wait_group), and setmaxnreg.

The TMA probe runs standalone: its tensor map is a kernel parameter the launcher encodes from the
array (contract "tensor_maps"), as the GEMM's are. References follow the PTX ISA: the 128-byte swizzle
("Tensor copy: swizzling modes": 16-byte chunk j of row r of a 1024-byte atom of 8 rows stored at chunk
j ^ (r % 8)), out-of-range box elements zero, the wgmma D fragment (warp w of the warpgroup holds rows
16w.., register i at row g + 8 (i % 4 >= 2), column 8 (i / 4) + 2t + i % 2) and the descriptors of
"Matrix Descriptor Format" (start >> 4, LBO >> 4 at bit 16, SBO >> 4 at bit 32, swizzle mode at 62)."""
from __future__ import annotations

import numpy as np
import ptx_probes_sm80 as P80
from ptx_probe_kit import Builder, Probe, aligned, binop, c32, cu

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F16, F32, I64, U32, U64
from dsl.tile.ptx.mma_types import WgmmaOp

SWIZZLE_128B = 1
ROW = 128                     # bytes of one swizzle row: every operand row here is one


def swizzle_128(rows: np.ndarray) -> np.ndarray:
    """[r, 128] bytes, r from a 1024-byte aligned start -> as the 128-byte swizzle stores them."""
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        chunks = rows[r].reshape(8, 16)
        out[r].reshape(8, 16)[np.arange(8) ^ (r % 8)] = chunks
    return out


def _saddr(arr: N.Expr, index: int) -> TN.SharedAddress:
    return TN.SharedAddress(arr, N.Const(index, I64))


# ------------------------------------------------------------------------------ mbarriers and TMA
BOX = (16, 64)                # rows, f16 columns: 128-byte rows, the 128-byte swizzle
LOADS = ((48, 30), (-16, -3))  # (column, row) of each box: past the bottom-right, before the top-left
SRC = (40, 104)


def _tma() -> Probe:
    """Thread 0 sets up two mbarriers (count 1 for the copies, 128 for the arrivals), then loads two
    boxes, each on phase k of the first barrier (parity k waited for by every thread); every thread
    then arrives on the second one and waits for its phase 0, and copies the swizzled stage out."""
    stage_words = BOX[0] * ROW // 4
    nbytes = BOX[0] * BOX[1] * 2

    def build(b: Builder) -> None:
        src, out = b.array("src", F16, ndim=2), b.array("out", U32, out=True)
        tmap = b.tensor_map(src, BOX, 128)
        stage, base, skip = b.aligned_dynamic("stage", U32)
        bars = b.shared_array("bars", U64, 2, align=8)
        copies, arrivals = b.let(_saddr(bars, 0), "bar"), b.let(_saddr(bars, 1), "bar")
        leader = b.let(N.Compare("eq", b.tid, c32(0)), "leader")

        def set_up() -> None:
            b.asm("mbarrier.init", [copies], count=1)
            b.asm("mbarrier.init", [arrivals], count=b.block)
            b.asm("fence.mbarrier_init")
            b.asm("prefetch.tensormap", [tmap])
        b.when(leader, set_up)
        b.sync()
        for k, (col, row) in enumerate(LOADS):
            def load(k=k, col=col, row=row) -> None:
                b.asm("mbarrier.arrive.expect_tx", [copies, cu(nbytes)])
                dst = N.BinOp("add", base, cu(4 * k * stage_words), U32)
                b.asm("cp.async.bulk.tensor.2d", [dst, tmap, c32(col), c32(row), copies])
            b.when(leader, load)
            b.asm("mbarrier.try_wait.parity", [copies, c32(k)])
            b.sync()          # no thread still waits for phase k when phase k + 1 completes
        b.asm("mbarrier.arrive", [arrivals])
        b.asm("mbarrier.try_wait.parity", [arrivals, c32(0)])
        for j in range(2 * stage_words // b.block):
            k = binop("add", b.tid, c32(j * b.block))
            b.store(out, k, b.load(stage, binop("add", skip, k)))

    def inputs(rng):
        src = aligned(SRC, np.float16, 16)
        src[...] = rng.standard_normal(SRC).astype(np.float16)
        return {"src": src, "out": np.full(2 * stage_words, P80.SENTINEL, np.uint32)}

    def reference(a):
        src = a["src"]
        stages = []
        for col, row in LOADS:
            box = np.zeros(BOX, np.float16)
            for r in range(BOX[0]):
                for c in range(BOX[1]):
                    if 0 <= row + r < SRC[0] and 0 <= col + c < SRC[1]:
                        box[r, c] = src[row + r, col + c]
            stages.append(swizzle_128(box.view(np.uint8).reshape(BOX[0], ROW)))
        return {"out": np.concatenate(stages).reshape(-1).view(np.uint32)}
    return Probe("tma+mbarrier", 128, build, inputs, reference, shared_mem=8 * stage_words + 1024)


# ------------------------------------------------------------------------------ TMA stores
STORE_BOXES = {"f32": ((16, 32), (40, 72), ((48, 30), (8, 3))),      # box, array, (column, row) of each
               "f16": ((16, 64), (40, 104), ((56, 30), (8, 5)))}      # store: past the bottom-right, inside
# Innermost coordinates stay on 16-byte boundaries and no store coordinate is negative: on the H200
# (2026-12-05) a store at f16 column 60 (120 bytes) or at a negative coordinate was an illegal
# instruction (a load may start before the array: the load probe above), which the simulator refuses too.
STORE_SENTINEL = {"f32": np.float32(-7.5), "f16": np.float16(-7.5)}
REDUCE_AT = ((8, 30), (24, 6))        # (column, row) of the f32 stage's two reduce-adds into `dr`


def _tma_store() -> Probe:
    """Every thread writes its words of two 2048-byte stages in physical order (f32 pairs by
    st.shared.v2.f32 into the first, packed f16 pairs by st.shared.b32 into the second), then
    fence.proxy.async and a barrier; thread 0 stores each stage to two places of its array by TMA
    (one bulk group per array) and reduce-adds the f32 stage into `dr` at two places (a third group),
    waits until one group may still read, then none. The arrays keep
    their sentinel outside the boxes and past their edges; inside, box element (r, c) is what the
    128-byte swizzle puts at stage chunk c' ^ (r % 8) (the probe's own swizzle_128 reference)."""
    stage_bytes = 2048
    words = stage_bytes // 4

    def build(b: Builder) -> None:
        x32, x16 = b.array("x32", F32), b.array("x16", U32)
        d32, d16 = b.array("d32", F32, ndim=2, out=True), b.array("d16", F16, ndim=2, out=True)
        dr = b.array("dr", F32, ndim=2, out=True)
        maps = {"f32": b.tensor_map(d32, STORE_BOXES["f32"][0], 128), "f16": b.tensor_map(d16, STORE_BOXES["f16"][0], 128)}
        rmap = b.tensor_map(dr, STORE_BOXES["f32"][0], 128)
        _, base, _ = b.aligned_dynamic("stage", U32)
        for j in range(words // 2 // b.block):          # f32 pairs: 8 bytes a thread a step
            pair = binop("add", b.tid, c32(j * b.block))
            at = N.BinOp("add", base, N.Cast(binop("mul", pair, c32(8)), U32), U32)
            b.asm("st.shared.v2.f32", [at, b.load(x32, binop("mul", pair, c32(2))),
                                       b.load(x32, binop("add", binop("mul", pair, c32(2)), c32(1)))])
        for j in range(words // b.block):               # packed f16 pairs: 4 bytes a thread a step
            w = binop("add", b.tid, c32(j * b.block))
            at = N.BinOp("add", base, N.Cast(binop("add", binop("mul", w, c32(4)), c32(stage_bytes)), U32), U32)
            b.asm("st.shared.b32", [at, b.load(x16, w)])
        b.asm("fence.proxy.async")
        b.sync()

        def store() -> None:
            for k, name in enumerate(("f32", "f16")):
                for col, row in STORE_BOXES[name][2]:
                    b.asm("cp.async.bulk.tensor.2d.store",
                          [maps[name], c32(col), c32(row), N.BinOp("add", base, cu(k * stage_bytes), U32)])
                b.asm("cp.async.bulk.commit_group")
            for col, row in REDUCE_AT:
                b.asm("cp.reduce.async.bulk.tensor.2d.add", [rmap, c32(col), c32(row), base])
            b.asm("cp.async.bulk.commit_group")
            b.asm("cp.async.bulk.wait_group.read", keep=1)
            b.asm("cp.async.bulk.wait_group.read", keep=0)
        b.when(N.Compare("eq", b.tid, c32(0)), store)

    def inputs(rng):
        out = {}
        for name, dt in (("f32", np.float32), ("f16", np.float16)):
            arr = aligned(STORE_BOXES[name][1], dt, 16)
            arr[...] = STORE_SENTINEL[name]
            out["d" + name[1:]] = arr
        dr = aligned(STORE_BOXES["f32"][1], np.float32, 16)
        dr[...] = rng.standard_normal(dr.shape).astype(np.float32)
        return {"x32": rng.standard_normal(words).astype(np.float32),
                "x16": rng.standard_normal(2 * words).astype(np.float16).view(np.uint32), "dr": dr, **out}

    def reference(a):
        got = {}
        for name, stage in (("f32", a["x32"]), ("f16", a["x16"])):
            (rows, cols), shape, places = STORE_BOXES[name]
            dt = STORE_SENTINEL[name].dtype
            box = swizzle_128(np.ascontiguousarray(stage).view(np.uint8).reshape(rows, ROW)).view(dt).reshape(rows, cols)
            want = np.full(shape, STORE_SENTINEL[name], dt)
            for col, row in places:
                for r in range(rows):
                    for c in range(cols):
                        if 0 <= row + r < shape[0] and 0 <= col + c < shape[1]:
                            want[row + r, col + c] = box[r, c]
            got["d" + name[1:]] = want
            if name == "f32":             # the same stage added into dr at two places, each element once
                added = a["dr"].copy()
                for col, row in REDUCE_AT:
                    for r in range(rows):
                        for c in range(cols):
                            if 0 <= row + r < shape[0] and 0 <= col + c < shape[1]:
                                added[row + r, col + c] = np.float32(added[row + r, col + c] + box[r, c])
                got["dr"] = added
        return got
    return Probe("tma-store", 128, build, inputs, reference, shared_mem=2 * stage_bytes + 1024)


def _tma_reduce_complete() -> Probe:
    """An arrival counter's release side (dsl/tile/lower/arrivals.py): every thread writes its f32 pairs of a
    (16, 32) stage, fence.proxy.async, a barrier; thread 0 reduce-adds the stage into `dr` at (8, 4), commits,
    waits for the group to complete (cp.async.bulk.wait_group 0: its writes done, not only its reads),
    fence.proxy.async.global, fence.acq_rel.gpu; a barrier; then every thread reads its words of that box of
    `dr` back with ordinary loads into `got`: the sums, which a wait for the reads alone would not promise."""
    (rows, cols), shape = STORE_BOXES["f32"][0], STORE_BOXES["f32"][1]
    col0, row0 = 8, 4
    words = rows * cols

    def build(b: Builder) -> None:
        x32 = b.array("x32", F32)
        dr = b.array("dr", F32, ndim=2, out=True)
        got = b.array("got", F32, out=True)
        rmap = b.tensor_map(dr, (rows, cols), 128)
        _, base, _ = b.aligned_dynamic("stage", U32)
        for j in range(words // 2 // b.block):
            pair = binop("add", b.tid, c32(j * b.block))
            at = N.BinOp("add", base, N.Cast(binop("mul", pair, c32(8)), U32), U32)
            b.asm("st.shared.v2.f32", [at, b.load(x32, binop("mul", pair, c32(2))),
                                       b.load(x32, binop("add", binop("mul", pair, c32(2)), c32(1)))])
        b.asm("fence.proxy.async")
        b.sync()

        def reduce() -> None:
            b.asm("cp.reduce.async.bulk.tensor.2d.add", [rmap, c32(col0), c32(row0), base])
            b.asm("cp.async.bulk.commit_group")
            b.asm("cp.async.bulk.wait_group", keep=0)
            b.asm("fence.proxy.async.global")
            b.asm("fence.acq_rel.gpu")
        b.when(N.Compare("eq", b.tid, c32(0)), reduce)
        b.sync()
        for j in range(words // b.block):
            w = binop("add", b.tid, c32(j * b.block))
            r, c = binop("add", binop("floordiv", w, c32(cols)), c32(row0)), binop("add", binop("mod", w, c32(cols)), c32(col0))
            b.store(got, w, N.Load(dr, [N.Cast(r, I64), N.Cast(c, I64)], "none", 0, F32))

    def inputs(rng):
        dr = aligned(shape, np.float32, 16)
        dr[...] = rng.standard_normal(shape).astype(np.float32)
        return {"x32": rng.standard_normal(words).astype(np.float32), "dr": dr, "got": np.full(words, np.nan, np.float32)}

    def reference(a):
        box = swizzle_128(np.ascontiguousarray(a["x32"]).view(np.uint8).reshape(rows, ROW)).view(np.float32).reshape(rows, cols)
        added = a["dr"].copy()
        added[row0:row0 + rows, col0:col0 + cols] = (added[row0:row0 + rows, col0:col0 + cols] + box).astype(np.float32)
        return {"dr": added, "got": added[row0:row0 + rows, col0:col0 + cols].reshape(-1)}
    return Probe("tma-reduce-complete", 128, build, inputs, reference, shared_mem=2048 + 1024)


# ------------------------------------------------------------------------------ warpgroup MMA
_ES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1}


def kmajor_image(m: np.ndarray) -> np.ndarray:
    """[rows, K] with K * esize = 128 -> the bytes of the K-major, 128-byte swizzled layout."""
    return swizzle_128(np.ascontiguousarray(m).view(np.uint8).reshape(m.shape[0], ROW))


def mnmajor_image(bm: np.ndarray) -> np.ndarray:
    """[K, N] of a 16-bit type -> atoms [N / 64][K][64], each a K-row stack of 128-byte swizzled rows."""
    k, n = bm.shape
    return np.concatenate([kmajor_image(np.ascontiguousarray(bm[:, 64 * a:64 * a + 64])) for a in range(n // 64)])


def descriptor(b: Builder, addr: N.Expr, lbo: int, sbo: int) -> N.Expr:
    const = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_128B << 62)
    start = N.BinOp("rshift", N.BinOp("and_", N.Cast(addr, U64), N.Const(0x3FFFF, U64), U64), N.Const(4, U64), U64)
    return b.let(N.BinOp("or_", start, N.Const(const, U64), U64), "desc")


def descriptor_of(b: Builder, base: N.Expr, offset: int, lbo: int, sbo: int) -> N.Expr:
    """descriptor() of base + offset by the lowering's wgmma.desc: the start field of `base`, the
    offset and LBO added to it in the low word, SBO and the swizzle mode the high word."""
    start = b.let(N.BinOp("rshift", N.BinOp("and_", base, cu(0x3FFFF), U32), cu(4), U32), "dstart")
    (d,) = b.value("wgmma.desc", [start], lo=(offset >> 4) + ((lbo >> 4) << 16), hi=(sbo >> 4) | (SWIZZLE_128B << 30))
    return d


def wgmma_d_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [128 threads, n / 2 registers] of the m64nN f32 accumulators."""
    thread = np.arange(128)[:, None]
    w, g, t = thread // 32, (thread % 32) // 4, thread % 4
    i = np.arange(n // 2)[None, :]
    return 16 * w + g + 8 * ((i % 4) >= 2), 8 * (i // 4) + 2 * t + i % 2


def _wgmma(op: WgmmaOp) -> Probe:
    """One warpgroup: the operand image (A K-major, or MN-major under trans_a; then B) copied into 1024-byte aligned shared
    memory by the threads, fence.proxy.async, a barrier; four wgmmas over K (32 bytes each). From
    descriptors: two groups of two (the fence riding in each group's first), wait_group 1 then 0; with
    A from registers: a wgmma.fence passing the accumulators and A registers, one group, wait_group 0."""
    ta, tb, n = op.a_type, op.b_type, op.n
    k = 4 * 32 // _ES[ta]
    regs = n // 2
    image_words = (64 + n) * ROW // 4

    def build(b: Builder) -> None:
        image, c = b.array("image", U32), b.array("c", F32)
        a_regs = b.array("a_regs", U32) if op.a_regs else None
        d = b.array("d", F32, out=True)
        img, a_base, skip = b.aligned_dynamic("operands", U32)
        for j in range(image_words // b.block):
            at = binop("add", b.tid, c32(j * b.block))
            b.store(img, binop("add", skip, at), b.load(image, at))
        b.asm("fence.proxy.async")
        b.sync()
        b_base = b.let(N.BinOp("add", a_base, cu(64 * ROW), U32), "bbase")
        accs = [b.load(c, b.lane_index(regs, i)) for i in range(regs)]

        def b_desc(step: int) -> N.Expr:
            if op.trans_b:      # MN-major atoms: 16 rows of K a step, atoms K * 128 bytes apart
                return descriptor(b, N.BinOp("add", b_base, cu(step * 16 * ROW), U32), k * ROW, 8 * ROW)
            return descriptor(b, N.BinOp("add", b_base, cu(step * 32), U32), 16, 8 * ROW)

        if op.a_regs:
            frags = [b.load(a_regs, b.lane_index(16, r)) for r in range(16)]
            types = (F32,) * regs + (U32,) * 16
            fenced = b.value("wgmma.fence", accs + frags, types=types)
            accs, frags = fenced[:regs], fenced[regs:]
            for step in range(4):
                accs = b.value("wgmma.mma_async.rs", [*frags[4 * step:4 * step + 4], b_desc(step), cu(1), *accs], op=op)
            b.asm("wgmma.commit_group")
            pending = (0,)
        else:
            for step in range(4):
                if op.trans_a:  # MN-major A: 16 rows of K a step, one 64-row atom panel (by wgmma.desc)
                    da = descriptor_of(b, a_base, step * 16 * ROW, k * ROW, 8 * ROW)
                else:
                    da = descriptor(b, N.BinOp("add", a_base, cu(step * 32), U32), 16, 8 * ROW)
                accs = b.value("wgmma.mma_async.ss", [da, b_desc(step), cu(1), *accs], op=op,
                               fence=step % 2 == 0)
                if step % 2:
                    b.asm("wgmma.commit_group")
            pending = (1, 0)
        for p in pending:
            accs = b.value("wgmma.wait_group", accs, pending=p, n=regs)
        for i, v in enumerate(accs):
            b.store(d, b.lane_index(regs, i), v)

    def inputs(rng):
        A = P80.random_operand(rng, ta, (64, k))
        B = P80.random_operand(rng, tb, (k, n))
        C = rng.standard_normal((64, n)).astype(np.float32)
        bimg = mnmajor_image(B) if op.trans_b else kmajor_image(np.ascontiguousarray(B.T))
        aimg = mnmajor_image(np.ascontiguousarray(A.T)) if op.trans_a else kmajor_image(A)
        image = np.concatenate([aimg, bimg]).reshape(-1).view(np.uint32)
        rows, cols = wgmma_d_layout(n)
        got = {"image": image, "c": C[rows, cols].reshape(-1), "d": np.full(128 * regs, np.nan, np.float32),
               "_": (A, B, C)}
        if op.a_regs:       # warp w: rows 16w.., step s: columns 16s.., mma.m16n8k16's A fragment
            blocks = A.reshape(4, 16, 4, 16).transpose(0, 2, 1, 3).reshape(16, 16, 16)     # [w * 4 + s, 16, 16]
            frag = P80.pack_fragment(blocks, ta, "a").reshape(4, 4, 32, 4)                # [w, s, lane, reg]
            got["a_regs"] = np.ascontiguousarray(frag.transpose(0, 2, 1, 3)).reshape(-1)   # thread w * 32 + lane
        return got

    def reference(a):
        A, B, C = a["_"]
        D = A.astype(np.float64) @ B.astype(np.float64) + C
        rows, cols = wgmma_d_layout(n)
        return {"d": D[rows, cols].reshape(-1), "d~": P80.mma_bound(A, B, C, ta)[rows, cols].reshape(-1)}

    form = "rs" if op.a_regs else "ss"
    name = f"wgmma.{form}-n{n}-{ta}-{tb}-{'mn' if op.trans_b else 'k'}major" + ("-a-mnmajor" if op.trans_a else "")
    return Probe(name, 128, build, inputs, reference, shared_mem=4 * image_words + 1024, exact=False)


# ------------------------------------------------------------------------------ register reallocation
def _setmaxnreg() -> Probe:
    """Two warpgroups, as a warp-specialised kernel's roles: warpgroup 0 gives registers back (dec
    40), warpgroup 1 takes them (inc 232, within what the first released), each then writes its
    words. setmaxnreg changes no value: out is x xor the thread's index."""
    n = 256

    def build(b: Builder) -> None:
        x, out = b.array("x", U32), b.array("out", U32, out=True)
        b.min_blocks = 1      # as the lowering states it: ptxas then gives every thread 232 registers at launch,
                              # so dec 40 lowers and inc 232 is met (with 10 a thread, the inc would wait for ever)
        producer = N.Compare("lt", b.tid, c32(128))
        b.when(producer, lambda: b.asm("setmaxnreg", action="dec", count=40))
        b.when(N.Compare("ge", b.tid, c32(128)), lambda: b.asm("setmaxnreg", action="inc", count=232))
        b.store(out, b.tid, N.BinOp("xor", b.load(x, b.tid), N.Cast(b.tid, U32), U32))

    def inputs(rng):
        return {"x": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                "out": np.full(n, P80.SENTINEL, np.uint32)}

    def reference(a):
        return {"out": a["x"] ^ np.arange(n, dtype=np.uint32)}
    return Probe("setmaxnreg", n, build, inputs, reference)


def probes() -> list[Probe]:
    return [
        _tma(), _tma_store(), _tma_reduce_complete(), _setmaxnreg(),
        _wgmma(WgmmaOp(128, "f16", "f16", True)), _wgmma(WgmmaOp(64, "bf16", "bf16", False)),
        _wgmma(WgmmaOp(64, "tf32", "tf32", False)), _wgmma(WgmmaOp(64, "e4m3", "e5m2", False)),
        _wgmma(WgmmaOp(64, "f16", "f16", True, a_regs=True)), _wgmma(WgmmaOp(64, "bf16", "bf16", False, a_regs=True)),
        _wgmma(WgmmaOp(128, "bf16", "bf16", True, trans_a=True)),
    ]

