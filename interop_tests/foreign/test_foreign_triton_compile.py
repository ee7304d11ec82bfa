"""Triton kernels compiled through Triton's own API for an explicit target (no GPU needed): the contract
inferred from Triton's signature and metadata, Triton's hidden scratch parameters counted from its PTX,
and the image check passing on Triton's cubin."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from bridge.errors import ContractDefinitionError, ForeignKernelError
from bridge.foreign import build_triton

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
tk = importlib.import_module("foreign_triton_kernels")     # Triton is there: any import error is a failure

ADD = dict(constexprs={"BLOCK": 1024}, access={"x": "read", "y": "read"},
           requires=["len(x) == n", "len(out) == n", "n <= BLOCK * 65535"], grid=("out", "BLOCK"))


def _ptx_param_count(ptx: str, name: str) -> int:
    """Parameters of `.entry name(...)`, counted from the text directly."""
    body = re.search(rf"\.entry\s+{name}\s*\(([^)]*)\)", ptx).group(1)
    return body.count(".param")


def test_add_contract_is_inferred_from_tritons_signature_and_metadata():
    b = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=90, **ADD)
    md = b.info["metadata"]
    d = b.contract.to_dict()
    ptr = {"kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 16, "abi": "pointer"}
    hidden = [{"name": n, "kind": "array", "dtype": "u8", "ndim": 1, "layout": "any", "align": 0,
               "access": "readwrite", "abi": "pointer", "optional": True} for n in (h.name for h in b.hidden)]
    assert d["args"] == [{"name": "x", **ptr, "access": "read"}, {"name": "y", **ptr, "access": "read"},
                         {"name": "out", **ptr, "access": "readwrite"},
                         {"name": "n", "kind": "scalar", "dtype": "i32"}, *hidden]
    assert d["block"] == {"exact": [128, 1, 1]} and d["min_cc"] == 90
    assert d["dynamic_smem"] == {"exact": md.shared}
    assert d["requires"] == ["len(x) == n", "len(out) == n", "n <= 1024 * 65535"]   # BLOCK written in
    assert d["grid_from"] == {"arg": "out", "tile": [1024]}
    assert b.name == md.name == "add"
    b.check()


def test_hidden_parameters_are_what_triton_appended_to_the_ptx():
    b = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=90, drop_unused=False, **ADD)
    assert b.info["image"] == "triton"
    assert _ptx_param_count(b.info["ptx"], "add") == 4 + len(b.hidden)
    if tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 5):
        assert [h.name for h in b.hidden] == ["_kb_global_scratch", "_kb_profile_scratch"]
    assert all(h.per_program == b.info["metadata"].global_scratch_size for h in b.hidden[:1])


@pytest.mark.parametrize("arch", [80, 90])
def test_unread_scratch_parameters_are_dropped_and_tritons_ptxas_reassembles_the_kernel(arch):
    """add needs no scratch: its PTX names the two scratch pointers only in the `.entry` list, so they are
    removed and the kernel takes exactly the user's 4 arguments (a plain bridge.Kernel once loaded)."""
    from bridge.foreign.cubin import cubin_params
    kept = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=arch, drop_unused=False, **ADD)
    b = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=arch, **ADD)
    assert len(kept.hidden) >= 1 and b.hidden == ()
    assert b.info["image"] == "triton ptxas" and b.image[:4] == b"\x7fELF"
    assert _ptx_param_count(b.info["ptx"], "add") == 4 == len(b.contract.args)
    assert [p.size for p in cubin_params(b.image, "add")] == [8, 8, 8, 4]
    assert [p.size for p in cubin_params(kept.image, "add")] == [8, 8, 8, 4] + [8] * len(kept.hidden)
    body = b.info["ptx"].split(".reqntid")[1]
    assert body == kept.info["ptx"].split(".reqntid")[1]         # the code itself is Triton's, untouched
    b.check()


def test_a_hidden_parameter_the_code_reads_is_kept():
    from bridge.foreign.triton_jit import _without_hidden
    ptx = (".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u64 .ptr .global "
           ".align 1 k_param_1\n)\n{\n\tld.param.b64 %rd1, [k_param_0];\n}\n")
    assert _without_hidden(ptx, "k", 1) == (".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0\n)"
                                            "\n{\n\tld.param.b64 %rd1, [k_param_0];\n}\n")
    reads = ptx.replace("[k_param_0]", "[k_param_1]")
    assert _without_hidden(reads, "k", 1) is None


@pytest.mark.parametrize("num_warps", [4, 8])
def test_softmax_block_and_shared_memory_follow_num_warps(num_warps):
    b = build_triton(tk.softmax, {"x": "*fp32", "out": "*fp32", "n_rows": "i32", "n_cols": "i32"}, arch=90,
                     constexprs={"BLOCK": 1024}, num_warps=num_warps, ndim={"x": 2, "out": 2},
                     access={"x": "read"}, grid=("x", (1,)),
                     requires=["x.shape == out.shape", "x.shape[0] == n_rows", "x.shape[1] == n_cols",
                               "n_cols <= BLOCK"])
    d = b.contract.to_dict()
    assert d["block"] == {"exact": [32 * num_warps, 1, 1]}
    assert d["dynamic_smem"] == {"exact": b.info["metadata"].shared}
    assert d["args"][0]["ndim"] == 2 and d["requires"][-1] == "n_cols <= 1024"
    assert d["grid_from"] == {"arg": "x", "tile": [1]}
    b.check()


def test_example_arguments_give_the_signature_dtypes_and_ndim():
    x = np.zeros((4, 8), np.float16)
    out = np.zeros(32, np.float32)
    b = build_triton(tk.axpb, (x, out, np.float16(2), 1.5, True, 2**31), arch=90)
    sig = b.info["signature"]
    assert sig == {"x": "*fp16", "out": "*fp32", "a": "fp16", "b": "fp32", "flag": "i1", "n": "i64",
                   "BLOCK": "constexpr"}
    assert b.info["constexprs"] == {"BLOCK": 256}            # the default of the constexpr left out
    args = b.contract.to_dict()["args"]
    assert [(a["name"], a["dtype"], a.get("ndim")) for a in args[:6]] == [
        ("x", "f16", 2), ("out", "f32", 1), ("a", "f16", None), ("b", "f32", None), ("flag", "bool", None),
        ("n", "i64", None)]
    b.check()                                                # scalar widths 2, 4, 1, 8 vs the cubin


def test_const_pointers_are_read_and_alignment_hints_can_be_dropped():
    b = build_triton(tk.add, "*kfp32, *kfp32, *fp32, i32", arch=90, constexprs={"BLOCK": 256}, pointer_align=None,
                     divisible={"n": 16})
    args = b.contract.to_dict()["args"]
    assert [a["access"] for a in args[:3]] == ["read", "read", "readwrite"]
    assert [a["align"] for a in args[:3]] == [0, 0, 0]
    assert b.contract.to_dict()["requires"] == ["n % 16 == 0"]


@pytest.mark.parametrize("kw,err,fragment", [
    (dict(signature="*fp32, *fp32, i32"), ContractDefinitionError, "3 entries for the 4 non-constexpr parameters"),
    (dict(signature="*fp32, *fp32, *fp128, i32"), ContractDefinitionError, "argument 'out': Triton type '*fp128'"),
    (dict(constexprs={"BLOCK": 64, "WIDTH": 2}), ContractDefinitionError, "constexprs: no parameter named 'WIDTH'"),
    (dict(access={"BLOCK": "read"}), ContractDefinitionError, "access: 'BLOCK' is not a runtime parameter"),
    (dict(grid="out"), ContractDefinitionError, "grid: expected (array name, tile)"),
    (dict(grid=("out", "NOPE")), ContractDefinitionError, "tile entry 'NOPE'"),
    (dict(signature={"x": "*fp32"}), ContractDefinitionError, "missing ['y', 'out', 'n']"),
    (dict(signature=("not an array", 1, 2, 3)), ContractDefinitionError, "argument 'x': expected an array"),
])
def test_bad_triton_declarations_are_refused_naming_what(kw, err, fragment):
    base = dict(signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 64})
    base.update(kw)
    with pytest.raises(err) as info:
        build_triton(tk.add, base.pop("signature"), arch=90, **base)
    assert fragment in str(info.value)


def test_clusters_are_refused_until_supported():
    with pytest.raises(ForeignKernelError, match=r"num_ctas=2 \(clusters\)"):
        build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=90, constexprs={"BLOCK": 256}, options={"num_ctas": 2})


def test_the_validator_accepts_the_user_arguments_with_the_hidden_ones_null():
    """The inferred contract, as the one validator runs it (described arrays, no GPU): the hidden scratch
    parameters are null (None), the grid is one program per 1024 elements, the block 32 * num_warps."""
    from interop_tests.contract.contract_support import attrs, desc, limits
    from bridge import _native
    from bridge.errors import AliasingError, DTypeError
    b = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=90, drop_unused=False, **ADD)
    n = 100_037
    x, y, out = desc((n,)), desc((n,), ptr=0x7F00_0010_0000), desc((n,), ptr=0x7F00_0020_0000)
    nulls = [None] * len(b.hidden)
    grid, block = _native.validate(b.contract.native(), [x, y, out, n, *nulls], limits=limits(), attrs=attrs())
    assert tuple(grid) == ((n + 1023) // 1024, 1, 1) and tuple(block) == (128, 1, 1)
    with pytest.raises(AliasingError):
        _native.validate(b.contract.native(), [x, y, x, n, *nulls], limits=limits(), attrs=attrs())
    with pytest.raises(DTypeError):
        _native.validate(b.contract.native(), [x, y, desc((n,), "f16", ptr=0x7F00_0030_0000), n, *nulls],
                         limits=limits(), attrs=attrs())


class _RecordingLauncher:
    def __init__(self):
        self.calls = []

    def launch(self, args, grid, block, smem, stream, keep_all=False, peer_access=False):
        self.calls.append((args, grid, block, smem, stream, keep_all, peer_access))


class _FakeKernel:
    name, device = "add", 0

    def __init__(self):
        self.launcher = _RecordingLauncher()


def test_foreign_kernel_passes_the_hidden_parameters_and_keeps_every_array_alive():
    from bridge.foreign.launch import ForeignKernel, Hidden
    fake = _FakeKernel()
    k = ForeignKernel._create(fake, (Hidden("_kb_global_scratch"), Hidden("_kb_profile_scratch")), None, {})
    k(1, 2, 3, 4)
    k[(10,), 128, "s", 0](1, 2)
    k.launch(5, grid=7, block=128, stream="t")
    assert fake.launcher.calls == [((1, 2, 3, 4, None, None), None, None, None, None, True, False),
                                   ((1, 2, None, None), (10,), 128, 0, "s", True, False),
                                   ((5, None, None), 7, 128, None, "t", True, False)]
    with pytest.raises(TypeError, match="unexpected keyword"):
        k(1, grd=3)
    with pytest.raises(TypeError):
        ForeignKernel()
