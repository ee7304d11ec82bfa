"""Intake does not believe what cannot be: a NULL data pointer under an array with elements, and a CAI
typestr with bytes past the type ('<f4\\0junk' is not float32), are typed refusals naming the producer
(and, in a launch, the kernel and argument), from `bridge.asarray`, `bridge.Array(ptr=...)` and a
validate-only launch alike. One check after every producer (cpp/native/intake_errors.cpp) serves the
CAI, DLPack, NumPy, attribute and fast torch/CuPy paths, so they refuse with the same class and text.
An empty array with a NULL pointer stays legal. The pointers are never dereferenced."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bridge
from bridge import _native
from dsl import f32, simt
from interop_tests.arrays.test_intake_hostile_producers import CraftedDLPack, validate_x

NULL = r"its data pointer is NULL \(0\) but it has {n} element\(s\); only an empty array may come without memory"


class CAI:
    def __init__(self, shape, ptr=0, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"version": 3, "shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides}


@pytest.mark.parametrize("shape, n", [((16,), 16), ((4, 3), 12), ((), 1)])
def test_cai_null_data_with_elements_is_a_layout_error_from_asarray(shape, n):
    with pytest.raises(bridge.LayoutError, match=r"^__cuda_array_interface__ array of shape \(.*\): "
                                                 + NULL.format(n=n) + "$"):
        bridge.asarray(CAI(shape))


def test_cai_null_data_is_refused_by_name_in_a_launch_and_nothing_is_validated():
    with pytest.raises(bridge.LayoutError, match=r"^k: argument 'x' \(#0\): __cuda_array_interface__ array of "
                                                 r"shape \(16,\): " + NULL.format(n=16)) as err:
        validate_x(CAI((16,)))
    assert (err.value.kernel, err.value.arg, err.value.arg_name) == ("k", 0, "x")


@simt.kernel(block=32)
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


def test_a_dsl_kernels_launch_intake_refuses_cai_null_data():
    out = np.zeros(16, np.float32)
    validator = copy._sim_validator(copy.build(out, out))
    with pytest.raises(bridge.LayoutError, match=r"^copy: argument 'a' \(#0\): __cuda_array_interface__ array "
                                                 r"of shape \(16,\): " + NULL.format(n=16)):
        validator.validate_only((CAI((16,)), out), grid=None, block=None, shared_mem=None)


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 0, 7)])
def test_an_empty_array_may_have_a_null_pointer(shape):
    a = bridge.asarray(CAI(shape))
    assert (a.ptr, a.shape, a.size) == (0, shape, 0)
    v = _native.intake_view(CraftedDLPack(shape, data=None))
    assert (v.ptr, v.shape) == (0, shape)


def test_dlpack_null_data_is_refused_even_moved_off_zero_by_a_byte_offset():
    for offset in (0, 64):
        with pytest.raises(bridge.LayoutError, match=r"^DLPack tensor of shape \(3,\): " + NULL.format(n=3)):
            _native.intake_view(CraftedDLPack((3,), data=None, byte_offset=offset))
    with pytest.raises(bridge.LayoutError, match=r"^k: argument 'x' \(#0\): DLPack tensor of shape \(3,\)"):
        validate_x(CraftedDLPack((3,), data=None, byte_offset=64))


def test_an_array_built_by_hand_at_address_0_is_refused():
    with pytest.raises(bridge.LayoutError, match=r"^array of shape \(16,\): " + NULL.format(n=16)):
        bridge.Array(ptr=0, shape=[16], strides=[4], dtype="float32", device_type=2, device_id=0, readonly=False,
                     owner=None)
    empty = bridge.Array(ptr=0, shape=[0], strides=[4], dtype="float32", device_type=2, device_id=0,
                         readonly=False, owner=None)
    assert empty.size == 0


@pytest.mark.slow
def test_the_attribute_paths_of_torch_and_cupy_refuse_a_null_pointer_with_the_same_text():
    """Stand-in torch/CuPy modules (the fast paths resolve only for the real libraries, so these take the
    attribute paths; the fast paths end in the same check: cpp/native/intake.cpp `intake`)."""
    code = textwrap.dedent("""
        import sys, types, numpy as np
        class _Mem:
            ptr, device_id = 0, 0
        cupy = types.ModuleType("cupy")
        class CupyArray:
            shape, strides, data, dtype = (5,), (4,), _Mem(), np.dtype("float32")
        cupy.ndarray = CupyArray
        cupy.cuda = types.SimpleNamespace(get_current_stream=lambda dev: types.SimpleNamespace(ptr=7))
        torch = types.ModuleType("torch")
        class _Dtype:
            def __str__(self): return "torch.float32"
        class TorchTensor:
            shape, is_cuda, device, dtype = (3,), False, types.SimpleNamespace(type="cpu"), _Dtype()
            def data_ptr(self): return 0
            def stride(self): return (1,)
        torch.Tensor = TorchTensor
        sys.modules["cupy"], sys.modules["torch"] = cupy, torch
        import bridge
        for obj in (CupyArray(), TorchTensor()):
            try:
                bridge.asarray(obj)
                print("accepted")
            except bridge.LayoutError as e:
                print(e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    tail = "only an empty array may come without memory"
    assert r.stdout.splitlines() == [
        f"CuPy ndarray of shape (5,): its data pointer is NULL (0) but it has 5 element(s); {tail}",
        f"torch tensor of shape (3,): its data pointer is NULL (0) but it has 3 element(s); {tail}"]


@pytest.mark.slow
def test_a_real_torch_tensor_without_elements_keeps_its_null_pointer_through_the_fast_path():
    torch = pytest.importorskip("torch")
    t = torch.empty((0, 4))
    v = _native.intake_view(t)
    assert (v.ptr, v.shape) == (t.data_ptr(), (0, 4))
    assert _native.fast_intake_status()["torch"][0] in ("on", "off")


@pytest.mark.parametrize("typestr", ["<f4\x00junk", "<f4\x00", "|u1\x00\x00", "<f8\x00<f4"])
def test_a_typestr_with_bytes_past_a_nul_is_a_dtype_error_showing_them(typestr):
    shown = ascii(typestr).replace("\\", "\\\\")
    with pytest.raises(bridge.DTypeError, match=r"^unsupported array dtype: CUDA Array Interface typestr "
                                                + shown + r" \(a NUL byte inside it\)"):
        bridge.asarray(CAI((4,), ptr=4096, typestr=typestr))
    with pytest.raises(bridge.DTypeError, match=r"^k: argument 'x' \(#0\): unsupported array dtype: CUDA Array "
                                                r"Interface typestr " + shown):
        validate_x(CAI((4,), ptr=4096, typestr=typestr))


def test_typestr_lookup_reads_the_whole_string():
    assert _native.dtype_from_typestr("<f4") == "f32"
    assert _native.dtype_from_typestr("<f4\x00junk") is None
    assert _native.dtype_from_typestr("|b1\x00") is None
    assert _native.intake_view(CAI((4,), ptr=4096, typestr="<f4")).dtype_name == "float32"
