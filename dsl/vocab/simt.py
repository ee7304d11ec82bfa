"""The names SIMT kernels are written with: the parameter annotations `simt.Array[T, ndim]` and
`simt.DisjointSlice[T, ndim]` (what a kernel may do with an argument: read anything; write only its own
element of a DisjointSlice), and the names of `dsl.simt` that only mean something inside a kernel.

Each is an `Intrinsic` with a `key` ("thread.index_1d", "atomic.add", "math.sqrt", ...). The front end
recognises them by that key (dsl/frontend/calls.py holds the one table of what each key lowers to);
calling one from ordinary Python raises a clear error instead of doing something half-right. The math
functions (`simt.sqrt`, ...) are not listed here: they are the rows of dsl/vocab/math.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from dsl.types import ScalarDType, is_typevar
from dsl.vocab import math as _vocab


class Intrinsic:
    """A kernel-only function; `key` names its entry in the front end's table."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"simt.{self.key.removeprefix('math.')}() can only be used inside a "
                           "@simt.kernel or @simt.device function")

    def __repr__(self) -> str:
        return f"<simt intrinsic {self.key}>"


class Register:
    """A hardware register read (`simt.threadIdx.x`, `simt.warp_size`): PTX special register name."""

    def __init__(self, name: str, public: str) -> None:
        self.name, self.public = name, public

    def __repr__(self) -> str:
        return f"<simt register {self.public}>"


class Dim3:
    """`threadIdx`, `blockIdx`, `blockDim`, `gridDim`: `.x .y .z` registers."""

    def __init__(self, ptx: str, public: str) -> None:
        self.x = Register(f"{ptx}.x", f"{public}.x")
        self.y = Register(f"{ptx}.y", f"{public}.y")
        self.z = Register(f"{ptx}.z", f"{public}.z")
        self.public = public

    def __repr__(self) -> str:
        return f"<simt {self.public}>"


class Namespace:
    """A group of intrinsics (`simt.thread`, `simt.atomic`, ...)."""

    def __init__(self, prefix: str, names: tuple[str, ...]) -> None:
        self._prefix = prefix
        for n in names:
            setattr(self, n, Intrinsic(f"{prefix}.{n}"))

    def __repr__(self) -> str:
        return f"<simt namespace {self._prefix}>"


thread = Namespace("thread", ("index_1d", "index_2d", "index_3d", "chunk_1d", "chunk_2d", "chunk_3d"))
shared = Namespace("shared", ("array", "dynamic"))
atomic = Namespace("atomic", ("add", "sub", "min", "max", "exch", "cas", "and_", "or_", "xor"))
warp = Namespace("warp", ("shfl", "shfl_up", "shfl_down", "shfl_xor", "ballot", "any", "all", "sum",
                          "max", "min", "index_1d", "lanes", "rows", "group"))
# A block that owns rows as a warp does (dsl/frontend/ownership.py): its index and its threads' stride.
block = Namespace("block", ("index_1d", "threads", "rows"))

GROUP_METHODS = ("index_1d", "lanes", "rows", "rank", "sum", "max", "min", "shfl", "shfl_up", "shfl_down",
                 "shfl_xor", "ballot", "any", "all")


class GroupMethod:
    """`g.sum(v)`, `g.index_1d()`, ... of a `simt.warp.group(n)`: lowered by the front end's call
    protocol (`_dsl_call_`) with the group's width (dsl/frontend/groups.py)."""

    def __init__(self, width: int, name: str) -> None:
        self.width, self.name = width, name

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"simt.warp.group({self.width}).{self.name}() can only be used inside a "
                           "@simt.kernel or @simt.device function")

    def _dsl_call_(self, lowerer, node):
        return lowerer.call_group(self, node)

    def __repr__(self) -> str:
        return f"<simt.warp.group({self.width}).{self.name}>"


class WarpGroup:
    """`simt.warp.group(n)` inside a kernel: the n-lane groups a warp splits into (n = 2, 4, 8, 16 or
    32), each with its own index, rank, lanes loop, reductions, shuffles and votes."""

    def __init__(self, width: int) -> None:
        self.width = width
        for name in GROUP_METHODS:
            setattr(self, name, GroupMethod(width, name))

    def __repr__(self) -> str:
        return f"<simt.warp.group({self.width})>"


threadIdx = Dim3("tid", "threadIdx")
blockIdx = Dim3("ctaid", "blockIdx")
blockDim = Dim3("ntid", "blockDim")
gridDim = Dim3("nctaid", "gridDim")
warp_size = Register("warpsize", "warp_size")
lane_id = Intrinsic("lane_id")
sync_threads = Intrinsic("sync_threads")
unsafe = Intrinsic("unsafe")
# `for i in simt.range(start, stop, step, unroll=4)`: range with an unroll hint (dsl/frontend/unroll.py).
range = Intrinsic("range")  # noqa: A001   (simt.range, as tl.range; this module calls no builtin range)

# simt.<math function>: one object per row of the math table (dsl/vocab/math.py), made on first use.
# An explicit cache (rows are only ever added or removed by dsl.vocab.register_math / unregister_math).
_MATH_OBJECTS: dict[str, Intrinsic] = {}


def math_intrinsic(name: str) -> Intrinsic | None:
    """`simt.<name>` for a row of the math table, None when the table has no such row."""
    if _vocab.get(name) is None:
        return None
    obj = _MATH_OBJECTS.get(name)
    if obj is None:
        obj = _MATH_OBJECTS[name] = Intrinsic(f"math.{name}")
    return obj


# ------------------------------------------------------------------ parameter annotations

@dataclass(frozen=True)
class ArraySpec:
    """What `Array[...]` / `DisjointSlice[...]` evaluates to: dtype (ScalarDType or TypeVar), ndim;
    optional: `simt.Array[f32] | None` / `simt.Optional[...]` (a launch may pass None)."""
    dtype: object
    ndim: int
    writable: bool
    optional: bool = False

    def __repr__(self) -> str:
        kind = "DisjointSlice" if self.writable else "Array"
        text = f"simt.{kind}[{self.dtype!r}, {self.ndim}]"
        return f"{text} | None" if self.optional else text

    def __or__(self, other: object) -> "ArraySpec":
        if other is None or other is type(None):
            return replace(self, optional=True)
        return NotImplemented

    __ror__ = __or__


class Optional:
    """`simt.Optional[simt.Array[f32]]`: the same as `simt.Array[f32] | None` — the argument may be
    None; the kernel must test it (`if x is not None:`) before any use."""

    def __class_getitem__(cls, item: object) -> ArraySpec:
        if not isinstance(item, ArraySpec):
            raise TypeError(f"simt.Optional[...] takes simt.Array[...] or simt.DisjointSlice[...], got {item!r}")
        return replace(item, optional=True)


def _spec(item: object, writable: bool, kind: str) -> ArraySpec:
    parts = item if isinstance(item, tuple) else (item,)
    if len(parts) not in (1, 2):
        raise TypeError(f"simt.{kind}[dtype] or simt.{kind}[dtype, ndim] expected, got {item!r}")
    dtype, ndim = parts[0], (parts[1] if len(parts) == 2 else 1)
    if not (isinstance(dtype, ScalarDType) or is_typevar(dtype)):
        raise TypeError(f"simt.{kind}[...]: dtype must be a dsl scalar type (f32, i32, ...) or a "
                        f"dsl.TypeVar, got {dtype!r}")
    if not isinstance(ndim, int) or isinstance(ndim, bool) or not 1 <= ndim <= 3:
        raise TypeError(f"simt.{kind}[...]: ndim must be 1, 2 or 3, got {ndim!r}")
    return ArraySpec(dtype, ndim, writable)


class Array:
    """Read-only kernel array of any strides: `simt.Array[f32]`, `simt.Array[T, 2]`."""

    def __class_getitem__(cls, item: object) -> ArraySpec:
        return _spec(item, False, "Array")

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("simt.Array is an annotation (simt.Array[f32, 1]); pass NumPy/CuPy/torch "
                        "or bridge arrays to the kernel")


class DisjointSlice:
    """Writable kernel array; each thread may write only the element(s) it owns."""

    def __class_getitem__(cls, item: object) -> ArraySpec:
        return _spec(item, True, "DisjointSlice")

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("simt.DisjointSlice is an annotation (simt.DisjointSlice[f32, 1]); pass "
                        "NumPy/CuPy/torch or bridge arrays to the kernel")
