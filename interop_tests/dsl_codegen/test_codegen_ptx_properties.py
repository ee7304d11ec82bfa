"""Properties of the emitted PTX that performance and safety rely on: launch directives, read-only
loads, vector accesses for aligned chunks, ABI parameter layout, PTX version per arch, the fault path."""
from __future__ import annotations

import re

import pytest

from dsl.backend.ptxas import assemble
from dsl.backend.target import PTX_VERSION, TargetError, parse_arch
from dsl.ir import nodes as N
from dsl.ir.types import BF16, BOOL, F16, F32, F64, I32, INDEX, ChunkType
from interop_tests.dsl_codegen.codegen_kit import (P, R, arr, assemble_all, entry_body,
                                                   guarded_store_1d, kernel, load, params, ptx_of,
                                                   require_ptxas, sites, store, to_stage)


def vecadd(name="vecadd", layout="C", aligned16=True, check="none", **kw):
    a, b, out = params(("a", arr(F32, layout=layout, aligned16=aligned16)),
                       ("b", arr(F32, layout=layout, aligned16=aligned16)),
                       ("out", arr(F32, writable=True, layout=layout, aligned16=aligned16)))
    i = N.Var("i", INDEX)
    value = N.BinOp("add", load(a, [R(i)], check=check, site=1), load(b, [R(i)]), F32)
    extra = {"fault_sites": sites((1, "a"))} if check == "fault" else {}
    return kernel(name, [a, b, out], guarded_store_1d(out, i, value), **extra, **kw)


def chunked(n=4, dtype=F32, aligned16=True, layout="C"):
    a, out = params(("a", arr(dtype, layout=layout, aligned16=aligned16)),
                    ("out", arr(dtype, writable=True, layout=layout, aligned16=aligned16)))
    ch, k = N.Var("ch", ChunkType(n)), N.Var("k", INDEX)
    one = N.Const(1.0, dtype) if dtype.is_float else N.Const(1, dtype)
    body = [N.Assign(ch, N.ChunkValue(n)),
            N.ChunkLoop(k, R(ch), P(out), [store(out, [R(k)], N.BinOp("add", load(a, [R(k)], dtype), one,
                                                                      dtype), mode="guarded")])]
    return kernel(f"chunk{n}_{dtype.name}", [a, out], body)


def test_exact_block_emits_reqntid_and_launch_bounds_emit_maxntid():
    ptx = assemble_all(vecadd(exact_block=(128, 2, 1)))["sm_90"]
    assert re.search(r"\.reqntid 128, 2, 1", ptx)
    ptx = assemble_all(vecadd(max_threads=384))["sm_80"]
    assert re.search(r"\.maxntid 384\b", ptx) and ".reqntid" not in ptx
    plain = ptx_of(vecadd())
    assert ".reqntid" not in plain and ".maxntid" not in plain


def test_read_only_arrays_use_non_coherent_loads_and_writable_ones_do_not():
    ptx = assemble_all(vecadd())["sm_90"]
    body = entry_body(ptx, "vecadd")
    assert len(re.findall(r"ld\.global\.nc\.", body)) == 2
    assert re.search(r"st\.global\.(b32|f32)", body)


def test_in_place_pair_is_neither_noalias_nor_nc():
    fn = vecadd()
    ll = to_stage(fn, "llvm_ir", inplace=(("a", "out"),))
    params_line = next(line for line in ll.splitlines() if line.startswith("define"))
    a_decl = re.search(r'ptr[^,]*%"a"', params_line).group(0)
    b_decl = re.search(r'ptr[^,]*%"b"', params_line).group(0)
    assert "noalias" not in a_decl and "noalias" in b_decl
    ptx = ptx_of(vecadd(), inplace=(("a", "out"),))
    assert len(re.findall(r"ld\.global\.nc\.", ptx)) == 1      # only b


def test_kernel_params_follow_the_view_abi():
    ptx = ptx_of(vecadd(check="fault"))
    decl = ptx[ptx.index(".entry vecadd("):ptx.index(")", ptx.index(".entry vecadd("))]
    n_params = len(re.findall(r"\.param", decl))
    assert n_params == 3 * (1 + 1 + 1) + 1     # (ptr, extent, stride) x 3 arrays + fault record
    assert n_params == len(re.findall(r"\.param \.u64", decl))
    a, s, x = params(("s16", F16), ("sb", BF16), ("flag", BOOL))
    sc = kernel("scalars", [a, s, x], [])
    decl = ptx_of(sc)
    assert ".param .b16" in decl or ".param .f16" in decl or ".param .align 2 .b8" in decl
    assert ".param .b8" in decl or ".param .u8" in decl


@pytest.mark.parametrize("dtype,n", [(F32, 4), (I32, 4), (F64, 2), (F16, 8)], ids=str)
def test_aligned_contiguous_chunks_use_16_byte_vector_accesses(dtype, n):
    ptx = assemble_all(chunked(n, dtype))["sm_90"]
    vec = "v4" if dtype.bits == 32 else ("v2" if dtype.bits == 64 else "v4")
    assert re.search(rf"ld\.global\.nc\.{vec}\.(b|f|u|s)\d+", ptx), "no vector load"
    assert re.search(rf"st\.global\.{vec}\.(b|f|u|s)\d+", ptx), "no vector store"


def test_unaligned_or_strided_chunks_do_not_use_vector_accesses():
    for fn in (chunked(4, F32, aligned16=False), chunked(4, F32, layout="any", aligned16=False)):
        ptx = assemble_all(fn)["sm_90"]
        assert not re.search(r"\.v4\.", ptx)


def test_fault_path_claims_the_record_writes_it_and_exits():
    ptx = assemble_all(vecadd(check="fault"))["sm_90"]
    body = entry_body(ptx, "vecadd")
    assert re.search(r"atom\.cas\.b32\s+%r\d+, \[%rd\d+\], 0, 1;", body)
    for off, width in ((4, 32), (8, 64), (16, 64)):
        assert re.search(rf"st\.global\.b{width}\s+\[%rd\d+\+{off}\]", body), f"no store at +{off}"
    assert "exit;" in body and not re.search(r"\btrap\b", body)
    # the record pointer is the last parameter
    decl = body[:body.index(")")]
    last = re.findall(r"(vecadd_param_\d+)", decl)[-1]
    assert re.search(rf"ld\.param\.b64\s+%rd\d+, \[{last}\]", body)


def test_fault_record_field_values_in_llvm_ir():
    """The record gets the site id, the failing index and the extent of the failing axis."""
    ll = to_stage(vecadd(check="fault"), "llvm_ir")
    assert re.search(r'call i32 asm sideeffect "atom\.cas\.b32 \$0, \[\$1\], 0, 1;", "=r,l,~\{memory\}"\(ptr %"fault_record"\)', ll)
    assert re.search(r"store i32 1, ptr", ll)                       # site id 1
    assert re.search(r'store i64 %"?\.?\w+"?, ptr', ll)
    assert re.search(r'store i64 %"a\.shape0", ptr', ll)            # extent of axis 0 of `a`


def test_kernels_without_fault_sites_have_no_record_parameter():
    ptx = ptx_of(vecadd())
    decl = ptx[ptx.index(".entry vecadd("):ptx.index(")", ptx.index(".entry vecadd("))]
    assert len(re.findall(r"\.param", decl)) == 9 and "atom" not in ptx and "exit" not in ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_ptx_version_per_arch_assembles(arch):
    require_ptxas()
    ptx = ptx_of(vecadd(check="fault"), arch)
    v = PTX_VERSION[parse_arch(arch)]
    assert f".version {v // 10}.{v % 10}" in ptx and f".target {arch}" in ptx
    assert v <= 90                              # CUDA 13.0 driver JIT / ptxas read PTX <= 9.0
    assemble(ptx, arch)


def test_unknown_arch_is_a_clear_error():
    with pytest.raises(TargetError, match="arch: unsupported compute capability sm_50"):
        parse_arch("sm_50")
    with pytest.raises(TargetError, match="expected 'sm_XY'"):
        parse_arch("hopper")


def test_ieee_by_default_and_approximate_only_with_fastmath():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    x = load(a, [R(i)])
    value = N.BinOp("truediv", N.Math("exp", [x], F32), N.Math("sqrt", [x], F32), F32)
    fn = kernel("fm", [a, out], guarded_store_1d(out, i, value))
    ieee = ptx_of(fn)
    assert "div.rn.f32" in ieee and "sqrt.rn.f32" in ieee
    assert "div.approx" not in ieee and "div.full" not in ieee and "sqrt.approx" not in ieee
    fast = ptx_of(fn, fastmath=True)
    assert "div.rn.f32" not in fast and re.search(r"(div\.(approx|full)|rcp\.approx)", fast)
    assert "sqrt.approx" in fast or "rsqrt.approx" in fast
