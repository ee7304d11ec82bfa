"""Wrap-time parameter checks: the parameter lists read from PTX `.entry` directives, cubin `.nv.info`
records and fatbin entries, compared with what a contract packs; a declaration that does not match
the compiled kernel is a ForeignKernelError naming kernel, parameter and both sizes, before any load."""
from __future__ import annotations

import re
import struct
import subprocess

import pytest

import bridge
from bridge.errors import ForeignKernelError
from bridge import fatbin
from bridge.fatbin import ModuleFormatError
from bridge.foreign import check_image, declare, image_params
from bridge.foreign.cubin import cubin_kernels, cubin_params
from bridge.foreign.params import contract_params
from bridge.foreign.ptx import ptx_entries, ptx_params
from interop_tests.required_tools import require_tool

SOURCE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mixed(char c, short s, __half h, double d, long long q, bool b, const float* p,
                                 float* out) {
  if (threadIdx.x == 0) out[0] = c + s + __half2float(h) + d + q + b + p[0];
}
"""
SAXPY = "void saxpy(float a, const float* x, float* y, int n)"
MIXED = "void mixed(char c, short s, __half h, double d, long long q, bool b, const float* p, float* out)"
# C ABI of `mixed`, written by hand: sizes, and offsets each aligned to its size
MIXED_SIZES = [1, 2, 2, 8, 8, 1, 8, 8]
MIXED_OFFSETS = [0, 2, 4, 8, 16, 24, 32, 40]


@pytest.fixture(scope="module")
def images(nvcc, tmp_path_factory):
    """{'ptx' | 'cubin' | 'fatbin': bytes} of SOURCE, built by nvcc."""
    d = tmp_path_factory.mktemp("foreign_images")
    src = d / "k.cu"
    src.write_text(SOURCE)
    out = {}
    for kind, flags in (("ptx", ["-ptx", "-arch=sm_90"]), ("cubin", ["-cubin", "-arch=sm_90"]),
                        ("fatbin", ["-fatbin", "-gencode=arch=compute_80,code=sm_80",
                                    "-gencode=arch=compute_90,code=[sm_90,compute_90]"])):
        path = d / f"k.{kind}"
        proc = subprocess.run([nvcc, *flags, "-o", str(path), str(src)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out[kind] = path.read_bytes()
    return out


@pytest.mark.slow
def test_cubin_records_agree_with_cuobjdump(images, tmp_path):
    """Our .nv.info reader vs NVIDIA's own (cuobjdump -elf prints each KPARAM_INFO record)."""
    from bridge.toolkit import locate
    cuobjdump = require_tool("cuobjdump", locate("cuobjdump").path)
    path = tmp_path / "k.cubin"
    path.write_bytes(images["cubin"])
    text = subprocess.run([cuobjdump, "-elf", str(path)], capture_output=True, text=True, timeout=120).stdout
    for name in ("saxpy", "mixed"):
        section = re.split(rf"^\.nv\.info\.{name}$", text, flags=re.M)[1].split("\n.nv.", 1)[0]
        theirs = sorted((int(o, 16), int(off, 16), int(size, 16)) for o, off, size in re.findall(
            r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)", section))
        ours = [(i, p.offset, p.size) for i, p in enumerate(cubin_params(images["cubin"], name))]
        assert theirs and ours == theirs
    assert sorted(cubin_kernels(images["cubin"])) == ["mixed", "saxpy"]


@pytest.mark.slow
def test_every_image_kind_states_the_c_abi_of_mixed(images):
    assert [p.size for p in cubin_params(images["cubin"], "mixed")] == MIXED_SIZES
    assert [p.offset for p in cubin_params(images["cubin"], "mixed")] == MIXED_OFFSETS
    ptx = ptx_params(images["ptx"], "mixed")
    assert [p.size for p in ptx] == MIXED_SIZES and [p.align for p in ptx] == MIXED_SIZES
    parts = image_params(images["fatbin"], "mixed")
    # sm_80 and sm_90 cubins, and the compute_90 PTX, which nvcc 13 zstd-compresses: read only where a
    # zstd decoder is importable (the next test takes it away)
    assert [w for w, _ in parts][:2] == ["the fatbin elf entry for arch 80", "the fatbin elf entry for arch 90"]
    assert len(parts) == (3 if fatbin.zstd_available() else 2)
    assert all([p.size for p in params] == MIXED_SIZES for _, params in parts)
    assert [p.offset for p in contract_params(declare(MIXED))] == MIXED_OFFSETS


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ptx", "cubin", "fatbin"])
def test_matching_declarations_pass_the_check(images, kind):
    check_image(images[kind], "saxpy", declare(SAXPY, access={"y": "readwrite"}))
    check_image(images[kind], "mixed", declare(MIXED))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ptx", "cubin", "fatbin"])
def test_one_parameter_too_many_is_refused(images, kind):
    with pytest.raises(ForeignKernelError) as info:
        check_image(images[kind], "saxpy", declare("void saxpy(float a, const float* x, float* y, int n, int m)"))
    e = info.value
    assert (e.kernel, e.param, e.expected, e.actual) == ("saxpy", 4, 5, 4)
    assert "the contract packs 5 kernel parameter(s)" in str(e) and "declares 4" in str(e)
    assert "parameter #4 ('m', i32 scalar) has no counterpart" in str(e)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ptx", "cubin", "fatbin"])
def test_an_int_declared_where_the_kernel_has_a_pointer_is_refused(images, kind):
    with pytest.raises(ForeignKernelError) as info:
        check_image(images[kind], "saxpy", declare("void saxpy(float a, int x, float* y, int n)"))
    e = info.value
    assert (e.kernel, e.param, e.expected, e.actual, e.arg_name) == ("saxpy", 1, 4, 8, "x")
    assert str(e).startswith("saxpy: kernel parameter #1 ('x', i32 scalar): the contract packs 4 bytes, the ")
    assert "declares 8 bytes" in str(e)


@pytest.mark.slow
def test_a_float_declared_where_the_ptx_has_an_integer_is_refused(images):
    with pytest.raises(ForeignKernelError, match=r"#3 \('n', f32 scalar\): the contract passes a floating-point "
                                                 r"value, the PTX entry declares an integer"):
        check_image(images["ptx"], "saxpy", declare("void saxpy(float a, const float* x, float* y, float n)"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ptx", "cubin", "fatbin"])
def test_a_kernel_the_image_lacks_is_named_with_the_ones_it_has(images, kind):
    with pytest.raises(ForeignKernelError, match=r"saxpi.*(mixed|saxpy)"):
        check_image(images[kind], "saxpi", declare("void saxpi(int n)"))


@pytest.mark.slow
def test_foreign_kernel_refuses_before_loading_anything(images, tmp_path):
    """On a machine without a GPU a load would raise NoDeviceError: the check comes first."""
    path = tmp_path / "k.cubin"
    path.write_bytes(images["cubin"])
    with pytest.raises(ForeignKernelError, match="kernel parameter #3"):
        bridge.foreign.kernel(str(path), contract="void saxpy(float a, const float* x, float* y, long n)")


@pytest.mark.slow
def test_a_truncated_nv_info_record_is_a_module_format_error(images):
    data = bytearray(images["cubin"])
    blob_at = data.find(b"\x04\x17\x0c\x00")          # first KPARAM_INFO record header (SVAL, 12 bytes)
    assert blob_at > 0
    struct.pack_into("<H", data, blob_at + 2, 0xFFF0)   # its payload now runs past the section
    with pytest.raises(ModuleFormatError, match="runs past its section"):
        for name in ("saxpy", "mixed"):
            cubin_params(bytes(data), name)


def test_installed_cpp_kernels_take_the_parameters_their_kb_contracts_pack():
    """Every KB_CONTRACT of the package's fatbins vs the kernels nvcc compiled (every entry)."""
    from bridge import cpp_kernels, fatbin
    names = cpp_kernels.available()
    if not names:
        pytest.skip(f"the package's C++ kernels are not installed here: {cpp_kernels.status()}")
    checked = 0
    for module in names:
        data = cpp_kernels.path(module).read_bytes()
        for kernel, text in fatbin.embedded_contracts(data).items():
            check_image(data, kernel, text)
            checked += 1
    assert checked >= len(names)


def test_a_dsl_kernel_ptx_takes_the_view_abi_and_fault_record_its_contract_packs(tmp_path, monkeypatch):
    """View ABI (pointer, extents, strides per array) and the fault record, from our own DSL compiler."""
    from dsl.compiler import compile_kernel
    from dsl.ir.types import F32, I32, ArrayType
    mod = tmp_path / "kb_foreign_dslk.py"
    mod.write_text("from dsl import simt, f32, i32\n\n@simt.kernel\n"
                   "def scaled(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 1], s: f32, n: i32):\n"
                   "    i = simt.thread.index_1d()\n    out[i] = a[i, 0] * s + n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import kb_foreign_dslk
    k = kb_foreign_dslk.scaled
    ck = compile_kernel(k.pyfunc, [ArrayType(F32, 2, layout="C"), ArrayType(F32, 1, writable=True, layout="C"),
                                   F32, I32], k.options, "sm_90")
    params = ptx_params(ck.ptx, ck.name)
    assert len(params) == (1 + 2 * 2) + (1 + 2 * 1) + 2 + 1    # a, out, s and n, the fault record
    check_image(ck.ptx.encode(), ck.name, ck.contract_json)
    with pytest.raises(ForeignKernelError):
        check_image(ck.ptx.encode(), ck.name, ck.contract_json.replace('"ndim":2', '"ndim":1', 1))


PTX_BY_HAND = """
.version 8.0
.target sm_90
.address_size 64
// .entry commented(.param .u32 x)
.visible .entry tri(
    .param .u64 .ptr .global .align 16 tri_param_0,   // Triton's pointer spelling
    .param .align 2 .b8 tri_param_1[2],
    .param .f32 tri_param_2,
    .param .align 64 .b8 tri_param_3[128],
    .param .u8 tri_param_4
)
.reqntid 128
{ ret; }
.entry none()
{ ret; }
"""


def test_ptx_parameter_spellings_by_hand():
    entries = ptx_entries(PTX_BY_HAND)
    assert sorted(entries) == ["none", "tri"] and entries["none"] == []
    got = [(p.size, p.align, p.pointer, p.kind) for p in entries["tri"]]
    assert got == [(8, 8, True, "i"), (2, 2, None, "b"), (4, 4, None, "f"), (128, 64, None, "b"), (1, 1, None, "i")]


def test_a_pointer_in_the_ptx_where_the_contract_has_a_scalar_is_refused():
    ptx = ".version 8.0\n.target sm_90\n.entry k(.param .u64 .ptr .global .align 1 k_param_0)\n{ ret; }\n"
    with pytest.raises(ForeignKernelError, match=r"'p', i64 scalar\): the PTX entry declares a pointer"):
        check_image(ptx.encode(), "k", declare("void k(long long p)"))
    check_image(ptx.encode(), "k", declare("void k(const float* p)"))


def _no_zstd(where: str):
    raise fatbin.CompressedEntryError(f"{where} is zstd-compressed and no zstd decoder is importable")


@pytest.mark.slow
def test_an_entry_without_a_decoder_is_skipped_when_a_cubin_has_the_kernel(images, monkeypatch):
    monkeypatch.setattr(fatbin, "_zstd_decoder", _no_zstd)
    parts = image_params(images["fatbin"], "mixed")
    assert [w for w, _ in parts] == ["the fatbin elf entry for arch 80", "the fatbin elf entry for arch 90"]
    check_image(images["fatbin"], "mixed", declare(MIXED))
    with pytest.raises(ForeignKernelError):            # the cubins are still checked
        check_image(images["fatbin"], "saxpy", declare("void saxpy(float a, const float* x, float* y, int n, int m)"))
    with pytest.raises(ForeignKernelError, match=r"saxpi.*mixed.*1 compressed entry not read"):
        check_image(images["fatbin"], "saxpi", declare("void saxpi(int n)"))


@pytest.mark.slow
def test_a_fatbin_whose_only_entry_cannot_be_read_says_what_to_install(nvcc, tmp_path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    out = tmp_path / "k.fatbin"
    proc = subprocess.run([nvcc, "-fatbin", "-gencode=arch=compute_90,code=compute_90", "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    if [e.compression for e in fatbin.fatbin_entries(data) if e.kind == "ptx"] != ["zstd"]:
        pytest.skip("this nvcc did not zstd-compress the PTX entry")
    monkeypatch.setattr(fatbin, "_zstd_decoder", _no_zstd)
    with pytest.raises(fatbin.CompressedEntryError, match="zstd"):
        check_image(data, "saxpy", declare(SAXPY, access={"y": "readwrite"}))
