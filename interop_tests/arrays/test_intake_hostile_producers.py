"""Hostile or odd producers meet the one intake path: typed errors, never a crash or a SystemError.

- element counts / byte extents / address ranges beyond 64 bits are LayoutError for every producer
  (DLPack, CAI, the CuPy / torch / NumPy fast paths, ArrayBase(ptr=..., shape=...));
- failing __bool__ / __index__ / odd text in a producer's description are typed errors naming the field;
- in a launch (Launcher.validate_only here) a producer's own ValueError / BufferError / TypeError is a
  LaunchContractError subclass naming kernel and argument, the original kept as __cause__.

Crash reproducers run in a fresh interpreter, so a regression fails the test instead of the runner.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bridge
from bridge import _native

BIG = 2**62


class CAI:
    def __init__(self, **iface):
        self.__cuda_array_interface__ = {"version": 3, "typestr": "<f4", "data": (4096, False), **iface}


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def host_launcher(abi: str = "view"):
    contract = json.dumps({"kernel": "k", "args": [
        {"name": "x", "kind": "array", "dtype": "f32", "ndim": -1 if abi == "pointer" else 1, "abi": abi},
        {"name": "y", "kind": "array", "dtype": "f32", "ndim": -1 if abi == "pointer" else 1, "access": "write",
         "abi": abi}]})
    lim = _native.DeviceLimits()
    lim.host_memory, lim.cc, lim.max_threads_per_block, lim.max_block = True, 90, 1024, (1024, 1024, 64)
    lim.max_grid = (2147483647, 65535, 65535)
    fn = _native.FuncAttrs()
    fn.max_threads_per_block = 1024
    return _native.Launcher(0, _native.Contract(contract), lim, fn, -1)


def validate_x(x):
    """Validate a launch whose argument 'x' (#0) is `x` (grid and block given)."""
    return host_launcher().validate_only((x, np.zeros(4, np.float32)), grid=1, block=32)


# ---- crash reproducers (each SIGSEGV'd or raised SystemError before) -------------------------------------

@pytest.mark.slow
def test_cai_typestr_with_a_lone_surrogate_is_a_dtype_error_not_a_crash():
    r = run_python("""
        import bridge
        class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<\\udcff", "data": (4096, False)}
        try:
            bridge.asarray(X())
        except bridge.DTypeError as e:
            print("DTypeError:", str(e).encode("ascii", "backslashreplace").decode())
        """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DTypeError: unsupported array dtype: CUDA Array Interface typestr '<\\udcff' (not valid text)" in r.stdout


def test_cai_read_only_flag_whose_bool_raises_is_a_type_error_naming_the_field():
    r = run_python("""
        import bridge
        class Flag:
            def __bool__(self): raise RuntimeError("no truth")
        class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (4096, Flag())}
        try:
            bridge.asarray(X())
        except TypeError as e:
            print(type(e).__name__, "|", e, "|", repr(e.__cause__))
        """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ("TypeError | __cuda_array_interface__['data'][1] (read-only flag): its truth value "
                                "could not be read (RuntimeError: no truth) | RuntimeError('no truth')")


def test_cai_read_only_flag_whose_bool_raises_is_named_in_a_launch():
    class Flag:
        def __bool__(self):
            raise RuntimeError("no truth")

    with pytest.raises(bridge.ArgumentKindError) as info:
        validate_x(CAI(shape=(4,), data=(4096, Flag())))
    e = info.value
    assert (e.kernel, e.arg, e.arg_name) == ("k", 0, "x")
    assert str(e).startswith("k: argument 'x' (#0): TypeError: __cuda_array_interface__['data'][1] (read-only flag)")
    assert isinstance(e.__cause__, TypeError) and isinstance(e.__cause__.__cause__, RuntimeError)


def test_shape_entry_whose_index_raises_is_a_type_error_with_the_cause():
    class Dim:
        def __index__(self):
            raise ZeroDivisionError("bad dim")

    with pytest.raises(TypeError, match=r"__cuda_array_interface__\['shape'\]: expected an integer, reading Dim "
                                        r"as one failed \(ZeroDivisionError: bad dim\)") as info:
        _native.intake_view(CAI(shape=(Dim(),)))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_shape_entry_beyond_int64_is_a_value_error():
    with pytest.raises(ValueError, match=r"\['shape'\]: expected a 64-bit integer, got one outside"):
        _native.intake_view(CAI(shape=(2**64,)))


# ---- 64-bit overflow of counts, extents and addresses: LayoutError for every producer -------------------

@pytest.mark.parametrize("shape,strides,ptr,why", [
    ((BIG, BIG), None, 4096, "its element count overflows int64"),
    ((BIG, 4), (0, 4), 4096, "its element count overflows int64"),
    ((2**61,), (8,), 4096, "its byte extent overflows int64"),
    ((3, 2**40), (2**62, 4), 4096, "its byte extent overflows int64"),
    ((16,), (4,), 2**64 - 32, "its address range ends beyond the 64-bit address space"),
    ((16,), (-4,), 32, "its address range starts below address 0"),
])
def test_cai_extent_overflow_is_a_layout_error_naming_the_shape(shape, strides, ptr, why):
    prod = CAI(shape=shape, strides=strides, data=(ptr, False))
    with pytest.raises(bridge.LayoutError) as info:
        bridge.asarray(prod)
    msg = str(info.value)
    assert msg.startswith(f"__cuda_array_interface__ array of shape {shape!r}") and msg.endswith(why)
    with pytest.raises(bridge.LayoutError) as info:      # in a launch: named like every intake error
        validate_x(prod)
    assert str(info.value).startswith(f"k: argument 'x' (#0): __cuda_array_interface__ array of shape {shape!r}")
    assert (info.value.kernel, info.value.arg_name) == ("k", "x")


def test_empty_arrays_follow_numpy_the_product_of_the_other_extents_must_fit():
    v = _native.intake_view(CAI(shape=(0, 2**40, 2**20), strides=(2**62, -(2**62), 0)))  # never dereferenced
    assert v.size == 0 and v.shape == (0, 2**40, 2**20)
    with pytest.raises(bridge.LayoutError, match="its element count overflows int64"):   # np.empty refuses it too
        _native.intake_view(CAI(shape=(0, BIG, BIG)))


def test_array_base_from_raw_refuses_overflowing_descriptions():
    with pytest.raises(bridge.LayoutError, match=r"^array of shape \(4611686018427387904, 4611686018427387904\) "
                                                 r"with byte strides \(0, 4\).*its element count overflows int64$"):
        _native.ArrayBase(ptr=4096, shape=[BIG, BIG], strides=[0, 4], dtype="float32", device_type=2, device_id=0,
                          readonly=False, owner=None)
    with pytest.raises(bridge.LayoutError, match="ends beyond the 64-bit address space"):
        bridge.Array(ptr=2**64 - 8, shape=[4], strides=[4], dtype="float32", device_type=2, device_id=0,
                     readonly=False, owner=None)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):   # legacy layout: dl_tensor first, no deleter here
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class CraftedDLPack:
    """A legacy DLPack producer whose tensor description is written by hand (float32, CPU)."""

    def __init__(self, shape, strides=None, data=4096, byte_offset=0, null_shape=False):
        n = len(shape)
        self.shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self.strides = (ctypes.c_int64 * max(n, 1))(*strides) if strides is not None else None
        t = DLTensor(data, DLDevice(1, 0), n, DLDataType(2, 32, 1),
                     None if null_shape else ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
                     ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)) if self.strides else None, byte_offset)
        self.managed = DLManagedTensor(t, None, None)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):          # legacy signature: intake retries without max_version
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_dlpack_tensor_of_shape_2_62_squared_is_refused_not_taken_as_empty():
    prod = CraftedDLPack((BIG, BIG))
    with pytest.raises(bridge.LayoutError, match=r"^DLPack tensor of shape \(4611686018427387904, "
                                                 r"4611686018427387904\) .*its element count overflows int64$"):
        _native.intake_view(prod)
    with pytest.raises(bridge.LayoutError, match=r"^k: argument 'x' \(#0\): DLPack tensor of shape"):
        validate_x(CraftedDLPack((BIG, BIG)))


def test_dlpack_extent_and_pointer_overflow_are_refused():
    with pytest.raises(bridge.LayoutError, match="its byte extent overflows int64"):
        _native.intake_view(CraftedDLPack((3,), strides=(2**61,)))          # element strides x 4 bytes
    with pytest.raises(bridge.LayoutError, match=r"data pointer 4096 \+ byte_offset 18446744073709551615 overflows"):
        _native.intake_view(CraftedDLPack((3,), byte_offset=2**64 - 1))
    with pytest.raises(BufferError, match="DLPack tensor has no shape array"):
        _native.intake_view(CraftedDLPack((3,), null_shape=True))
    v = _native.intake_view(CraftedDLPack((3, 2), strides=(1, 3), byte_offset=8))   # a sane one still reads
    assert (v.ptr, v.shape, v.strides) == (4104, (3, 2), (4, 12))


FAKE_LIBS = '''
import sys, types, numpy as np
class _Mem:
    def __init__(self, ptr): self.ptr, self.device_id = ptr, 0
class _Stream:
    ptr = 7
cupy = types.ModuleType("cupy")
class CupyArray:
    def __init__(self, shape, strides, ptr=4096):
        self.shape, self.strides, self.data, self.dtype = shape, strides, _Mem(ptr), np.dtype("float32")
cupy.ndarray = CupyArray
cupy.cuda = types.SimpleNamespace(get_current_stream=lambda dev: _Stream())
torch = types.ModuleType("torch")
class _TorchDtype:
    def __str__(self): return "torch.float32"
class _Dev:
    type = "cpu"
class TorchTensor:
    def __init__(self, shape, stride, is_cuda=False):
        self.shape, self._stride, self.is_cuda, self.device, self.dtype = shape, stride, is_cuda, _Dev(), _TorchDtype()
    def data_ptr(self): return 4096
    def stride(self): return self._stride
torch.Tensor = TorchTensor
sys.modules["cupy"], sys.modules["torch"] = cupy, torch
import bridge
from bridge import _native
def show(f):
    try:
        v = f()
        print("ok", v.shape, v.strides)
    except Exception as e:
        print(type(e).__name__, "|", e)
'''


def test_cupy_and_torch_fast_paths_refuse_overflowing_views():
    r = run_python(FAKE_LIBS + """
show(lambda: _native.intake_view(CupyArray((2**62, 2**62), (0, 4))))
show(lambda: _native.intake_view(CupyArray((2, 3), (12, 4))))
show(lambda: _native.intake_view(TorchTensor((2**62, 2**62), (0, 1))))
show(lambda: _native.intake_view(TorchTensor((3,), (2**62,))))
show(lambda: _native.intake_view(TorchTensor((2, 3), (3, 1))))
""")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("LayoutError | CuPy ndarray of shape (4611686018427387904, 4611686018427387904)")
    assert lines[0].endswith("its element count overflows int64")
    assert lines[1] == "ok (2, 3) (12, 4)"
    assert lines[2].startswith("LayoutError | torch tensor of shape (4611686018427387904, 4611686018427387904)")
    assert lines[3].startswith("LayoutError | torch tensor of shape (3,)") and "byte extent overflows" in lines[3]
    assert lines[4] == "ok (2, 3) (12, 4)"


def test_torch_fast_path_with_a_failing_is_cuda_is_a_type_error():
    r = run_python(FAKE_LIBS + """
class Bad:
    def __bool__(self): raise RuntimeError("which device?")
show(lambda: _native.intake_view(TorchTensor((3,), (1,), is_cuda=Bad())))
""")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ("TypeError | torch tensor .is_cuda: its truth value could not be read "
                                "(RuntimeError: which device?)")


# ---- producers' own errors in launches ----------------------------------------------------------------

class Raising:
    def __init__(self, exc):
        self.exc = exc

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        raise self.exc


@pytest.mark.parametrize("exc", [ValueError("bad value"), BufferError("cannot export"), TypeError("odd type"),
                                 RuntimeError("device gone"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")])
def test_a_producers_own_error_becomes_a_named_launch_contract_error_with_the_cause(exc):
    with pytest.raises(bridge.ArgumentKindError) as info:
        validate_x(Raising(exc))
    e = info.value
    assert (e.kernel, e.arg, e.arg_name) == ("k", 0, "x")
    assert str(e) == f"k: argument 'x' (#0): {type(exc).__name__}: {exc}"
    assert e.__cause__ is exc
    with pytest.raises(type(exc)) as raw:                 # outside a launch: the producer's error as it is
        bridge.asarray(Raising(exc))
    assert raw.value is exc


def test_interrupts_and_memory_errors_are_not_translated():
    for exc in (KeyboardInterrupt(), MemoryError()):
        with pytest.raises(type(exc)) as info:
            validate_x(Raising(exc))
        assert info.value is exc


def test_native_validate_names_the_argument_of_a_failing_producer():
    c = _native.Contract(json.dumps({"kernel": "v", "args": [{"name": "a", "kind": "array", "dtype": "f32"}]}))
    with pytest.raises(bridge.ArgumentKindError, match=r"^v: argument 'a' \(#0\): BufferError: cannot export$"):
        _native.validate(c, [Raising(BufferError("cannot export"))], grid=1, block=32)


# ---- NumPy fast path: every array viewed zero-copy, refused by the validator where a contract says so --

def test_numpy_arrays_numpys_dlpack_refuses_are_viewed_zero_copy():
    odd = np.lib.stride_tricks.as_strided(np.zeros(64, np.uint8).view(np.float32), (5,), (6,))
    v = _native.intake_view(odd)
    assert (v.ptr, v.shape, v.strides, v.dtype_name) == (odd.ctypes.data, (5,), (6,), "float32")
    ro = np.zeros((3, 4), np.float32)[:, ::2]
    ro.flags.writeable = False
    v = _native.intake_view(ro)
    assert v.readonly and (v.ptr, v.strides) == (ro.ctypes.data, (16, 8))
    scalar = np.array(3.5, np.float64)
    v = _native.intake_view(scalar)
    assert (v.ndim, v.shape, v.ptr, v.dtype_name) == (0, (), scalar.ctypes.data, "float64")


def test_ml_dtypes_arrays_take_the_fast_path():
    import ml_dtypes
    for dt, name in [(ml_dtypes.bfloat16, "bfloat16"), (ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
                     (ml_dtypes.float8_e5m2, "float8_e5m2")]:
        a = np.zeros((4, 6), dt)[::2, 1:]
        v = _native.intake_view(a)
        assert (v.ptr, v.shape, v.strides, v.dtype_name) == (a.ctypes.data, (2, 5), a.strides, name)


def test_numpy_subclass_is_read_through_ndarrays_own_description():
    class Liar(np.ndarray):
        @property
        def __array_struct__(self):
            raise AssertionError("intake must use ndarray's own getter")

    a = np.arange(6, dtype=np.int32).view(Liar)
    v = _native.intake_view(a)
    assert (v.ptr, v.shape, v.dtype_name) == (a.ctypes.data, (6,), "int32")


def test_big_endian_numpy_is_a_dtype_error_everywhere_never_a_buffer_error():
    be = np.zeros(4, ">f4")
    with pytest.raises(bridge.DTypeError, match=r"non-native byte order NumPy/CuPy dtype dtype\('>f4'\)"):
        bridge.asarray(be)
    with pytest.raises(bridge.DTypeError, match=r"^k: argument 'x' \(#0\): unsupported array dtype: non-native"):
        validate_x(be)


def test_validator_refuses_what_the_contract_cannot_express_and_accepts_the_rest():
    odd = np.lib.stride_tricks.as_strided(np.zeros(64, np.uint8).view(np.float32), (4,), (6,))
    with pytest.raises(bridge.LayoutError, match=r"^k: argument 'x' \(#0\): expected 1-D float32 array with strides "
                                                 r"that are multiples of its itemsize, got float32 array of shape "
                                                 r"\(4,\) with byte strides \(6,\)$"):
        validate_x(odd)
    host_launcher("pointer").validate_only((odd, np.zeros(4, np.float32)), grid=1, block=32)   # a pointer may
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(bridge.ReadOnlyError, match=r"argument 'y' \(#1\)"):
        host_launcher().validate_only((np.zeros(4, np.float32), ro), grid=1, block=32)
    bcast = np.broadcast_to(np.zeros(1, np.float32), (4,))
    host_launcher().validate_only((bcast, np.zeros(4, np.float32)), grid=1, block=32)   # a read-only broadcast
    writable_bcast = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (4,), (0,))
    with pytest.raises(bridge.AliasingError, match=r"argument 'y' \(#1\).*share bytes"):
        host_launcher().validate_only((np.zeros(4, np.float32), writable_bcast), grid=1, block=32)
