"""Module images are recognised by their bytes; without a GPU every entry point says so clearly."""
from __future__ import annotations

import struct
import subprocess

import pytest

import bridge
from bridge.errors import MissingContractError, NoDeviceError
from bridge.fatbin import FATBIN_MAGIC, module_format
from bridge.module import read_image

from runtime_helpers import KERNELS, rt_ptx

needs_no_gpu = pytest.mark.skipif(bridge.gpu_available(), reason="checks the behaviour without a GPU")


def test_ptx_text_is_recognised():
    assert module_format(rt_ptx().encode()) == "ptx"
    assert module_format(b"// comment\n.version 8.0\n.target sm_80\n") == "ptx"


def test_cubin_is_recognised(tmp_path):
    cubin = tmp_path / "k.cubin"
    subprocess.run(["ptxas", "-arch=sm_90", str(KERNELS / "rt_kernels.ptx"), "-o", str(cubin)], check=True)
    assert module_format(cubin.read_bytes()) == "cubin"


def test_fatbin_is_recognised(tmp_path):
    fatbin = tmp_path / "k.fatbin"
    subprocess.run(["nvcc", "-fatbin", "-arch=sm_90", str(KERNELS / "rt_kernels.cu"), "-o", str(fatbin)],
                   check=True)
    data = fatbin.read_bytes()
    assert struct.unpack("<I", data[:4])[0] == FATBIN_MAGIC
    assert module_format(data) == "fatbin"


@pytest.mark.parametrize("garbage", [b"", b"\x00\x01\x02\x03garbage", b"hello world", b"MZ\x90\x00" * 8,
                                     b".version 8.0\x00\x00binary\x00junk"])
def test_garbage_is_a_clear_value_error(garbage):
    with pytest.raises(ValueError, match=r"module image: expected a fatbin .*, an ELF cubin or PTX text"):
        module_format(garbage)


def test_module_format_wants_bytes_or_text():
    with pytest.raises(TypeError, match=r"module image: expected bytes-like data .* or str \(PTX text\), got int"):
        module_format(42)


def test_read_image_accepts_paths_text_and_bytes(tmp_path):
    p = tmp_path / "k.ptx"
    p.write_text(rt_ptx())
    assert read_image(p) == (rt_ptx().encode(), "k.ptx")
    assert read_image(str(p))[0] == rt_ptx().encode()
    assert read_image(rt_ptx())[1] == "<ptx text>"
    assert read_image(b"\x7fELF")[0] == b"\x7fELF"
    with pytest.raises(FileNotFoundError, match="no such module file"):
        read_image(str(tmp_path / "missing.cubin"))
    with pytest.raises(TypeError, match="expected a path, PTX text or bytes, got float"):
        read_image(1.5)


@needs_no_gpu
def test_load_module_without_gpu_raises_no_device_error():
    with pytest.raises(NoDeviceError, match="no usable CUDA device"):
        bridge.load_module(rt_ptx())


@needs_no_gpu
def test_device_without_gpu_raises_no_device_error():
    assert bridge.device_count() == 0
    with pytest.raises(NoDeviceError):
        bridge.Device(0)
    with pytest.raises(NoDeviceError):
        bridge.current_device()


@needs_no_gpu
def test_kernel_from_ptx_without_gpu_raises_no_device_error():
    with pytest.raises(NoDeviceError):
        bridge.kernel_from_ptx(rt_ptx(), "vecadd", "{}")


def test_garbage_module_is_refused_before_touching_the_driver():
    with pytest.raises(ValueError, match="module image"):
        bridge.load_module(b"not a module at all")


def test_kernel_without_contract_names_itself():
    k = object.__new__(bridge.Kernel)
    k.name, k._launcher, k.contract = "raw_kernel", None, None
    for launch in (lambda: k(1, 2), lambda: k[1, 32], lambda: k.launch(grid=1, block=32)):
        with pytest.raises(MissingContractError, match=r"raw_kernel: kernel has no launch contract.*unsafe_launch"):
            launch()


def test_kernels_and_modules_come_only_from_factories():
    with pytest.raises(TypeError, match="load_module"):
        bridge.Module()
    with pytest.raises(TypeError, match="load_module"):
        bridge.Kernel()
