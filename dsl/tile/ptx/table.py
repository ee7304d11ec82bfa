"""The PTX instruction families the tile lowering emits: one row each, with its text template,
LLVM operand constraints, result type, side effects, minimum architecture and the name of its CPU
semantics. The lowering builds every inline PTX statement through `instruction(...)`, so the text it
emits and the semantics the simulator runs come from the same row.

Semantics are named ("module:function", a module of this package), not imported: the lowering never
imports the simulator, and the simulator resolves a statement's `SemanticsRef` on first use. A row
whose `sim_params` is non-empty names a factory, called with those parameters' values.

Fragment layouts, operand forms and memory models: PTX ISA 8.x ("Warp-level matrix instructions",
"Asynchronous warpgroup level matrix instructions", "Tensor copy", "mbarrier"). Adding a family: see
docs/contributing.md ("A PTX instruction family").
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, INDEX, U32, U64, VOID, TupleType, Type
from dsl.tile.ptx.mma_types import operand_type

Text = str | Callable[..., str]


@dataclass(frozen=True)
class PtxFamily:
    """One instruction family. `text`, `constraints` and `result` are fixed or functions of the
    family's parameters (`params`); `sim_params` (a subset) are what the semantics factory takes."""
    name: str
    text: Text
    constraints: Text
    result: Type | Callable[..., Type]
    side_effects: bool
    min_arch: int
    semantics: str
    doc: str
    params: tuple[str, ...] = ()
    sim_params: tuple[str, ...] = ()

    def render(self, params: dict[str, Any]) -> tuple[str, str, Type]:
        def value(x):
            return x(**params) if callable(x) else x
        return value(self.text), value(self.constraints), value(self.result)


@dataclass(frozen=True)
class SemanticsRef:
    """The CPU semantics of one emitted statement: its family and the semantics factory's arguments.
    Resolved by the simulator (dsl/sim/interp.py) on first use."""
    family: str
    args: tuple = ()

    def resolve(self) -> Callable:
        fn = _RESOLVED.get(self)
        if fn is None:
            row = FAMILIES[self.family]
            module, _, name = row.semantics.partition(":")
            fn = getattr(importlib.import_module(f"dsl.tile.ptx.{module}"), name)
            if row.sim_params:
                fn = fn(*self.args)
            _RESOLVED[self] = fn
        return fn


# An explicit cache: semantics made by a factory, per (family, arguments). Only ever grows by the
# distinct instruction forms a process simulates (a few dozen).
_RESOLVED: dict[SemanticsRef, Callable] = {}


def instruction(family: str, args: list, **params: Any) -> TN.InlinePtx:
    """The inline PTX statement of `family` on operand expressions `args` (outputs are not listed:
    they are the result), with the family's parameters as keywords."""
    row = FAMILIES[family]
    missing = set(row.params) - params.keys()
    extra = params.keys() - set(row.params)
    if missing or extra:
        raise TypeError(f"PTX family {family!r} takes parameters {list(row.params)}; "
                        f"missing {sorted(missing)}, unexpected {sorted(extra)}")
    text, cons, result = row.render(params)
    inputs = [c for c in cons.split(",") if c and not c.startswith("=")]
    if len(inputs) != len(args):
        raise TypeError(f"PTX family {family!r} takes {len(inputs)} operand(s) ({cons!r}), got {len(args)}")
    ref = SemanticsRef(family, tuple(params[p] for p in row.sim_params))
    return TN.InlinePtx(text, cons, list(args), result, row.side_effects, sim=ref)


def _tied(outs: list[str]) -> str:
    """Constraints of registers passed through a statement: each output tied to the same input."""
    return ",".join(outs + [str(i) for i in range(len(outs))])


def _mma_packed(shape: str, a_type: str, b_type: str) -> str:
    return (f"mma.sync.aligned.{shape}.row.col.f32.{a_type}.{b_type}.f32 "
            "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")


def _mma_elements(tname: str) -> str:
    return ("{ .reg .b32 a<4>, b<2>; "
            "mov.b32 a0, {$4, $5}; mov.b32 a1, {$6, $7}; mov.b32 a2, {$8, $9}; mov.b32 a3, {$10, $11}; "
            "mov.b32 b0, {$12, $13}; mov.b32 b1, {$14, $15}; "
            f"mma.sync.aligned.m16n8k16.row.col.f32.{tname}.{tname}.f32 "
            "{$0, $1, $2, $3}, {a0, a1, a2, a3}, {b0, b1}, {$16, $17, $18, $19}; }")


def _wgmma_ss(op, fence: bool) -> str:
    """wgmma with A and B from shared-memory descriptors, K = 32 bytes of the operand type; the
    scale-d predicate is the last input. 16-bit types take imm-trans-a/b (MN-major operands:
    transposed), tf32 and f8 none."""
    regs, k = op.n // 2, 32 // operand_type(op.a_type).itemsize
    trans = "" if op.a_type not in ("f16", "bf16") else ", %d, %d" % (int(op.trans_a), int(op.trans_b))
    return ("{ .reg .pred p; setp.ne.b32 p, $%d, 0; %s"
            "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, $%d, $%d, p, 1, 1%s; }"
            % (regs + 2, "wgmma.fence.sync.aligned; " if fence else "", op.n, k, op.a_type, op.b_type,
               ",".join(f"${i}" for i in range(regs)), regs, regs + 1, trans))


def _wgmma_rs(op) -> str:
    """wgmma with A from 4 registers a thread (an mma.sync A fragment per warp), B from a descriptor."""
    regs = op.n // 2
    return ("{ .reg .pred p; setp.ne.b32 p, $%d, 0; "
            "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, {$%d, $%d, $%d, $%d}, $%d, p, 1, 1, %d; }"
            % (regs + 5, op.n, op.a_type, op.b_type, ",".join(f"${i}" for i in range(regs)), regs, regs + 1,
               regs + 2, regs + 3, regs + 4, 1 if op.trans_b else 0))


def _run_regs(dtype) -> tuple[str, str]:
    """(LLVM constraint letter, PTX type) of one element of a vector run access (2, 4 or 8 bytes)."""
    if dtype.itemsize == 2:
        return "h", "b16"
    if dtype.is_float:
        return ("f", "f32") if dtype.itemsize == 4 else ("d", "f64")
    return ("r", "b32") if dtype.itemsize == 4 else ("l", "b64")


def _group(regs: list[str]) -> str:
    return regs[0] if len(regs) == 1 else "{" + ", ".join(regs) + "}"


def _vec(n: int) -> str:
    return f".v{n}" if n > 1 else ""


def _ld_run(dtype, n: int, nc: bool, hint: str = "none") -> str:
    """n elements at $n when $n+1 is non-zero, else n copies of the padding $n+2; 16-bit elements
    travel as packed 32-bit words. `hint`: cache qualifiers (switches.LOAD_HINTS), or "none"."""
    _, ptype = _run_regs(dtype)
    space = ("global.nc" if nc else "global") + ("" if hint == "none" else f".{hint}")
    addr, pred, pad = f"${n}", f"${n + 1}", f"${n + 2}"
    outs = [f"${i}" for i in range(n)]
    if dtype.itemsize == 2:
        words = [f"w{i}" for i in range(n // 2)]
        fill = " ".join(f"mov.b32 {w}, {{{pad}, {pad}}};" for w in words)
        split = " ".join(f"mov.b32 {{{outs[2 * i]}, {outs[2 * i + 1]}}}, {w};" for i, w in enumerate(words))
        return (f"{{ .reg .pred p; .reg .b32 w<{len(words)}>; setp.ne.b32 p, {pred}, 0; {fill} "
                f"@p ld.{space}{_vec(len(words))}.b32 {_group(words)}, [{addr}]; {split} }}")
    fill = " ".join(f"mov.{ptype} {o}, {pad};" for o in outs)
    return f"{{ .reg .pred p; setp.ne.b32 p, {pred}, 0; {fill} @p ld.{space}{_vec(n)}.{ptype} {_group(outs)}, [{addr}]; }}"


def _st_run(dtype, n: int) -> str:
    """n elements ($2...) to $0 when $1 is non-zero; 16-bit elements packed into 32-bit words."""
    _, ptype = _run_regs(dtype)
    ins = [f"${i + 2}" for i in range(n)]
    if dtype.itemsize == 2:
        words = [f"w{i}" for i in range(n // 2)]
        pack = " ".join(f"mov.b32 {w}, {{{ins[2 * i]}, {ins[2 * i + 1]}}};" for i, w in enumerate(words))
        return (f"{{ .reg .pred p; .reg .b32 w<{len(words)}>; setp.ne.b32 p, $1, 0; {pack} "
                f"@p st.global{_vec(len(words))}.b32 [$0], {_group(words)}; }}")
    return f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; @p st.global{_vec(n)}.{ptype} [$0], {_group(ins)}; }}"


_BAR = "mbarrier.{}.shared::cta.b64"
_TMA_2D = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
           "[$0], [$1, {$2, $3}], [$4];")
_TMA_2D_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];"
_TMA_2D_REDUCE_ADD = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [$0, {$1, $2}], [$3];"
_U32X4 = TupleType((U32,) * 4)
_F32X4 = TupleType((F32,) * 4)

_ROWS = (
    # ------------------------------------------------------------------ sm_80: barriers and stores
    PtxFamily("bar.sync.named", lambda barrier, threads, first: f"bar.sync {barrier}, {threads};", "", VOID,
              True, 70, "sm80:named_barrier", "named barrier `barrier` of `threads` threads, those from "
              "tid.x `first` on (a warp-specialised kernel's consumers)", ("barrier", "threads", "first"),
              ("first",)),
    PtxFamily("bar.sync.warpgroup", lambda barrier, first: f"bar.sync {barrier}, 128;", "", VOID, True, 70,
              "sm80:warpgroup_barrier", "named barrier `barrier` (WG_BARRIER0 + g) of the 128 threads of the tile "
              "program's warpgroup g, those from tid.x `first` on: a warpgroup's own epilogue "
              "(lower/store_tma.py)", ("barrier", "first"), ("first",)),
    PtxFamily("bar.sync.turn", lambda barrier, threads: f"bar.sync {barrier}, {threads};", "", VOID, True, 70,
              "sm80:turn_sync", "wait on named barrier `barrier` until `threads` threads arrived: a consumer "
              "warpgroup's turn (matmul/pingpong.py); orders nothing in the lock-step simulator",
              ("barrier", "threads"), ("barrier",)),
    PtxFamily("bar.arrive.turn", lambda barrier, threads: f"bar.arrive {barrier}, {threads};", "", VOID, True, 70,
              "sm80:turn_arrive", "arrive, without waiting, on named barrier `barrier` (`threads` in all): the "
              "other consumer warpgroup's turn (matmul/pingpong.py)", ("barrier", "threads"), ("barrier",)),
    PtxFamily("st.global.v2.f32", "st.global.v2.f32 [$0], {$1, $2};", "l,f,f", VOID, True, 70,
              "sm80:st_global_8", "two f32 to an 8-byte aligned global address"),
    PtxFamily("st.global.v2.b32", "st.global.v2.b32 [$0], {$1, $2};", "l,r,r", VOID, True, 70,
              "sm80:st_global_8", "two 32-bit registers to an 8-byte aligned global address"),
    PtxFamily("st.global.b32", "st.global.b32 [$0], $1;", "l,r", VOID, True, 70, "sm80:st_global_4",
              "one 32-bit register (two packed 16-bit values) to a 4-byte aligned global address"),
    PtxFamily("ld.global.run", _ld_run,
              lambda dtype, n, nc, hint="none": ",".join(["=" + _run_regs(dtype)[0]] * n + ["l", "r",
                                                                                            _run_regs(dtype)[0]]),
              lambda dtype, n, nc, hint="none": dtype if n == 1 else TupleType((dtype,) * n), True, 70,
              "sm80:ld_run", "n elements of `dtype` (one access of their width, aligned to it; n 1: one 4- or "
              "8-byte element, not a tuple) from a global address when the predicate is non-zero, else n copies "
              "of the padding (`nc`: through the read-only cache; `hint`: cache qualifiers, which change no value)",
              ("dtype", "n", "nc", "hint"), ("dtype", "n")),
    PtxFamily("st.global.run", _st_run, lambda dtype, n: ",".join(["l", "r"] + [_run_regs(dtype)[0]] * n), VOID,
              True, 70, "sm80:st_run", "n elements of `dtype` to a global address (one access aligned to "
              "its width) when the predicate is non-zero", ("dtype", "n"), ("dtype", "n")),
    PtxFamily("ld.shared.b32", "ld.shared.b32 $0, [$1];", "=r,r", U32, True, 70, "sm80:ld_shared_b32",
              "a 32-bit load from a shared-window address"),
    PtxFamily("st.shared.v2.f32", "st.shared.v2.f32 [$0], {$1, $2};", "r,f,f", VOID, True, 70,
              "sm80:st_shared_8", "two f32 to an 8-byte aligned shared-window address"),
    PtxFamily("st.shared.b32", "st.shared.b32 [$0], $1;", "r,r", VOID, True, 70, "sm80:st_shared_4",
              "one 32-bit register (two packed 16-bit values) to a 4-byte aligned shared-window address"),
    # ------------------------------------------------------------------ sm_80: cp.async
    PtxFamily("cp.async.cg", "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r", VOID, True, 80,
              "sm80:cp_async", "16 bytes global -> shared, asynchronously, of which the first src-size "
              "(the last operand, 16 or 0) are read and the rest zero-filled"),
    PtxFamily("cp.async.commit_group", "cp.async.commit_group;", "", VOID, True, 80, "sm80:commit_group",
              "close this thread's pending cp.async copies into a group"),
    PtxFamily("cp.async.wait_group", lambda keep: f"cp.async.wait_group {keep};", "", VOID, True, 80,
              "sm80:wait_group", "wait until at most `keep` of this thread's groups are pending",
              ("keep",), ("keep",)),
    PtxFamily("fence.proxy.async", "fence.proxy.async.shared::cta;", "", VOID, True, 90, "sm80:no_op",
              "order generic-proxy shared writes before async-proxy reads (wgmma, TMA)"),
    PtxFamily("fence.acq_rel.gpu", "fence.acq_rel.gpu;", "", VOID, True, 70, "sm80:no_op",
              "order this thread's memory accesses (and those a barrier ordered before them) against the GPU's "
              "other threads: the release before, and the acquire after, an arrival counter's atomic add"),
    # ------------------------------------------------------------------ sm_80: registers and tensor cores
    PtxFamily("mov.b64.opaque", "mov.b64 $0, $1;", "=l,l", INDEX, False, 70, "sm80:identity",
              "a 64-bit integer unchanged, hidden from the compiler's algebra: a load's bounds test `c < left`, "
              "left = len - base, stays one compare with an immediate an element instead of being rewritten "
              "into base + c, whose per-element loop-invariant parts were hoisted into registers"),
    PtxFamily("mov.b32.pack", "mov.b32 $0, {$1, $2};", "=r,h,h", U32, False, 70, "sm80:pack_halves",
              "two 16-bit values of `dtype` into one register, the first in the low half", ("dtype",),
              ("dtype",)),
    PtxFamily("cvt.rn.pack", lambda dtype: f"cvt.rn.{dtype.name}x2.f32 $0, $2, $1;", "=r,f,f", U32, False, 80,
              "sm80:cvt_pack", "two f32 rounded to nearest even into one register of two 16-bit `dtype` "
              "(f16, bf16) halves, the first in the low half", ("dtype",), ("dtype",)),
    PtxFamily("cvt.rna.tf32.f32", "cvt.rna.tf32.f32 $0, $1;", "=r,r", U32, False, 80, "sm80:cvt_rna_tf32",
              "f32 -> tf32 (round to nearest, ties away), as a 32-bit register"),
    PtxFamily("ldmatrix.x4", lambda trans: f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}"
              ".shared.b16 {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,r", _U32X4, True, 75, "sm80:ldmatrix",
              "four 8x8 b16 matrices from shared memory, each lane giving one row address (.trans: "
              "transposed)", ("trans",), ("trans",)),
    PtxFamily("mma.sync", _mma_packed, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", _F32X4, False, 80,
              "sm80:mma_packed", "warp MMA on packed registers: f16/bf16 m16n8k16, tf32 m16n8k8, f8 "
              "m16n8k32 (sm_89+); 4 A, 2 B registers, 4 f32 accumulators", ("shape", "a_type", "b_type"),
              ("a_type", "b_type")),
    PtxFamily("mma.sync.elements", _mma_elements, ",".join(["=f"] * 4 + ["h"] * 12 + ["f"] * 4), _F32X4,
              False, 80, "sm80:mma_elements", "mma.sync m16n8k16 on unpacked 16-bit elements (8 of A, "
              "4 of B, packed in the statement) and 4 f32 accumulators", ("tname",)),
    # ------------------------------------------------------------------ sm_90: mbarriers and TMA
    PtxFamily("mbarrier.init", lambda count: _BAR.format("init") + f" [$0], {count};", "r", VOID, True, 90,
              "sm90:mbarrier_init", "initialise a shared mbarrier expecting `count` arrivals a phase",
              ("count",), ("count",)),
    PtxFamily("fence.mbarrier_init", "fence.mbarrier_init.release.cluster;", "", VOID, True, 90,
              "sm80:no_op", "make mbarrier initialisation visible to the async proxy"),
    PtxFamily("prefetch.tensormap", "prefetch.tensormap [$0];", "l", VOID, True, 90, "sm80:no_op",
              "prefetch a tensor map (a __grid_constant__ kernel parameter)"),
    PtxFamily("mbarrier.arrive.expect_tx", _BAR.format("arrive.expect_tx") + " _, [$0], $1;", "r,r", VOID,
              True, 90, "sm90:arrive_expect_tx", "arrive and expect $1 transaction bytes this phase"),
    PtxFamily("mbarrier.arrive", _BAR.format("arrive") + " _, [$0];", "r", VOID, True, 90, "sm90:arrive",
              "arrive on a shared mbarrier"),
    PtxFamily("mbarrier.try_wait.parity", "{ .reg .pred p; KB_WAIT_${:uid}: " + _BAR.format("try_wait.parity")
              + " p, [$0], $1; @!p bra KB_WAIT_${:uid}; }", "r,r", VOID, True, 90, "sm90:try_wait_parity",
              "spin until the mbarrier's phase of parity $1 has completed"),
    PtxFamily("setmaxnreg", lambda action, count: f"setmaxnreg.{action}.sync.aligned.u32 {count};", "", VOID,
              True, 90, "sm80:no_op", "a warpgroup's registers a thread: `action` inc takes them from the "
              "block's pool (waiting until there are enough), dec gives them back (sm_90a)", ("action", "count")),
    PtxFamily("cp.async.bulk.tensor.2d", _TMA_2D, "r,l,r,r,r", VOID, True, 90, "sm90:tma_load_2d",
              "TMA: a 2-D box of a tensor map (coordinates $2 inner, $3 outer) into shared memory, "
              "completing its bytes on the mbarrier $4"),
    PtxFamily("cp.async.bulk.tensor.2d.store", _TMA_2D_STORE, "l,r,r,r", VOID, True, 90, "sm90:tma_store_2d",
              "TMA store: the box at shared address $3 (laid out as the tensor map's swizzle stores it) to "
              "the tensor map's array at coordinates $1 inner, $2 outer; box elements outside the array are "
              "not written; completes in this thread's bulk groups"),
    PtxFamily("cp.reduce.async.bulk.tensor.2d.add", _TMA_2D_REDUCE_ADD, "l,r,r,r", VOID, True, 90,
              "sm90:tma_reduce_add_2d", "TMA reduce: the box at shared address $3 (laid out as the tensor "
              "map's swizzle stores it) added element by element, atomically, into the tensor map's array at "
              "coordinates $1 inner, $2 outer; box elements outside the array are skipped; completes in this "
              "thread's bulk groups"),
    PtxFamily("cp.async.bulk.commit_group", "cp.async.bulk.commit_group;", "", VOID, True, 90,
              "sm90:bulk_commit", "close this thread's pending bulk (TMA store) copies into a bulk group"),
    PtxFamily("cp.async.bulk.wait_group.read", lambda keep: f"cp.async.bulk.wait_group.read {keep};", "", VOID,
              True, 90, "sm90:bulk_wait_read", "wait until at most `keep` of this thread's bulk groups may "
              "still read their shared memory (it may then be written again)", ("keep",), ("keep",)),
    PtxFamily("cp.async.bulk.wait_group", lambda keep: f"cp.async.bulk.wait_group {keep};", "", VOID, True, 90,
              "sm90:bulk_wait_read", "wait until at most `keep` of this thread's bulk groups are pending: the "
              "others complete, their writes (TMA stores, reduce-adds) done and visible to this thread",
              ("keep",), ("keep",)),
    PtxFamily("fence.proxy.async.global", "fence.proxy.async.global;", "", VOID, True, 90, "sm80:no_op",
              "order the async proxy's global writes this thread waited for before its later generic accesses"),
    # ------------------------------------------------------------------ sm_90: warpgroup MMA
    PtxFamily("wgmma.mma_async.ss", _wgmma_ss,
              lambda op, fence: ",".join(["=f"] * (op.n // 2) + ["l", "l", "r"] + [str(i) for i in range(op.n // 2)]),
              lambda op, fence: TupleType((F32,) * (op.n // 2)), True, 90, "sm90:wgmma",
              "warpgroup MMA m64nNk(32 bytes), A and B from shared-memory descriptors, the f32 "
              "accumulators tied; `fence`: a wgmma.fence rides in the statement", ("op", "fence"),
              ("op",)),
    PtxFamily("wgmma.mma_async.rs", _wgmma_rs,
              lambda op: ",".join(["=f"] * (op.n // 2) + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(op.n // 2)]),
              lambda op: TupleType((F32,) * (op.n // 2)), True, 90, "sm90:wgmma",
              "warpgroup MMA m64nNk16, A from registers (4 a thread), B from a descriptor", ("op",), ("op",)),
    PtxFamily("wgmma.desc", lambda lo, hi: "{ .reg .b32 l, h; add.u32 l, $1, %d; mov.b32 h, %d; mov.b64 $0, {l, h}; }"
              % (lo, hi), "=l,r", U64, True, 90, "sm90:descriptor",
              "a wgmma matrix descriptor from a start field `$1` (a shared address >> 4): low word $1 + `lo` "
              "(the start's offset and LBO), high word `hi` (SBO and swizzle). Made where it is used (an "
              "asm with side effects is neither hoisted nor shared), so a loop keeps one register a "
              "stage base live instead of a 64-bit descriptor a step", ("lo", "hi"), ("lo", "hi")),
    PtxFamily("wgmma.commit_group", "wgmma.commit_group.sync.aligned;", "", VOID, True, 90,
              "sm90:wgmma_commit", "close this warpgroup's issued wgmmas into a group"),
    PtxFamily("wgmma.wait_group", lambda pending, n: f"wgmma.wait_group.sync.aligned {pending};",
              lambda pending, n: _tied(["=f"] * n), lambda pending, n: TupleType((F32,) * n), True, 90,
              "sm90:wgmma_wait", "wait until at most `pending` wgmma groups are in flight; the `n` f32 "
              "accumulators pass through (tied), so no use of them moves above the wait",
              ("pending", "n"), ("pending",)),
    PtxFamily("wgmma.fence", "wgmma.fence.sync.aligned;",
              lambda types: _tied(["=f" if t == F32 else "=r" for t in types]),
              lambda types: TupleType(tuple(types)), True, 90, "sm90:wgmma_fence",
              "order register writes before the wgmmas that read them; the registers (`types`, f32 "
              "accumulators then u32 A fragments) pass through it tied", ("types",)),
)

FAMILIES: dict[str, PtxFamily] = {row.name: row for row in _ROWS}
