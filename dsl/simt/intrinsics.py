"""The names of `dsl.simt` that only mean something inside a kernel.

Each is an `Intrinsic` with a `key` ("thread.index_1d", "atomic.add", "math.sqrt", ...). The front end
recognises them by that key (dsl/frontend/calls.py holds the one table of what each key lowers to);
calling one from ordinary Python raises a clear error instead of doing something half-right. The math
functions (`simt.sqrt`, ...) are not listed here: they are the rows of dsl/vocab/math.py.
"""
from __future__ import annotations

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


thread = Namespace("thread", ("index_1d", "index_2d", "index_3d", "chunk_1d"))
shared = Namespace("shared", ("array", "dynamic"))
atomic = Namespace("atomic", ("add", "sub", "min", "max", "exch", "cas", "and_", "or_", "xor"))
warp = Namespace("warp", ("shfl", "shfl_up", "shfl_down", "shfl_xor", "ballot", "any", "all", "sum"))

threadIdx = Dim3("tid", "threadIdx")
blockIdx = Dim3("ctaid", "blockIdx")
blockDim = Dim3("ntid", "blockDim")
gridDim = Dim3("nctaid", "gridDim")
warp_size = Register("warpsize", "warp_size")
lane_id = Intrinsic("lane_id")
sync_threads = Intrinsic("sync_threads")
unsafe = Intrinsic("unsafe")

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
