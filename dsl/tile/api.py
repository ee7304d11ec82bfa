"""Names a @tile.kernel body may call. They are recognised by identity by the tile front end and
mean nothing in plain Python: calling one outside a kernel raises a TypeError saying so.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from dsl.ir.types import SCALARS, ScalarType
from dsl.vocab import math as _vocab


class Intrinsic:
    """A tile-language function; `name` is what the front end dispatches on."""

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.__doc__ = doc
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        raise TypeError(f"tile.{self.name}() can only be used inside a @tile.kernel function")

    def __repr__(self) -> str:
        return f"<tile intrinsic {self.name}>"


_DOCS = {
    "bid": "bid(axis) -> i32: this tile block's tile coordinate along partition axis `axis`.",
    "num_blocks": "num_blocks(axis) -> i32: number of tile blocks along partition axis `axis`.",
    "load": "load(array, index, shape, padding=0): tile `index` (tile units) of `array`, edge-padded.",
    "store": "store(partition, value): write this block's own tile of `partition` (edge-masked).",
    "matmul": "matmul(a, b, acc=None): a @ b with f32 accumulation (tf32 for f32 inputs).",
    "mma": "mma(a, b, acc): acc + a @ b (f32 accumulator).",
    "sum": "sum(x, axis=None, keepdims=False)", "max": "max(x, axis=None, keepdims=False)",
    "min": "min(x, axis=None, keepdims=False)", "argmax": "argmax(x, axis=None) -> i32",
    "argmin": "argmin(x, axis=None) -> i32", "where": "where(cond, a, b): elementwise select",
    "reshape": "reshape(x, shape)", "transpose": "transpose(x): reverse the axes",
    "permute": "permute(x, axes)", "astype": "astype(x, dtype)",
    "zeros": "zeros(shape, dtype=f32)", "full": "full(shape, value, dtype=None)",
    "arange": "arange(n, dtype=i32)", "broadcast_to": "broadcast_to(x, shape)",
    "expand_dims": "expand_dims(x, axis)", "maximum": "maximum(a, b)", "minimum": "minimum(a, b)",
    "abs": "abs(x): elementwise absolute value (integers too; unsigned unchanged)",
}
# tile.<math function>: one object per row of the math table (dsl/vocab/math.py), made on first use.
# An explicit cache (rows are only ever added or removed by dsl.vocab.register_math / unregister_math).
_MATH_OBJECTS: dict[str, Intrinsic] = {}


def math_intrinsic(name: str) -> Intrinsic | None:
    """`tile.<name>` for a row of the math table, None when the table has no such row."""
    row = _vocab.get(name)
    if row is None:
        return None
    obj = _MATH_OBJECTS.get(name)
    if obj is None:
        obj = _MATH_OBJECTS[name] = Intrinsic(name, f"{name}({', '.join(row.params)}): {row.doc}; "
                                                    "elementwise, CUDA accuracy")
    return obj


INTRINSICS: dict[str, Intrinsic] = {n: Intrinsic(n, d) for n, d in _DOCS.items()}
INTRINSICS.update({n: math_intrinsic(n) for n in _vocab.names()})  # type: ignore[misc]


class _PythonMath(Mapping):
    """Python `math` function -> tile name: the math table's aliases (a live view, so rows
    registered later count too)."""

    def __getitem__(self, fn: object) -> str:
        return _vocab.python_functions()[fn]

    def __contains__(self, fn: object) -> bool:
        try:
            return fn in _vocab.python_functions()
        except TypeError:             # unhashable: not a function of `math`
            return False

    def __iter__(self) -> Iterator[object]:
        return iter(_vocab.python_functions())

    def __len__(self) -> int:
        return len(_vocab.python_functions())


# functions of Python's `math` module accepted in kernels, mapped to tile math names
PY_MATH: Mapping = _PythonMath()

# scalar dtypes, re-exported as tile.f32 etc. (the same objects as dsl.ir.types)
DTYPES: dict[str, ScalarType] = dict(SCALARS)


class _Annot:
    """Subscriptable annotation marker: tile.Array[f32, 2], tile.Constant[int] (and, through the host
    class, tile.Partition[f32, 2])."""

    def __init__(self, kind: str, args: tuple = ()) -> None:
        self.kind = kind
        self.args = args

    def __getitem__(self, item) -> "_Annot":
        return _Annot(self.kind, item if isinstance(item, tuple) else (item,))

    def __repr__(self) -> str:
        return f"tile.{self.kind}[{', '.join(map(repr, self.args))}]" if self.args else f"tile.{self.kind}"


Array = _Annot("Array")
Constant = _Annot("Constant")
