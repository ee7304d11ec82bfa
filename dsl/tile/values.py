"""What a name or attribute in a tile kernel body stands for when it is not a tile expression: a
parameter, a parameter's shape, a bound method. Made by the tile front end (dsl/tile/frontend.py) and
read by the tile ops' binder (dsl/tile/intrinsics.py) and handlers (dsl/tile/handlers.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.tile import ir as T


@dataclass
class ParamHandle:
    """An array or partition parameter as seen in the body (`a`, `out`)."""
    param: T.TParam


@dataclass
class ShapeHandle:
    param: T.TParam


@dataclass
class Method:
    """A bound method of a parameter handle or tile value, e.g. `out.store` or `x.sum`."""
    name: str
    receiver: object
