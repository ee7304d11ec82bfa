"""Runtime arguments → IR signature (one type per parameter), the key of a specialisation.

Arrays: NumPy arrays, `bridge.Array`, and any CuPy/torch/DLPack/CAI object (viewed through
`bridge.asarray`, never imported here). dtype and ndim come from the array; the layout is "C" when it
is C-contiguous and the pointer's 16-byte alignment is recorded (both specialise the code, as the
native dispatcher's key does). Scalars: Python/NumPy numbers, or a dsl type object standing for one.
Generic dtypes (TypeVars) bind from arrays first, then from scalar values. None for an optional array
(`simt.Array[f32] | None`) selects its own specialisation (ArrayType.absent: `x is not None` is False
there); its dtype comes from the annotation or from a TypeVar another argument binds.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from bridge import dtypes as _dtypes
from dsl.annotations import ParamAnnotation
from dsl.ir import types as irt
from dsl.types import ScalarDType, ir_scalar_from_dtype
from dsl.typevars import TypeVarMismatch, bind_dtype

_LONG = {row.name: row.long_name for row in _dtypes.kernel_rows()}   # "f32" -> "float32"


def _long(t: irt.ScalarType | Any) -> str:
    return _LONG.get(getattr(t, "name", ""), str(t))


class NotAnArray(TypeError):
    """The object offers no array protocol at all (as opposed to offering one that fails)."""


def _has(obj: Any, name: str) -> bool:
    """hasattr that counts an attribute whose getter raises as present (its use then fails and says
    why), instead of letting a hostile property's exception escape from a membership test."""
    try:
        return hasattr(obj, name)
    except Exception:  # noqa: BLE001 - a property that raises: the object claims the protocol
        return True


def array_facts(obj: Any) -> tuple[irt.ScalarType | None, str, int, tuple[int, ...], bool, bool]:
    """(dtype, dtype text, ndim, shape, c_contiguous, aligned16) of an array-like; NotAnArray when it
    offers no array protocol; whatever the producer raises when it offers one that fails."""
    if isinstance(obj, np.ndarray):
        return (ir_scalar_from_dtype(obj.dtype), str(obj.dtype), obj.ndim, obj.shape,
                bool(obj.flags.c_contiguous), obj.ctypes.data % 16 == 0)
    if not (_has(obj, "__dlpack__") or _has(obj, "__cuda_array_interface__") or _has(obj, "dtype_tag")):
        raise NotAnArray("not an array")
    import bridge
    arr = obj if hasattr(obj, "dtype_tag") else bridge.asarray(obj)
    tag = arr.dtype_tag
    return (irt.SCALARS.get(tag), tag, arr.ndim, tuple(arr.shape), bool(arr.is_c_contiguous),
            arr.ptr % 16 == 0)


def _scalar_type(value: Any) -> irt.ScalarType | None:
    if isinstance(value, ScalarDType):
        return value.ir
    if isinstance(value, np.generic):
        return ir_scalar_from_dtype(value.dtype)
    if isinstance(value, bool):
        return irt.BOOL
    if isinstance(value, int):
        return irt.I64
    if isinstance(value, float):
        return irt.F64
    return None


def _is_arraylike(value: Any) -> bool:
    return isinstance(value, np.ndarray) or _has(value, "__dlpack__") or \
        _has(value, "__cuda_array_interface__") or _has(value, "dtype_tag")


def signature_of(kernel: str, anns: Sequence[ParamAnnotation], args: Sequence[Any]) -> list[irt.Type]:
    """The IR signature for `args`; raises the bridge's typed launch errors on mismatches."""
    from bridge import errors as E
    if len(args) != len(anns):
        raise E.ArgumentCountError(f"{kernel}: expected {len(anns)} arguments "
                                   f"({', '.join(a.name for a in anns)}), got {len(args)}",
                                   kernel=kernel)
    typevars: dict[Any, irt.ScalarType] = {}
    out: list[irt.Type | None] = [None] * len(anns)
    order = sorted(range(len(anns)), key=lambda k: (anns[k].kind != "array", args[k] is None))
    for k in order:
        ann, value = anns[k], args[k]
        where = f"{kernel}: argument '{ann.name}' (#{k})"   # 0-based, as the validator
        if ann.kind == "array":
            out[k] = _array_type(where, ann, value, typevars, k, kernel, E)
        else:
            out[k] = _scalar_param(where, ann, value, typevars, k, kernel, E)
    return out  # type: ignore[return-value]


def _absent_type(where: str, ann: ParamAnnotation, typevars: dict, k: int, kernel: str, E: Any) -> irt.ArrayType:
    """The type of None passed for `ann`: allowed only where the annotation is optional."""
    kind = "DisjointSlice" if ann.writable else "Array"
    if not ann.optional:
        raise E.ArgumentKindError(f"{where}: expected an array (simt.{kind}), got None (declare the parameter "
                                  f"simt.{kind}[...] | None to allow None)", kernel=kernel, arg=k, arg_name=ann.name)
    dtype = typevars.get(ann.dtype) if ann.is_generic else ann.dtype
    if dtype is None:
        raise E.DTypeError(f"{where}: got None, and no other argument binds its dtype {ann.dtype}; pass an "
                           "array, or give the parameter a concrete dtype", kernel=kernel, arg=k, arg_name=ann.name)
    return irt.ArrayType(dtype, ann.ndim, ann.writable, "any", False, optional=True, absent=True)


def _array_type(where: str, ann: ParamAnnotation, value: Any, typevars: dict, k: int, kernel: str,
                E: Any) -> irt.ArrayType:
    kind = "DisjointSlice" if ann.writable else "Array"
    if value is None:
        return _absent_type(where, ann, typevars, k, kernel, E)
    try:
        dtype, text, ndim, shape, contiguous, aligned = array_facts(value)
    except NotAnArray:
        raise E.ArgumentKindError(f"{where}: expected an array (simt.{kind}), got "
                                  f"{type(value).__name__}", kernel=kernel, arg=k,
                                  arg_name=ann.name) from None
    except (E.NoDeviceError, E.CudaError):
        raise                     # the bridge's own: no GPU to ask where a CAI pointer lives
    except Exception as exc:  # noqa: BLE001 - a hostile producer: the intake error, as the launcher says it
        raise E.ArgumentKindError(f"{where}: {type(value).__name__} failed as an array producer "
                                  f"({type(exc).__name__}: {exc})", kernel=kernel, arg=k,
                                  arg_name=ann.name) from exc
    if dtype is None:
        raise E.DTypeError(f"{where}: arrays of dtype {text} are not supported by the DSL",
                           kernel=kernel, arg=k, arg_name=ann.name)
    try:
        bind_dtype(typevars, ann.dtype, dtype)
    except TypeVarMismatch as m:
        bound = " (bound by an earlier argument)" if m.typevar is not None else ""
        raise E.DTypeError(f"{where}: expected {_long(m.expected)} array{bound}, got {_long(dtype)} array of "
                           f"shape {tuple(shape)}", kernel=kernel, arg=k, arg_name=ann.name) from None
    if ndim != ann.ndim:
        raise E.NdimError(f"{where}: expected a {ann.ndim}-D array, got a {ndim}-D array of shape "
                          f"{tuple(shape)}", kernel=kernel, arg=k, arg_name=ann.name)
    return irt.ArrayType(dtype, ndim, ann.writable, "C" if contiguous else "any", aligned, optional=ann.optional)


def _scalar_param(where: str, ann: ParamAnnotation, value: Any, typevars: dict, k: int, kernel: str,
                  E: Any) -> irt.ScalarType:
    if _is_arraylike(value):
        raise E.ArgumentKindError(f"{where}: expected a scalar, got an array", kernel=kernel, arg=k,
                                  arg_name=ann.name)
    t = _scalar_type(value)
    if t is None:
        raise E.ArgumentKindError(f"{where}: expected a number, got {type(value).__name__}",
                                  kernel=kernel, arg=k, arg_name=ann.name)
    want: irt.ScalarType = bind_dtype(typevars, ann.dtype, t, exact=False)
    if want.is_f8:
        raise E.DTypeError(f"{where}: f8 scalars are not supported (f8 arrays are: their elements read as "
                           "f32); pass the value as f32", kernel=kernel, arg=k, arg_name=ann.name)
    if t.is_float and not want.is_float:
        raise E.DTypeError(f"{where}: expected {_long(want)}, got a float ({value!r})", kernel=kernel,
                           arg=k, arg_name=ann.name)
    return want
