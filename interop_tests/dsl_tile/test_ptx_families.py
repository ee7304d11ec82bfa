"""Every row of the PTX instruction table (dsl/tile/ptx/table.py) is proven: its text, constraints and
result type agree; its CPU semantics resolve; each form the probes use assembles with ptxas at the row's
minimum arch; and a probe kernel per row (or per group of rows that only work together) gives, in the
simulator and on the GPU, what a NumPy reference written from the PTX ISA gives.

The tests iterate FAMILIES, so a new row fails here until a probe uses it (ptx_probes_sm80.py,
ptx_probes_sm90.py). TMA is probed standalone: the tensor map is a kernel parameter the launcher encodes
from the array through the contract's "tensor_maps", as for the GEMM.

GPU part (`-m gpu`): python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_ptx_families.py
"""
from __future__ import annotations

import re

import numpy as np
import ptx_probe_kit as kit
import ptx_probes_sm80 as P80
import ptx_probes_sm90 as P90
import pytest

from dsl.backend.ptxas import assemble, find_ptxas
from dsl.backend.target import SUPPORTED_ARCHS, canonical_arch, parse_arch
from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, F64, U32, U64, VOID, ScalarType, TupleType, VoidType
from dsl.tile.ptx import sm80, sm90
from dsl.tile.ptx import table
from dsl.tile.ptx.mma_types import WgmmaOp
from dsl.tile.ptx.table import FAMILIES, PtxFamily, SemanticsRef, instruction

PROBES = {p.name: p for p in P80.probes() + P90.probes()}
SEEDS = (20261203, 7)
LOWEST_ARCH = min(parse_arch(a) for a in SUPPORTED_ARCHS)     # the lowest arch the code generator targets
F8 = ("e4m3", "e5m2")


def forms() -> dict[str, list[dict]]:
    """family -> the distinct parameter sets the probes use it with (its representative forms)."""
    out: dict[str, list[dict]] = {}
    for probe in PROBES.values():
        for family, params in probe.builder().ptx:
            if params not in out.setdefault(family, []):
                out[family].append(params)
    return out


FORMS = forms()
COVERS = {f: sorted(n for n, p in PROBES.items() if f in p.families) for f in FAMILIES}


def form_arch(family: str, params: dict) -> int:
    """The arch a form needs: its row's min_arch, except mma.sync's f8 forms (m16n8k32 e4m3/e5m2),
    which PTX has from sm_89 on (the row's 80 is that of its 16-bit and tf32 forms), and loads with an
    L2 prefetch size (ld.global.run's `hint`, sm_80 on: ptxas refuses `.L2::256B` below); rows of sm_70
    are assembled for the lowest arch the code generator targets."""
    cc = FAMILIES[family].min_arch
    if family == "mma.sync" and params["a_type"] in F8:
        cc = max(cc, 89)
    if family == "ld.global.run" and params.get("hint", "none") != "none":
        cc = max(cc, 80)
    return max(cc, LOWEST_ARCH)


def arch_name(cc: int, families) -> str:
    """sm_XY, or sm_XYa when a statement exists only on the arch-specific target (wgmma, setmaxnreg)."""
    return canonical_arch(cc, specific=any(f.startswith("wgmma.") or f == "setmaxnreg" for f in families))


def probe_arch(probe: kit.Probe) -> int:
    return max(form_arch(f, p) for f, p in probe.builder().ptx)


def inline_ptx(node) -> list[TN.InlinePtx]:
    """Every InlinePtx below an IR node."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, TN.InlinePtx):
            found.append(n)
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, (N.Expr, N.Stmt, N.Function)):
            stack.extend(v for v in vars(n).values() if isinstance(v, (list, N.Expr, N.Stmt)))
    return found


# ------------------------------------------------------------------------------ the table itself
@pytest.mark.parametrize("family", sorted(FAMILIES), ids=[f"{f} <- {' '.join(COVERS[f]) or 'NO PROBE'}"
                                                           for f in sorted(FAMILIES)])
def test_every_row_is_run_by_a_probe(family):
    """Which probes cover the row (COVERS, in the test id): none is a failure, so no row goes unproven."""
    assert COVERS[family], f"PTX family {family!r} is used by no probe: add one to ptx_probes_sm80/sm90.py"
    assert FORMS.get(family), family


@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_probe_records_the_statements_its_kernel_holds(name):
    """The coverage above comes from the kernels: each recorded statement is an InlinePtx of the IR,
    with as many operands as its constraints have inputs and the semantics of its row."""
    probe = PROBES[name]
    nodes = inline_ptx(probe.fn.body)
    assert sorted(n.sim.family for n in nodes) == sorted(f for f, _ in probe.builder().ptx)
    for n in nodes:
        _, ins = kit.split_constraints(n.constraints)
        assert len(n.args) == len(ins), f"{n.sim.family}: {len(n.args)} operands for constraints {n.constraints!r}"


_LETTER = {"f": lambda t: t == F32, "r": lambda t: t.bits == 32 and t.is_int,
           "h": lambda t: t.bits == 16, "l": lambda t: t.bits == 64 and t.is_int, "d": lambda t: t == F64}


def form_problems(family: str, row: PtxFamily, params: dict) -> list[str]:
    """What is inconsistent in one rendered form of `row`: $n beyond the operands, an input the text
    never reads, an output neither written nor tied, outputs that disagree with the result type, a
    statement without results that could be deleted as dead code, or `instruction()` building another
    statement than the row renders."""
    text, cons, result = row.render(params)
    where = f"{family} {params}"
    outs, ins = kit.split_constraints(cons)
    used = {int(x) for x in re.findall(r"\$(\d+)", text)}
    wrong = [f"{where}: {text!r} names ${n}, beyond its {len(outs) + len(ins)} operands ({cons!r})"
             for n in sorted(used) if n >= len(outs) + len(ins)]
    wrong += [f"{where}: input constraint {c!r} is neither a register letter nor a tied output"
              for c in ins if not (c in _LETTER or c.isdigit() and int(c) < len(outs))]
    # an input is read by the text; an output is written by it or passed through from its tied input
    passed = {int(c) for c in ins if c.isdigit()}
    lost = ({len(outs) + k for k, c in enumerate(ins) if not c.isdigit()} | set(range(len(outs)))) - used - passed
    wrong += [f"{where}: operands {sorted(lost)} are neither in {text!r} nor tied"] if lost else []
    types = kit.result_types(result)
    if len(types) != len(outs):
        wrong.append(f"{where}: {len(outs)} outputs ({cons!r}) but the result type is {result}")
    wrong += [f"{where}: output ={c} but typed {t}" for c, t in zip(outs, types)
              if not (isinstance(t, ScalarType) and _LETTER.get(c, lambda t: False)(t))]
    if isinstance(result, VoidType) and not row.side_effects:
        wrong.append(f"{where}: a statement without results needs side effects, else it is dead code")
    stmt = instruction(family, [N.Const(0, U32)] * len(ins), **params)
    if (stmt.asm, stmt.constraints, stmt.type, stmt.side_effects) != (text, cons, result, row.side_effects) or \
            stmt.sim != SemanticsRef(family, tuple(params[p] for p in row.sim_params)):
        wrong.append(f"{where}: instruction() builds another statement than the row renders")
    return wrong


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_row_text_constraints_and_result_type_agree(family):
    row = FAMILIES[family]
    assert set(row.sim_params) <= set(row.params), f"{family}: sim_params {row.sim_params} not among {row.params}"
    wrong = [m for params in FORMS.get(family, []) for m in form_problems(family, row, params)]
    assert not wrong, "\n".join(wrong)


BROKEN = [
    (PtxFamily("x", "add.u32 $0, $1, $3;", "=r,r,r", U32, False, 80, "sm80:no_op", ""), "names $3"),
    (PtxFamily("x", "mov.b32 $0, $1;", "=r,r,r", U32, False, 80, "sm80:no_op", ""), "operands [2]"),
    (PtxFamily("x", "mov.b32 $0, $1;", "=f,r", U32, False, 80, "sm80:no_op", ""), "output =f but typed u32"),
    (PtxFamily("x", "mov.b32 $0, $1;", "=r,r", TupleType((U32, U32)), False, 80, "sm80:no_op", ""),
     "1 outputs"),
    (PtxFamily("x", "fence.sc.cta;", "", VOID, False, 80, "sm80:no_op", ""), "dead code"),
    (PtxFamily("x", "wgmma.wait_group.sync.aligned 0;", "=f,=f,0", TupleType((F32, F32)), True, 90,
                     "sm90:wgmma_wait", ""), "operands [1]"),
]


@pytest.mark.parametrize("row,problem", BROKEN, ids=[b[1] for b in BROKEN])
def test_a_broken_row_is_reported(monkeypatch, row, problem):
    """The row checks can fail: a row with one inconsistency is reported, naming it."""
    monkeypatch.setitem(FAMILIES, "x", row)
    assert any(problem in m for m in form_problems("x", row, {})), form_problems("x", row, {})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_row_semantics_resolve_to_a_callable(family):
    row = FAMILIES[family]
    module, _, name = row.semantics.partition(":")
    assert module in ("sm80", "sm90") and hasattr({"sm80": sm80, "sm90": sm90}[module], name), row.semantics
    for params in FORMS.get(family, []):
        fn = SemanticsRef(family, tuple(params[p] for p in row.sim_params)).resolve()
        assert callable(fn), f"{family} {params}: {fn!r}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_instruction_names_missing_and_unexpected_parameters(family):
    row = FAMILIES[family]
    params = dict(FORMS[family][0]) if FORMS.get(family) else {}
    with pytest.raises(TypeError, match=rf"{re.escape(family)}.*unexpected \['bogus'\]"):
        instruction(family, [], **params, bogus=1)
    for p in row.params:
        fewer = {k: v for k, v in params.items() if k != p}
        with pytest.raises(TypeError, match=rf"{re.escape(family)}.*missing \['{p}'\]"):
            instruction(family, [], **fewer)


# ------------------------------------------------------------------------------ ptxas
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed: cannot assemble the PTX")
LETTER_TYPES = {"r": U32, "l": U64, "f": F32, "h": F16, "d": F64}


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_form_of_a_row_assembles_alone_at_its_min_arch(family):
    """A kernel holding just the statement (operands loaded, results stored) for each representative
    form, assembled for the form's arch (form_arch)."""
    from dsl.compiler import compile_ir
    from dsl.options import KernelOptions
    for params in FORMS.get(family, []):
        fn = kit.synth_kernel(family, params, LETTER_TYPES)
        arch = arch_name(form_arch(family, params), [family])
        ck = compile_ir(fn, KernelOptions(block=fn.exact_block, boundscheck=False), arch,
                        contract_json=kit.contract_json(fn))
        usage, _ = assemble(ck.ptx, arch)
        assert [u.kernel for u in usage] == [fn.name], (family, params)


@pytest.mark.slow
@needs_ptxas
def test_the_f8_forms_of_mma_sync_need_sm89_not_the_rows_min_arch():
    """Why form_arch raises mma.sync's f8 forms: ptxas refuses them at the row's min_arch."""
    from dsl.backend.ptxas import PtxasError
    probe = PROBES["mma.sync-m16n8k32-e4m3-e4m3"]
    ck = kit.compile_probe(probe, f"sm_{FAMILIES['mma.sync'].min_arch}")
    with pytest.raises(PtxasError, match="sm_89"):
        assemble(ck.ptx, f"sm_{FAMILIES['mma.sync'].min_arch}")


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_kernel_assembles(name):
    probe = PROBES[name]
    arch = arch_name(probe_arch(probe), probe.families)
    usage, _ = assemble(kit.compile_probe(probe, arch).ptx, arch)
    assert usage and usage[0].spill_stores == 0, usage


# ------------------------------------------------------------------------------ the simulator
def check(probe: kit.Probe, got: dict, want: dict, what: str, slack: float = 1.0) -> list[str]:
    return [m for name in probe.outputs if (m := kit.mismatches(
        probe, name, got[name], want[name], None if probe.exact else slack * want[name + "~"], what))]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_in_the_simulator_matches_the_isa_reference(name, seed):
    probe = PROBES[name]
    given = probe.inputs(np.random.default_rng(seed))
    got = kit.simulate(probe, probe.arguments(given))
    wrong = check(probe, got, probe.reference(given), "the PTX ISA reference")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("probe_name,constant,value,why", [
    ("tma-store", "STORE_BOXES", {**P90.STORE_BOXES, "f16": ((16, 64), (40, 104), ((60, 30), (8, 5)))},
     "not on a 16-byte boundary"),
    ("tma-store", "REDUCE_AT", ((6, 30), (24, 6)), "not on a 16-byte boundary"),
    ("tma+mbarrier", "LOADS", ((44, 30), (-16, -3)), "not on a 16-byte boundary"),
    ("tma-store", "STORE_BOXES", {**P90.STORE_BOXES, "f32": ((16, 32), (40, 72), ((48, 30), (-16, -3)))},
     "may not start before the array"),
    ("tma-store", "REDUCE_AT", ((8, 30), (24, -6)), "may not start before the array"),
])
def test_the_simulator_refuses_a_tma_copy_the_gpu_faults_on(monkeypatch, probe_name, constant, value, why):
    """A TMA copy whose innermost coordinate is not on a 16-byte boundary, or a store or reduce-add at
    a negative coordinate, is an illegal instruction on the H200 (2026-12-05); the simulator refuses
    it with the rule, rather than computing what the GPU never will."""
    from dsl.sim.faults import SimulationError
    monkeypatch.setattr(P90, constant, value)
    probe = {p.name: p for p in P90.probes()}[probe_name]     # built afresh: a probe keeps its kernel
    args = probe.arguments(probe.inputs(np.random.default_rng(SEEDS[0])))
    with pytest.raises(SimulationError, match=why):
        kit.simulate(probe, args)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_gpu_launchs_contract_accepts_the_probe_arguments(name):
    """The contract the GPU test launches with (its exact block, dynamic shared memory, tensor maps)
    validates these arguments, through the one native validator with host memory standing in."""
    from dsl.sim.validator import host_launcher
    probe = PROBES[name]
    args = probe.arguments(probe.inputs(np.random.default_rng(SEEDS[0])))
    launcher = host_launcher(kit.contract_json(probe.fn, probe.shared_mem), probe.fn.name)
    grid, block, smem, skip = launcher.validate_only(tuple(args), grid=probe.grid, block=probe.block,
                                                     shared_mem=probe.shared_mem or None)
    assert (grid, block, smem, skip) == ((probe.grid, 1, 1), (probe.block, 1, 1), probe.shared_mem, False)


# Semantics that are wrong in a way the probe must see: (probe, family, SemanticsRef args, stand-in).
WRONG = [
    ("ldmatrix.x4", "ldmatrix.x4", (False,), lambda: sm80.ldmatrix(True)),
    ("cvt.rna.tf32", "cvt.rna.tf32.f32", (), lambda: sm80.semantics(
        lambda args: np.asarray(args[0], np.uint32) & np.uint32(0xFFFFE000), per_thread=True)),
    ("mma.sync-m16n8k8-tf32-tf32", "mma.sync", ("tf32", "tf32"), lambda: sm80.mma_packed("f16", "f16")),
    ("mov.b32.pack-bf16", "mov.b32.pack", (BF16,), lambda: sm80.pack_halves(F16)),
    ("cvt.rn.pack-bf16", "cvt.rn.pack", (BF16,), lambda: sm80.semantics(     # truncated, not rounded
        lambda args: (np.asarray(args[0], np.float32).view(np.uint32) >> 16)
        | (np.asarray(args[1], np.float32).view(np.uint32) & np.uint32(0xFFFF0000)), per_thread=True)),
    ("cvt.rn.pack-f16", "cvt.rn.pack", (F16,), lambda: sm80.cvt_pack(BF16)),
    ("cp.async", "cp.async.wait_group", (1,), lambda: sm80.wait_group(2)),
    ("wgmma.ss-n64-bf16-bf16-kmajor", "wgmma.mma_async.ss", (WgmmaOp(64, "bf16", "bf16", False),),
     lambda: sm90.wgmma(WgmmaOp(64, "bf16", "bf16", True))),
    ("wgmma.ss-n128-bf16-bf16-mnmajor-a-mnmajor", "wgmma.mma_async.ss",            # A read K-major
     (WgmmaOp(128, "bf16", "bf16", True, trans_a=True),), lambda: sm90.wgmma(WgmmaOp(128, "bf16", "bf16", True))),
    ("tma+mbarrier", "cp.async.bulk.tensor.2d", (), lambda: sm80.semantics(     # the row coordinate off by one
        lambda args, mach, lanes: sm90.tma_load_2d([args[0], args[1], args[2], np.asarray(args[3]) + 1, args[4]],
                                                   mach, lanes),
        machine=True, per_thread=True)),
    ("vector-run-f16x8-nc", "ld.global.run", (F16, 8), lambda: sm80.semantics(      # the predicate ignored
        lambda args, mach, lanes: sm80.ld_run(F16, 8)([args[0], np.ones_like(args[1]), args[2]], mach, lanes),
        machine=True, per_thread=True)),
    ("vector-run-f32x4", "st.global.run", (F32, 4), lambda: sm80.semantics(         # the predicate ignored
        lambda args, mach, lanes: sm80.st_run(F32, 4)([args[0], np.ones_like(args[1]), *args[2:]], mach, lanes),
        machine=True, per_thread=True)),
]


@pytest.mark.parametrize("name,family,args,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_a_probe_sees_wrong_semantics(monkeypatch, name, family, args, wrong):
    """The probes can fail: with a plausible but wrong semantics for one row, the simulated result no
    longer matches the reference."""
    probe = PROBES[name]
    monkeypatch.setitem(table._RESOLVED, SemanticsRef(family, args), wrong())
    given = probe.inputs(np.random.default_rng(SEEDS[0]))
    got = kit.simulate(probe, probe.arguments(given))
    assert check(probe, got, probe.reference(given), "the PTX ISA reference")


# ------------------------------------------------------------------------------ the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_on_the_gpu_matches_the_simulator_and_the_reference(name):
    """Random operands (fixed seed) on the device and in the simulator: both match the reference, and
    each other bit for bit (data movement) or within twice the reference's bound (MMA sums: the
    tensor cores add in another order)."""
    import bridge
    probe = PROBES[name]
    dev = bridge.current_device()
    need = probe_arch(probe)
    if parse_arch(dev.arch) < need:
        pytest.skip(f"{name} needs sm_{need}; this device is {dev.arch}")
    given = probe.inputs(np.random.default_rng(SEEDS[0]))
    args = probe.arguments(given)
    want = probe.reference(given)
    simulated = kit.simulate(probe, args)
    on_gpu = kit.run_on_gpu(probe, args, arch_name(parse_arch(dev.arch), probe.families))
    wrong = check(probe, on_gpu, want, "the PTX ISA reference") + check(probe, simulated, want, "the PTX ISA reference")
    sim_as_ref = {**simulated, **{k: v for k, v in want.items() if k.endswith("~")}}
    wrong += check(probe, on_gpu, sim_as_ref, "the simulator", slack=2.0)
    assert not wrong, "\n".join(wrong)
