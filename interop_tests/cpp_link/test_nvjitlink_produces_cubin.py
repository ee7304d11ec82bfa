"""CPU: nvJitLink links DSL PTX with C++ (.cu → PTX or LTO-IR, .ptx, .o) into a cubin, both ways."""
import subprocess

import numpy as np
import pytest

from dsl import f32, link
from interop_tests.cpp_link import link_kernels_src as src

ARCHS = ["sm_80", "sm_90"]


def _is_cubin(data: bytes, arch: str) -> bool:
    """An ELF whose e_flags carry the SM number (CUDA >= 12 cubins: bits 8..15, older: low byte)."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return False
    flags = int.from_bytes(data[48:52], "little")
    sm = int(arch.split("_")[1])
    return sm in (flags & 0xFF, (flags >> 8) & 0xFF)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("lto", [False, True])
def test_dsl_kernel_links_with_cpp_device_function(arch, lto, nvjitlink, nvcc):
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    lk = link.link_kernel(src.affine_via_cpp, x, np.float32(2), np.float32(1), x, arch=arch, lto=lto)
    assert _is_cubin(lk.cubin, arch)
    assert b"cpp_affine" in lk.cubin and lk.name.encode() in lk.cubin
    assert '"kernel": "affine_via_cpp"' in lk.contract_json or '"affine_via_cpp"' in lk.contract_json


def test_unresolved_extern_is_a_link_error(nvjitlink):
    x = np.ones(10, np.float32)
    ck = src.affine_via_cpp.compile(x, np.float32(2), np.float32(1), x, arch="sm_90")
    assert ".extern .func" in ck.ptx and "cpp_affine" in ck.ptx
    with pytest.raises(link.LinkError, match="cpp_affine"):
        link.link([link.LinkInput(ck.ptx.encode(), "PTX", "k.ptx")], "sm_90")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("lto", [False, True])
def test_cpp_kernel_links_with_exported_dsl_function(arch, lto, tmp_path, nvjitlink, nvcc):
    ptx = link.export_device(src.softclip, [f32, f32], arch)
    assert ".visible .func" in ptx and "dsl_softclip" in ptx
    p = tmp_path / "softclip.ptx"
    p.write_text(ptx)
    cubin = link.link([src.CPP_USER, p], arch, lto=lto)
    assert _is_cubin(cubin, arch) and b"apply_softclip" in cubin


@pytest.mark.parametrize("suffix", [".ptx", ".o"])
def test_prebuilt_cpp_objects_link(suffix, tmp_path, nvjitlink, nvcc):
    out = tmp_path / f"cpp{suffix}"
    flag = ["-ptx", "-arch=compute_90"] if suffix == ".ptx" else ["-dc", "-arch=sm_90"]
    subprocess.run([nvcc, "-rdc=true", *flag, "-o", str(out), str(src.CPP)], check=True)
    x = np.ones(33, np.float32)
    ptx = src.affine_via_cpp.compile(x, np.float32(2), np.float32(1), x, arch="sm_90").ptx
    cubin = link.link([link.LinkInput(ptx.encode(), "PTX", "k.ptx"), out], "sm_90")
    assert _is_cubin(cubin, "sm_90") and b"cpp_affine" in cubin


def test_export_requires_a_c_name():
    from dsl import simt

    @simt.device
    def plain(v: f32) -> f32:
        return v

    with pytest.raises(ValueError, match="export"):
        link.export_device(plain, [f32])


def test_extern_declaration_errors_name_the_problem():
    from dsl import simt
    with pytest.raises(ValueError, match="C identifier"):
        simt.extern_device("not a name", "f32(f32)")
    with pytest.raises(ValueError, match="form"):
        simt.extern_device("f", "f32 f32")
    with pytest.raises(ValueError, match="must end in"):
        simt.extern_device("f", "f32(f32)", link=["x.txt"])
    with pytest.raises(TypeError, match="scalar"):
        simt.extern_device("f", "f32(f99)")
