"""The parameters of a CuPy `ElementwiseKernel` and their types for one wrap: what `elementwise.py` generates
source and a contract from.

Why our own reading: CuPy keeps a kernel's parameters parsed (`in_params` / `out_params`: tuples of
ParameterInfo with name, dtype, ctype, raw, is_const) and decides types, array-ness and shapes only at
each call, from the call's arguments. A kernel we launch is compiled once, so those decisions are made
here, at wrap time, from what the user gives: example arguments (arrays fix their dtype and ndim,
NumPy scalars their dtype, Python numbers nothing) or `types={"T": ...}`, `scalars=(...)`, `ndim=`. A
one-letter type is a placeholder (`T x`), bound by every array and NumPy scalar of that placeholder,
which must agree; any other type is a NumPy dtype name (`float32 a`). The text form follows CuPy's:
`[raw] [_non_const] type name`, comma separated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from bridge import dtypes
from bridge.errors import DTypeError, ForeignKernelError

__all__ = ["EParam", "ElementwiseSpec", "Resolved", "parse_params", "spec_of", "resolve"]

# contract dtype -> the C type the generated kernel declares it as
C_NAMES: dict[str, str] = {
    "bool": "bool", "i8": "signed char", "u8": "unsigned char", "i16": "short", "u16": "unsigned short",
    "i32": "int", "u32": "unsigned int", "i64": "long long", "u64": "unsigned long long",
    "f16": "__half", "bf16": "__nv_bfloat16", "f32": "float", "f64": "double",
}


@dataclass(frozen=True)
class EParam:
    """One declared parameter: `dtype` a contract dtype or None for a placeholder (`ctype`, e.g. 'T')."""

    name: str
    ctype: str
    dtype: str | None
    raw: bool
    is_out: bool


@dataclass(frozen=True)
class ElementwiseSpec:
    """What an ElementwiseKernel is made of (CuPy's constructor arguments)."""

    in_params: tuple[EParam, ...]
    out_params: tuple[EParam, ...]
    operation: str
    name: str = "kernel"
    preamble: str = ""
    loop_prep: str = ""
    after_loop: str = ""
    options: tuple[str, ...] = ()

    @property
    def params(self) -> tuple[EParam, ...]:
        return self.in_params + self.out_params


@dataclass(frozen=True)
class Resolved:
    """One parameter for this wrap: its contract dtype, array or scalar, ndim (arrays)."""

    param: EParam
    dtype: str
    is_array: bool
    ndim: int = 0

    @property
    def name(self) -> str:
        return self.param.name


def _fail(kname: str, why: str, arg: str | None = None) -> ForeignKernelError:
    where = f"parameter '{arg}': " if arg else ""
    return ForeignKernelError(f"{kname}: {where}{why}", kernel=kname, arg_name=arg)


def _dtype(kname: str, name: str, value: Any) -> str:
    """Contract dtype of a dtype (a name as NumPy and CuPy read it: 'float' is float64, or a contract name
    such as 'f32'); refuses what the generated C cannot hold."""
    try:
        dt = dtypes.normalize(np.dtype(value), arg=name)
    except (TypeError, DTypeError):
        try:
            dt = dtypes.normalize(value, arg=name)
        except (TypeError, DTypeError) as exc:
            raise _fail(kname, f"type {value!r} is not a dtype ({exc})", name) from None
    if dt not in C_NAMES:
        raise _fail(kname, f"dtype {dt} is not supported by bridge.foreign.elementwise (supported: "
                           f"{', '.join(C_NAMES)}; complex needs CuPy's own headers)", name)
    return dt


def parse_params(text: str, *, is_out: bool, kname: str = "kernel") -> tuple[EParam, ...]:
    """CuPy's parameter list text (`"T x, raw T y, float32 a"`) as EParams."""
    out = []
    for part in (text.split(",") if text.strip() else []):
        words = part.split()
        if len(words) < 2:
            raise _fail(kname, f"parameter {part.strip()!r}: expected '[raw] type name'")
        ctype, name = words[-2], words[-1]
        bad = [w for w in words[:-2] if w not in ("raw", "_non_const")]
        if bad or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise _fail(kname, f"parameter {part.strip()!r}: expected '[raw] type name'")
        if "_non_const" in words[:-2] and not is_out:
            raise _non_const(kname, name)
        dtype = None if len(ctype) == 1 else _dtype(kname, name, ctype)
        out.append(EParam(name, ctype, dtype, "raw" in words[:-2], is_out))
    return tuple(out)


def _non_const(kname: str, name: str) -> ForeignKernelError:
    return _fail(kname, "a `_non_const` input is written through: not supported (the contract reads inputs; "
                        "make it an output)", name)


def _from_info(info: Any, is_out: bool, kname: str) -> EParam:
    """An EParam from CuPy's ParameterInfo (cupy/_core/_kernel.pyx)."""
    name, ctype, raw = str(info.name), str(info.ctype), bool(info.raw)
    if not is_out and not getattr(info, "is_const", True):
        raise _non_const(kname, name)
    dt = getattr(info, "dtype", None)
    if ctype == "CIndexer":
        raise _fail(kname, "a CIndexer parameter is CuPy's own", name)
    return EParam(name, ctype, None if dt is None else _dtype(kname, name, dt), raw, is_out)


def spec_of(obj: Any) -> ElementwiseSpec:
    """The spec of a `cupy.ElementwiseKernel` (or an ElementwiseSpec, returned as is). A ReductionKernel
    is refused: its generated code (a block-level tree combine in shared memory, CuPy's reduction
    indexers) is not reproduced."""
    if isinstance(obj, ElementwiseSpec):
        return obj
    kname = str(getattr(obj, "name", "kernel"))
    if hasattr(obj, "reduce_expr") or type(obj).__name__ == "ReductionKernel":
        raise ForeignKernelError(f"{kname}: cupy.ReductionKernel is not supported by bridge.foreign (its "
                                 f"block-level reduction and CuPy's reduction indexers are not reproduced); "
                                 f"write it as a RawKernel or a DSL kernel", kernel=kname)
    if not all(hasattr(obj, a) for a in ("in_params", "out_params", "operation")):
        raise TypeError(f"bridge.foreign.elementwise: expected a cupy.ElementwiseKernel or an ElementwiseSpec, "
                        f"got {type(obj).__name__}")
    kw = dict(getattr(obj, "kwargs", None) or {})
    unknown = sorted(set(kw) - {"options", "loop_prep", "after_loop"})
    if unknown:
        raise _fail(kname, f"ElementwiseKernel options {unknown} are not supported")
    return ElementwiseSpec(tuple(_from_info(p, False, kname) for p in obj.in_params),
                           tuple(_from_info(p, True, kname) for p in obj.out_params), str(obj.operation), kname,
                           str(getattr(obj, "preamble", "") or ""), str(kw.get("loop_prep", "") or ""),
                           str(kw.get("after_loop", "") or ""), tuple(kw.get("options", ()) or ()))


def _example(kname: str, p: EParam, value: Any) -> tuple[bool, str | None, tuple[int, ...] | None]:
    """(is an array, its dtype or None, its shape or None) of one example argument."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        return True, _dtype(kname, p.name, value.dtype), tuple(int(d) for d in value.shape)
    if isinstance(value, np.generic):
        return False, _dtype(kname, p.name, value.dtype), None
    if isinstance(value, (bool, int, float)):
        return False, None, None
    raise _fail(kname, f"example: expected an array, a NumPy scalar or a Python number, got "
                       f"{type(value).__name__}", p.name)


def _bind(kname: str, binding: dict[str, tuple[str, str]], p: EParam, dt: str) -> None:
    if p.dtype is not None:
        if dt != p.dtype:
            raise _fail(kname, f"declared {p.ctype}, given {dt}", p.name)
        return
    first = binding.setdefault(p.ctype, (dt, p.name))
    if first[0] != dt:
        raise _fail(kname, f"placeholder {p.ctype} is {first[0]} (from '{first[1]}'), given {dt}", p.name)


def _ndims(kname: str, spec: ElementwiseSpec, ndim: int | Mapping[str, int] | None) -> dict[str, int]:
    given = {p.name: ndim for p in spec.params} if isinstance(ndim, int) else dict(ndim or {})
    names = {p.name for p in spec.params}
    for n, v in given.items():
        if n not in names:
            raise _fail(kname, f"ndim: no parameter named {n!r}")
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise _fail(kname, f"ndim: expected an int >= 1, got {v!r}", n)
    loop = next((given[p.name] for p in spec.params if not p.raw and p.name in given), 1)
    return {p.name: given.get(p.name, 1 if p.raw else loop) for p in spec.params}


def resolve(spec: ElementwiseSpec, examples: Sequence[Any] = (), *, types: Mapping[str, Any] | None = None,
            scalars: Sequence[str] = (), ndim: int | Mapping[str, int] | None = None) -> list[Resolved]:
    """Each parameter's dtype, array-ness and ndim for this wrap (see the module docstring)."""
    kname, params = spec.name, spec.params
    if examples and len(examples) != len(params):
        raise _fail(kname, f"{len(examples)} example argument(s) for {len(params)} parameters "
                           f"({', '.join(p.name for p in params)}): give every input and output")
    binding: dict[str, tuple[str, str]] = {}
    for k, v in (types or {}).items():
        if not (isinstance(k, str) and len(k) == 1):
            raise _fail(kname, f"types: {k!r} is not a one-letter placeholder")
        binding[k] = (_dtype(kname, k, v), "types=")
    scalar_names = set(scalars)
    for n in scalar_names:
        p = next((q for q in params if q.name == n), None)
        if p is None or p.is_out:
            raise _fail(kname, f"scalars: {n!r} is not an input parameter")
    is_array = {p.name: p.name not in scalar_names for p in params}
    nd = _ndims(kname, spec, ndim)
    loop_shape = None
    for p, v in zip(params, examples):
        arr, dt, shape = _example(kname, p, v)
        is_array[p.name] = arr
        if dt is not None:
            _bind(kname, binding, p, dt)
        if shape is None:
            continue
        nd[p.name] = len(shape)
        if not p.raw:
            if loop_shape is not None and shape != loop_shape:
                raise _fail(kname, f"shape {shape}, another array has {loop_shape}: broadcasting is not "
                                   f"supported (every non-raw array has the loop's shape)", p.name)
            loop_shape = shape
    return [_resolved(kname, p, binding, is_array[p.name], nd[p.name]) for p in params]


def _resolved(kname: str, p: EParam, binding: Mapping[str, tuple[str, str]], is_array: bool, ndim: int) -> Resolved:
    if p.is_out and not is_array:
        raise _fail(kname, "an output must be an array", p.name)
    dt = p.dtype or binding.get(p.ctype, (None, ""))[0]
    if dt is None:
        raise _fail(kname, f"placeholder {p.ctype} is bound by no array: give an example array or "
                           f"types={{'{p.ctype}': dtype}}", p.name)
    if is_array and ndim < 1:
        raise _fail(kname, "0-d arrays are not supported", p.name)
    return Resolved(p, dt, is_array, ndim if is_array else 0)
