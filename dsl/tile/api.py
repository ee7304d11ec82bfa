"""Names a @tile.kernel body may call. They are recognised by identity by the tile front end and
mean nothing in plain Python: calling one outside a kernel raises a TypeError saying so.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from dsl.ir.types import SCALARS, ScalarType
from dsl.tile import tileops
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


# tile.<op>: one object per row of the tile-op table (dsl/tile/tileops.py), its doc line as __doc__
INTRINSICS: dict[str, Intrinsic] = {row.name: Intrinsic(row.name, row.doc_line()) for row in tileops.TILE_OPS}
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
    """Subscriptable annotation marker: tile.Array[f32, 2], tile.Atomic[f32, 1] (updated only through
    atomics), tile.Constant[int] (and, through the host class, tile.Partition[f32, 2])."""

    def __init__(self, kind: str, args: tuple = ()) -> None:
        self.kind = kind
        self.args = args

    def __getitem__(self, item) -> "_Annot":
        return _Annot(self.kind, item if isinstance(item, tuple) else (item,))

    def __repr__(self) -> str:
        return f"tile.{self.kind}[{', '.join(map(repr, self.args))}]" if self.args else f"tile.{self.kind}"


Array = _Annot("Array")
Atomic = _Annot("Atomic")      # an array written only through tile.atomic_* / tile.scatter_*, by any block
Constant = _Annot("Constant")
