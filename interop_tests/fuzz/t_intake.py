"""Fuzz targets `intake_asarray` and `intake_launch`: hostile array producers through the one intake path.

Inputs are descriptions of objects (plain data plus the stand-ins of hostile.py), built in the worker:
- `__cuda_array_interface__` dicts mutated from a valid one: odd types, lone surrogates, huge ints,
  raising `__bool__` / `__index__`, lying sequences, a property that raises;
- NumPy arrays of odd dtypes, shapes and byte strides (big-endian, strides not a multiple of the
  itemsize, zero and negative strides), handed over directly or through a `__dlpack__` wrapper;
- DLPack capsules built by hand with ctypes (versioned and legacy; any version, flags, ndim, dtype
  code/bits/lanes, device, shape, strides, byte offset; wrong capsule names) — memory-valid, so only
  the consumer's checks are tested; the deleter counts its calls (never twice; once if the consumer
  took ownership, never if it did not);
- `__dlpack__` that raises, returns a non-capsule, or is not callable; `__dlpack_device__` that lies.
`intake_asarray` calls `bridge.asarray(obj)` (allowed: TypeError, ValueError, BufferError, the bridge's
errors); `intake_launch` puts the object into a host-memory validate-only launch of a DSL kernel
(`SimtKernel._sim_validator(...).validate_only`), where only the bridge's typed errors are allowed.
Either may let the hostile object's own HostileError through.
"""
from __future__ import annotations

import ctypes
import gc
from typing import Any

from interop_tests.fuzz.hostile import (HostileError, IntSubclass, LyingSeq, RaisingBool, RaisingDim,
                                        RaisingIndex, RaisingInt, RaisingIter, StrSubclass)
from interop_tests.fuzz.targets import Oracle

TIMEOUT = 8.0
INPUTS = 300         # a suite run's inputs (targets.py), for intake_asarray and intake_launch each
PTR = 0x7F00_0000_0000


def variant(name: str) -> str:
    return "asarray" if name == "intake_asarray" else "launch"


# ------------------------------------------------------------------------------- generation
CAI_VALUES: dict[str, list[Any]] = {
    "version": [0, 1, 2, 3, 4, -1, 2**64, "3", 3.0, None, True, RaisingIndex(), IntSubclass(3), RaisingInt(3)],
    "shape": [(), (0,), (-1,), (2**63 - 1,), (2**62, 2**62), (2**31,) * 8, (1,) * 9, [4], "abc", None, 5,
              RaisingIter(2), LyingSeq((4,), 3), LyingSeq((4, 4), 1), (RaisingIndex(),), (4.0,), (True,),
              (IntSubclass(4),), (RaisingInt(4),), (2**64,), (-2**63,)],
    "typestr": ["<f4", "|u1", ">f4", "<f8", "<c8", "<f2", "|b1", "<i16", "<V4", "<U4", "<\udcff", "\udcff",
                "\ud800<f4", "", "<f", "<f4x", "\u00e9", "<" + "9" * 50, None, 4, b"<f4", StrSubclass("<f4"),
                "<M8[ns]", "|O", "<f4\x00", "<\U0001F600"],
    "data": [(0, False), (4096, False), (2**64 - 1, False), (2**64, False), (-1, False), ("x", False),
             (None, False), (4096.0, False), (RaisingIndex(), False), (4096, RaisingBool()), (4096, "yes"),
             (4096, None), (), (4096,), (4096, False, 1), [4096, False], None, 4096, (RaisingInt(4096), False),
             (IntSubclass(4096), True)],
    "strides": [None, (), (4,), (0,), (-4,), (2**63 - 1,), (1,), (3,), (4, 4), (RaisingIndex(),), "x",
                RaisingIter(1), (2**64,), (4.0,)],
    "stream": [None, 0, 1, 2, -1, 2**64, "s", RaisingIndex(), 1.5, True, 2**63],
    "mask": [None, 0, "mask", (1,)],
    "descr": [[("", "<f4")], "x", None],
}


def _cai(rng) -> dict:
    n = rng.choice([1, 4, 1000])
    d: dict[str, Any] = {"version": 3, "shape": (n,), "typestr": "<f4", "data": (PTR + 4096 * rng.randrange(64),
                                                                              False)}
    if rng.random() < 0.3:
        d["strides"] = None
    if rng.random() < 0.3:
        d["stream"] = rng.choice([None, 1, 2, 0x1234])
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        key = rng.choice(list(CAI_VALUES))
        if rng.random() < 0.12 and key in d:
            del d[key]
        else:
            d[key] = rng.choice(CAI_VALUES[key])
    if rng.random() < 0.05:
        d[rng.choice(["\udcff", "extra", 5])] = 1
    return d


NP_DTYPES = ["<f4", "<f8", "<f2", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<c8", "<c16",
             ">f4", ">i4", ">f8", "|V4", "<U2", "|O", "<M8[ns]", "bfloat16", "float8_e4m3fn", "int4"]


def _numpy(rng) -> dict:
    ndim = rng.choice([0, 1, 1, 2, 3, 5])
    shape = [rng.choice([0, 1, 2, 3, 7]) for _ in range(ndim)]
    strides = None
    if ndim and rng.random() < 0.6:
        strides = [rng.choice([0, 1, 2, 3, 4, 8, -4, -8, 12, 4096]) for _ in range(ndim)]
    return {"dtype": rng.choice(NP_DTYPES), "shape": shape, "strides": strides, "offset": rng.choice([0, 0, 1, 64]),
            "readonly": rng.random() < 0.3}


def _capsule(rng) -> dict:
    ndim = rng.choice([0, 1, 1, 2, 3, 8, 9, 64, -1, 2**31 - 1, -2**31])
    n = ndim if 0 <= ndim <= 8 else 2
    shape = [rng.choice([0, 1, 3, 1000, -1, 2**31, 2**62, 2**63 - 1, -2**63]) if rng.random() < 0.3
             else rng.choice([1, 3, 10]) for _ in range(n)]
    strides = None if rng.random() < 0.4 else [rng.choice([1, 1, 0, -1, 3, 2**40, 2**62, -2**63]) for _ in range(n)]
    code, bits, lanes = rng.choice([(2, 32, 1), (2, 64, 1), (0, 32, 1), (1, 8, 1), (4, 16, 1), (5, 64, 1), (6, 8, 1),
                                    (2, 16, 1), (10, 8, 1), (17, 4, 1)])
    if rng.random() < 0.2:
        code, bits, lanes = rng.randrange(256), rng.choice([0, 1, 4, 6, 7, 8, 12, 128, 255]), rng.choice([0, 1, 2, 4,
                                                                                                     65535])
    return {
        "versioned": rng.random() < 0.6,
        # a wrong name the consumer must refuse; never the other layout's name (that would make the
        # consumer read one struct as the other: a lying producer no consumer can defend against)
        "name": rng.choice([None] * 8 + ["dltensor_x", "used_dltensor", "used_dltensor_versioned", "", "\u00e9"]),
        "version": rng.choice([(1, 0), (1, 1), (1, 1), (0, 8), (2, 0), (2**32 - 1, 0), (1, 2**32 - 1)]),
        "flags": rng.choice([0, 0, 1, 2, 3, 4, 2**64 - 1]),
        "ndim": ndim, "dtype": (code, bits, lanes),
        "device": rng.choice([(1, 0), (1, 0), (2, 0), (3, 0), (13, 0), (1, -1), (7, 5), (2**31 - 1, 0), (-1, 0)]),
        "shape": shape, "strides": strides,
        "byte_offset": rng.choice([0, 0, 4, 3, 2**63, 2**64 - 1]),
        "data": rng.choice([PTR, PTR, 0, 1, 2**64 - 8]),
        "deleter": rng.random() < 0.85,
        "dlpack_device": rng.choice(["match"] * 6 + ["none", "raise", (1,), ("a", 0), (2**64, 0), None, 5, (1, 0, 0),
                                                      (RaisingIndex(), 0), (2, 0)]),
        "legacy_producer": rng.random() < 0.2,
    }


HOSTILE_PRODUCERS = ["raise_type", "raise_value", "raise_buffer", "raise_hostile", "return_none", "return_int",
                     "return_str", "return_list", "return_foreign_capsule", "return_used_capsule",
                     "not_callable", "no_kwargs", "device_raises", "device_short", "device_strs",
                     "device_huge", "getattr_raises", "both_protocols", "cai_property_raises", "cai_not_dict",
                     "cai_dict_subclass"]
MISC = ["none", "int", "float", "str", "bytes", "list", "tuple", "object", "np_scalar", "np_0d", "np_32d",
        "np_object", "np_structured", "memoryview", "bytearray", "range", "np_masked", "bridge_array_huge"]


def _object(rng) -> tuple:
    r = rng.random()
    if r < 0.35:
        return ("cai", _cai(rng))
    if r < 0.55:
        return ("numpy", _numpy(rng), rng.choice(["direct", "versioned", "legacy", "device_lies"]))
    if r < 0.8:
        return ("capsule", _capsule(rng))
    if r < 0.93:
        return ("hostile", rng.choice(HOSTILE_PRODUCERS))
    return ("misc", rng.choice(MISC))


LAUNCH_DIMS: list[Any] = [None, None, None, 128, (128, 1, 1), 64, (64, 1, 1, 1), 64.0, RaisingDim(),
                          (RaisingDim(),), -1, 0, 2**64, "128", (16, 16), (32, 32, 1)]


def generate(rng, variant: str) -> dict:
    spec: dict[str, Any] = {"obj": _object(rng)}
    if variant == "launch":
        spec["kernel"] = rng.choice(["scale", "scale", "copy2d"])
        spec["position"] = rng.choice([0, 1, 1, "both"])
        wild = rng.random() < 0.4       # else a configuration that is fine, so the object decides
        spec["grid"] = rng.choice(LAUNCH_DIMS) if wild else None
        spec["block"] = rng.choice(LAUNCH_DIMS) if wild else None
        spec["shared_mem"] = rng.choice([None, None, None, 0, -1, 2**40, 1.5, RaisingDim(), "8"]) if wild else None
        spec["n"] = rng.choice([1, 4, 10, 1000])
        if rng.random() < 0.25:         # a host array that fits, through every way of handing it over
            shape = [spec["n"]] if spec["kernel"] == "scale" else [spec["n"], 3]
            strides = None if rng.random() < 0.5 else [rng.choice([4, 8, 12, -4, 0]) * (3 if k == 0 and
                                                       len(shape) == 2 else 1) for k in range(len(shape))]
            spec["obj"] = ("numpy", {"dtype": "<f4", "shape": shape, "strides": strides, "offset": 0,
                                     "readonly": rng.random() < 0.2},
                           rng.choice(["direct", "versioned", "legacy", "device_lies"]))
    return spec


# ------------------------------------------------------------------------------- building objects
class SetupRefused(Exception):
    """NumPy itself refused to build the described array (e.g. as_strided on an impossible layout)."""


class CAIHolder:
    def __init__(self, cai: Any) -> None:
        self._cai = cai

    @property
    def __cuda_array_interface__(self) -> Any:
        return self._cai


class Producer:
    """`__dlpack__` returning a prepared capsule (or whatever `make` returns), `__dlpack_device__` as told."""

    def __init__(self, make: Any, device: Any = "none", legacy: bool = False) -> None:
        self._make, self._device, self._legacy = make, device, legacy

    def __dlpack__(self, stream: Any = None, max_version: Any = None, **kw: Any) -> Any:
        if self._legacy and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self._make(stream=stream, max_version=max_version)

    def __getattr__(self, name: str) -> Any:
        if name == "__dlpack_device__" and self._device != "none":
            dev = self._device
            if dev == "raise":
                def raising() -> Any:
                    raise HostileError("__dlpack_device__ refused")
                return raising
            return lambda: dev
        raise AttributeError(name)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class _DLVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _DLVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_KEEP: list[Any] = []            # every struct, array and name buffer a capsule points to: never freed
_DELETER_CALLS: dict[int, int] = {}


@_DELETER
def _count_deleter(address: int) -> None:
    _DELETER_CALLS[address] = _DELETER_CALLS.get(address, 0) + 1


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def _s64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _build_capsule(c: dict) -> tuple[Any, int]:
    """A hand-made DLPack capsule; returns (capsule, struct address for the deleter count)."""
    m = _DLManagedVersioned() if c["versioned"] else _DLManaged()
    t = m.dl_tensor
    shape = (ctypes.c_int64 * 64)(*([_s64(v) for v in c["shape"]] + [1] * (64 - len(c["shape"]))))
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    if c["strides"] is not None:
        strides = (ctypes.c_int64 * 64)(*([_s64(v) for v in c["strides"]] + [1] * (64 - len(c["strides"]))))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        _KEEP.append(strides)
    t.ndim = c["ndim"]
    t.dtype.code, t.dtype.bits, t.dtype.lanes = c["dtype"]
    t.device.device_type, t.device.device_id = c["device"]
    t.byte_offset = c["byte_offset"]
    t.data = c["data"] or None
    if c["versioned"]:
        m.version.major, m.version.minor = c["version"]
        m.flags = c["flags"]
    if c["deleter"]:
        m.deleter = _count_deleter
    name = c["name"] or ("dltensor_versioned" if c["versioned"] else "dltensor")
    name_buf = ctypes.create_string_buffer(name.encode("utf-8"))
    _KEEP.extend([m, shape, name_buf])
    address = ctypes.addressof(m)
    return _capsule_new(address, name_buf, None), address


def _numpy_array(s: dict) -> Any:
    import numpy as np
    try:
        if s["dtype"] in ("bfloat16", "float8_e4m3fn", "int4"):
            import ml_dtypes
            dt = np.dtype(getattr(ml_dtypes, s["dtype"]))
        else:
            dt = np.dtype(s["dtype"])
        shape = tuple(s["shape"])
        base = np.zeros(8192 + s["offset"], np.uint8)
        if s["strides"] is None:
            count = int(np.prod(shape)) if shape else 1
            arr = base[s["offset"]: s["offset"] + count * dt.itemsize].view(dt).reshape(shape)
        else:
            start = base[4096 + s["offset"]: 4096 + s["offset"] + dt.itemsize].view(dt)
            arr = np.lib.stride_tricks.as_strided(start, shape=shape, strides=tuple(s["strides"]),
                                                  writeable=True)
    except (TypeError, ValueError) as exc:
        raise SetupRefused(f"NumPy refused {s!r}: {exc}") from None
    if s["readonly"]:
        arr.flags.writeable = False
    return arr


def _numpy_object(s: dict, mode: str) -> Any:
    arr = _numpy_array(s)
    if mode == "direct":
        return arr
    if mode == "device_lies":
        return Producer(lambda stream, max_version: arr.__dlpack__(), device=(2, 0))   # says CUDA, gives CPU
    if mode == "legacy":
        return Producer(lambda stream, max_version: arr.__dlpack__(), legacy=True)
    return Producer(lambda stream, max_version: arr.__dlpack__(max_version=max_version))


def _hostile(kind: str) -> Any:
    import numpy as np
    good = np.zeros(4, np.float32)

    def raiser(exc: type) -> Any:
        def make(stream: Any, max_version: Any) -> Any:
            raise exc("producer refused")
        return make

    table: dict[str, Any] = {
        "raise_type": lambda: Producer(raiser(TypeError)),
        "raise_value": lambda: Producer(raiser(ValueError)),
        "raise_buffer": lambda: Producer(raiser(BufferError)),
        "raise_hostile": lambda: Producer(raiser(HostileError)),
        "return_none": lambda: Producer(lambda **k: None),
        "return_int": lambda: Producer(lambda **k: 5),
        "return_str": lambda: Producer(lambda **k: "dltensor"),
        "return_list": lambda: Producer(lambda **k: [good.__dlpack__()]),
        "return_foreign_capsule": lambda: Producer(lambda **k: _capsule_new(ctypes.addressof(_KEEP_INT), b"foo", None)),
        "return_used_capsule": lambda: Producer(lambda **k: _capsule_new(ctypes.addressof(_KEEP_INT),
                                                                          b"used_dltensor", None)),
        "not_callable": lambda: type("NotCallable", (), {"__dlpack__": 5})(),
        "no_kwargs": lambda: type("NoKwargs", (), {"__dlpack__": lambda self: good.__dlpack__()})(),
        "device_raises": lambda: Producer(lambda **k: good.__dlpack__(), device="raise"),
        "device_short": lambda: Producer(lambda **k: good.__dlpack__(), device=(1,)),
        "device_strs": lambda: Producer(lambda **k: good.__dlpack__(), device=("cpu", "0")),
        "device_huge": lambda: Producer(lambda **k: good.__dlpack__(), device=(2**70, 2**70)),
        "getattr_raises": lambda: type("Hostile", (), {"__getattr__": _raise_getattr})(),
        "both_protocols": lambda: type("Both", (CAIHolder,), {"__dlpack__": lambda self, **k: good.__dlpack__()})(
            {"version": 3, "shape": (4,), "typestr": "<\udcff", "data": (PTR, False)}),
        "cai_property_raises": lambda: type("CAIRaises", (), {"__cuda_array_interface__": property(_raise_prop)})(),
        "cai_not_dict": lambda: CAIHolder([("version", 3)]),
        "cai_dict_subclass": lambda: CAIHolder(_RaisingDict(version=3, shape=(4,), typestr="<f4", data=(PTR, False))),
    }
    return table[kind]()


_KEEP_INT = ctypes.c_int64(0)


def _raise_getattr(self: Any, name: str) -> Any:
    raise HostileError(f"__getattr__({name!r}) refused")


def _raise_prop(self: Any) -> Any:
    raise HostileError("__cuda_array_interface__ refused")


class _RaisingDict(dict):
    def __getitem__(self, key: Any) -> Any:
        raise HostileError("dict subclass __getitem__ refused")

    def get(self, key: Any, default: Any = None) -> Any:
        raise HostileError("dict subclass get refused")


def _misc(kind: str) -> Any:
    import numpy as np
    table: dict[str, Any] = {
        "none": lambda: None, "int": lambda: 5, "float": lambda: 1.5, "str": lambda: "array", "bytes": lambda: b"xx",
        "list": lambda: [1.0, 2.0], "tuple": lambda: (1,), "object": object, "np_scalar": lambda: np.float32(1.0),
        "np_0d": lambda: np.array(1.0, np.float32), "np_32d": lambda: np.zeros((1,) * 32, np.float32),
        "np_object": lambda: np.array([None, 1], dtype=object),
        "np_structured": lambda: np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]),
        "memoryview": lambda: memoryview(bytearray(16)), "bytearray": lambda: bytearray(16), "range": lambda: range(3),
        "np_masked": lambda: np.ma.masked_array(np.zeros(3, np.float32), mask=[0, 1, 0]),
        "bridge_array_huge": _huge_bridge_array,
    }
    return table[kind]()


def _huge_bridge_array() -> Any:
    import bridge
    return bridge.Array(ptr=PTR, shape=[2**62, 2**62], strides=[4, 4], dtype="float32", device_type=1,
                        device_id=0, readonly=False, owner=None)


def build(obj: tuple) -> tuple[Any, Any]:
    """(object, capsule info or None) for an object spec."""
    kind = obj[0]
    if kind == "cai":
        return CAIHolder(obj[1]), None
    if kind == "numpy":
        return _numpy_object(obj[1], obj[2]), None
    if kind == "capsule":
        c = obj[1]
        cap, address = _build_capsule(c)
        device = {"match": c["device"], "none": "none"}.get(c["dlpack_device"], c["dlpack_device"]) \
            if isinstance(c["dlpack_device"], str) else c["dlpack_device"]
        return Producer(lambda stream, max_version: cap, device=device, legacy=c["legacy_producer"]), (cap, address)
    if kind == "hostile":
        return _hostile(obj[1]), None
    return _misc(obj[1]), None


# ------------------------------------------------------------------------------- execution
_LAUNCHERS: dict[str, Any] = {}


def warm() -> None:
    import bridge  # noqa: F401


def _launcher(name: str) -> Any:
    hit = _LAUNCHERS.get(name)
    if hit is None:
        import numpy as np
        from interop_tests.fuzz import fuzz_kernels
        k = getattr(fuzz_kernels, name)
        proto = np.zeros((4,) if name == "scale" else (4, 4), np.float32)
        args = (proto, proto.copy(), np.float32(1)) if name == "scale" else (proto, proto.copy())
        hit = _LAUNCHERS[name] = k._sim_validator(k.build(*args))
    return hit


def _describe(a: Any) -> str:
    return repr((a.shape, a.strides, a.dtype, a.ptr, a.readonly, a.device_type, a.device_id, repr(a)[:80]))


def _run_asarray(obj: Any) -> str:
    import bridge
    res = bridge.asarray(obj)
    try:
        out = _describe(res)
        if res.is_host:
            cap = res.__dlpack__()      # re-export the odd view, then drop the capsule unconsumed
            del cap
    finally:
        del res                         # a traceback must not keep the view (and its owner) alive
    return out


def _run_launch(obj: Any, spec: dict) -> str:
    import numpy as np
    shape = (spec["n"],) if spec["kernel"] == "scale" else (spec["n"], 3)
    a, out = np.ones(shape, np.float32), np.zeros(shape, np.float32)
    args: list[Any] = [a, out] + ([np.float32(2)] if spec["kernel"] == "scale" else [])
    if spec["position"] == "both":
        args[0] = args[1] = obj
    else:
        args[spec["position"]] = obj
    import bridge
    views = tuple(bridge.asarray(x) if isinstance(x, np.ndarray) and x is not obj else x for x in args)
    g, b, smem, skip = _launcher(spec["kernel"]).validate_only(views, grid=spec["grid"], block=spec["block"],
                                                              shared_mem=spec["shared_mem"])
    return f"valid grid={g} block={b} smem={smem} skip={skip}"


def execute(spec: dict, variant: str) -> str:
    obj, cap = build(spec["obj"])
    error: BaseException | None = None
    summary = ""
    try:
        summary = _run_asarray(obj) if variant == "asarray" else _run_launch(obj, spec)
    except BaseException as exc:   # noqa: BLE001 - re-raised after the ownership check
        error = exc
    if cap is not None:
        capsule, address = cap
        del obj
        if error is not None:
            _drop_frames(error)          # frames in a traceback keep views (and their owners) alive
        gc.collect()
        _check_ownership(capsule, address, spec["obj"][1], error)
    if error is not None:
        raise error
    return summary


def _drop_frames(error: BaseException) -> None:
    """Keep the traceback as text (a note) and drop the frames, along the whole exception chain."""
    import traceback
    text = "".join(traceback.format_exception(error))
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    error.add_note("original traceback:\n" + text)


def _check_ownership(capsule: Any, address: int, c: dict, error: BaseException | None) -> None:
    calls = _DELETER_CALLS.pop(address, 0)
    name = (_capsule_name(capsule) or b"").decode("utf-8", "replace")
    consumed = name.startswith("used_") and name != (c["name"] or "")
    outcome = f"after {'error ' + type(error).__name__ if error else 'success'}"
    if calls > 1:
        raise Oracle(f"DLPack deleter ran {calls} times ({outcome}; capsule now named {name!r})")
    if c["deleter"] and consumed and calls == 0:
        raise Oracle(f"the consumer renamed the capsule to {name!r} (took ownership) but never ran the "
                     f"deleter once its view was gone ({outcome})")
    if not consumed and calls:
        raise Oracle(f"the deleter ran although the consumer did not take ownership (capsule still named "
                     f"{name!r}; {outcome})")


def allowed(exc: BaseException, spec: dict, variant: str) -> bool:
    from bridge.errors import LaunchContractError, CudaError, NoDeviceError
    if isinstance(exc, (HostileError, SetupRefused, LaunchContractError)):
        return True
    if variant == "asarray":
        return isinstance(exc, (TypeError, ValueError, BufferError, CudaError, NoDeviceError))
    return False
