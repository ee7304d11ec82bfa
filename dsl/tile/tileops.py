"""The one table of tile ops: every other list of them is derived from it.

One `TileOp` row per `tile.<name>` function says what any part of the DSL needs to know about it:
- `name`: `tile.<name>`, and what the front end dispatches on;
- `params`: its parameters and defaults as Python writes them (`"x, axis=None, keepdims=False"`); the
  binder (dsl/tile/intrinsics.py) accepts exactly these, by position or keyword, and refuses others;
- `doc`: one line on what it computes. The documentation's line is made of the signature, this line
  and the method form (`tile.<name>.__doc__`, docs/api.md, the table in docs/tile.md);
- `handler`: its typing (dsl/tile/handlers.py): argument checks, then tile IR through dsl/tile/ops.py;
- `method`: whether it is also a method of its first argument (`x.sum(axis)`, `out.store(v)`).

The math functions are not here: they are rows of dsl/vocab/math.py, shared with SIMT kernels.
Tile ops are a closed set (no run-time registration, unlike math rows): a new op usually needs a new
IR node with its simulator and lowering cases, which no row can supply (docs/contributing.md,
"A new tile op").
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable

from dsl.errors import DslDeclarationError
from dsl.ir.types import SCALARS
from dsl.tile import handlers as h

TILE = "tile"            # receiver of a method form: any tile value (`x.sum()`)
PARTITION = "partition"  # a tile.Partition parameter (`out.store(v)`)
Handler = Callable[..., object]   # (front end, name, bound arguments, node, loc) -> tile IR or a value


class TileOpError(DslDeclarationError, ValueError):
    """A malformed row of the tile-op table; the message names the row and the field."""


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One parameter: its name, its default (REQUIRED when it has none) and the default as written."""
    name: str
    default: object = REQUIRED
    text: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __str__(self) -> str:
        return self.name if self.required else f"{self.name}={self.text}"


@dataclass(frozen=True)
class MethodForm:
    """The op as a method of its first argument, a `receiver` (TILE or PARTITION). `params`: the
    method's parameters when not all the others (the rest keep their defaults); `star`: the
    positional arguments fill the one parameter as a tuple (`x.reshape(2, 4)` or `x.reshape((2, 4))`)."""
    receiver: str
    star: bool = False
    params: tuple[str, ...] | None = None


TILE_METHOD = MethodForm(TILE)
TILE_STAR = MethodForm(TILE, star=True)
PARTITION_METHOD = MethodForm(PARTITION)


@dataclass(frozen=True)
class TileOp:
    """One tile op (fields: see the module docstring)."""
    name: str
    params: tuple[Param, ...]
    doc: str
    handler: Handler
    method: MethodForm | None = None

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def signature(self) -> str:
        """`sum(x, axis=None, keepdims=False)`."""
        return f"{self.name}({', '.join(map(str, self.params))})"

    def method_params(self) -> tuple[Param, ...]:
        """The parameters a method call binds (the receiver is the first parameter)."""
        assert self.method is not None
        chosen = self.method.params
        return tuple(p for p in self.params[1:] if chosen is None or p.name in chosen)

    def method_signature(self, receiver: str | None = None) -> str:
        """`x.sum(axis=None, keepdims=False)`, `x.reshape(*shape)`, `p.store(value)`; `receiver`
        replaces `x` / `p`."""
        assert self.method is not None
        params = self.method_params()
        text = f"*{params[0].name}" if self.method.star else ", ".join(map(str, params))
        return f"{receiver or ('p' if self.method.receiver == PARTITION else 'x')}.{self.name}({text})"

    def doc_line(self) -> str:
        """The documentation's line: signature, doc, method form."""
        line = f"{self.signature()}: {self.doc}"
        return line + (f"; also {self.method_signature()}" if self.method else "")


def signature(text: str) -> tuple[Param, ...]:
    """Parameters written as Python writes them: literal defaults, or a dtype name (`dtype=f32`)."""
    try:
        args = ast.parse(f"def f({text}): pass").body[0].args  # type: ignore[attr-defined]
    except SyntaxError:
        raise TileOpError(f"parameters {text!r} are not a Python parameter list") from None
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise TileOpError(f"parameters {text!r}: plain parameters only")
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    return tuple(Param(a.arg) if d is None else Param(a.arg, _default(d, text), ast.unparse(d))
                 for a, d in zip(args.args, defaults))


def _default(node: ast.expr, text: str) -> object:
    if isinstance(node, ast.Name) and node.id in SCALARS:
        return SCALARS[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise TileOpError(f"parameters {text!r}: default {ast.unparse(node)} is neither a literal "
                          "nor a dtype name") from None


def op(name: str, params: str, doc: str, handler: Handler, method: MethodForm | None = None) -> TileOp:
    return TileOp(name, signature(params), doc, handler, method)


_REDUCE = "x, axis=None, keepdims=False"
_ATOMIC_WORDS = (("add", "add"), ("max", "take the maximum of"), ("min", "take the minimum of"))

TILE_OPS: tuple[TileOp, ...] = (
    op("bid", "axis", "this tile block's tile coordinate along the grid partition's axis `axis` (i32)",
       h.grid_query),
    op("num_blocks", "axis", "number of tile blocks along the grid partition's axis `axis` (i32)",
       h.grid_query),
    op("num_tiles", "partition, axis", "number of tiles of `partition` along its axis `axis` (i32); a "
       "partition of another ndim than the grid counts its own tiles", h.num_tiles, PARTITION_METHOD),
    op("load", "array, index=None, shape=None, padding=0", "the tile at `index` (in tile units) of "
       "shape `shape` of an array parameter, elements outside the array reading `padding`; of a "
       "partition, this block's own tile (no `index` or `shape`)", h.load,
       MethodForm(PARTITION, params=("padding",))),
    op("store", "partition, value, chunk=None", "write `value` (broadcast and cast to the tile's shape "
       "and dtype) into this block's tile of `partition`, edge-masked: a tile block writes exactly its "
       "own tile; with `chunk`, `value` is a sub-tile whose shape divides the tile's and `chunk` its "
       "index inside the block's own tile (an index outside it writes nothing)", h.store,
       PARTITION_METHOD),
    op("block_order", "run, group=None", "the order the blocks take the grid's tiles: in runs of `run` "
       "consecutive tiles (an integer scalar of parameters and constants: one head's query blocks), `group` "
       "runs at a time, every run's first tile, then every run's second (so where work grows or falls along "
       "a run, as causal attention's, the grid's blocks end evenly loaded); `group` None: the lowering switch "
       "block_group's (default 1); a statement at the kernel's top level, once; the natural order where `run` "
       "does not divide the tile count or the group is 1",
       h.block_order),
    op("cdiv", "a, b", "ceil(`a` / `b`) of integer scalars (`b` > 0): the chunk count of a loop",
       h.cdiv),
    op("matmul", "a, b, acc=None", "`a @ b` (+ `acc`) with f32 accumulation: two f16, two bf16, two "
       "f32 (as tf32) or two f8 tiles", h.matmul),
    op("mma", "a, b, acc", "`acc + a @ b` with `acc` the f32 accumulator", h.matmul),
    op("sum", _REDUCE, "sum along `axis` (every axis when None); bool sums give i32, f16/bf16 sums "
       "accumulate in f32", h.reduce, TILE_METHOD),
    op("max", _REDUCE, "largest element along `axis` (PTX `max`: a NaN operand is ignored)", h.reduce,
       TILE_METHOD),
    op("min", _REDUCE, "smallest element along `axis` (PTX `min`: a NaN operand is ignored)", h.reduce,
       TILE_METHOD),
    op("argmax", _REDUCE, "index (i32) of the largest element along `axis`, the first on ties (of the "
       "flattened tile when `axis` is None)", h.reduce, TILE_METHOD),
    op("argmin", _REDUCE, "index (i32) of the smallest element along `axis`, the first on ties (of the "
       "flattened tile when `axis` is None)", h.reduce, TILE_METHOD),
    op("where", "cond, a, b", "elementwise `a` where `cond` holds, else `b` (broadcast, promoted)",
       h.where),
    op("reshape", "x, shape", "the elements of `x` in `shape` (one -1 is inferred)", h.reshape, TILE_STAR),
    op("transpose", "x, axes=None", "`x` with its axes reversed, or permuted as `permute` does when "
       "`axes` is given (`x.T` reverses too)", h.transpose, TILE_STAR),
    op("permute", "x, axes", "`x` with its axes permuted: result axis i is axis `axes`[i] of `x`",
       h.permute, TILE_STAR),
    op("astype", "x, dtype", "`x` converted to `dtype` (to f8: nearest even, saturating)", h.astype,
       TILE_METHOD),
    op("zeros", "shape, dtype=f32", "a tile of zeros of `shape`", h.zeros),
    op("full", "shape, value, dtype=None", "a tile of `shape` filled with `value` (`dtype` None: the "
       "value's, i32 for a Python int, f32 for a float)", h.full),
    op("arange", "n, dtype=i32", "the 1-D tile 0, 1, ..., `n` - 1 (`n` a compile-time power of two)",
       h.arange),
    op("broadcast_to", "x, shape", "`x` broadcast to `shape` (NumPy rules)", h.broadcast_to),
    op("expand_dims", "x, axis", "`x` with a unit axis inserted at `axis`", h.expand_dims),
    op("maximum", "a, b", "elementwise maximum (integers too; PTX `max` on floats)", h.minmax),
    op("minimum", "a, b", "elementwise minimum (integers too; PTX `min` on floats)", h.minmax),
    op("abs", "x", "elementwise absolute value (integers too; unsigned unchanged)", h.abs_),
    *(op(f"atomic_{o}", "array, index, value", f"atomically {w} `value`'s elements into the tile at "
         f"`index` (tile units of the value's shape; a scalar is a 1-element tile) of a tile.Atomic "
         f"array, skipping elements past its edge", h.atomic_region) for o, w in _ATOMIC_WORDS),
    *(op(f"scatter_{o}", "array, indices, values, mask=None", f"atomically {w} each element of "
         f"`values` into the tile.Atomic `array` at `indices` (an integer tile, a tuple of one per "
         f"axis for more axes), skipping indices outside the array and elements where `mask` is False",
         h.scatter) for o, w in _ATOMIC_WORDS),
    op("arrive", "counter, index, count", "the condition of an `if` only: this block's arrival at element "
       "`index` of `counter` (a tile.Atomic i32 array, zero before the first launch) once its updates of memory "
       "are visible; true in the block that arrives `count`-th, which sees every arrived block's updates, owns "
       "tile `index` (axis 0) of the tile.Atomic arrays in the branch (tile.load, tile.store_at) and sets the "
       "element back to zero", h.arrive),
    op("store_at", "array, index, value", "write `value` into the tile at `index` (tile units of its shape) of "
       "a tile.Atomic array, skipping elements past its edge: only in the branch of `if tile.arrive(counter, i, "
       "n):`, at a tile whose index along axis 0 is that `i`", h.store_at),
    op("gather", "array, indices, padding=0, mask=None", "the elements of a tile.Array at `indices` "
       "(an integer tile, a tuple of one per axis for more axes); `padding` where an index is outside "
       "the array or `mask` is False", h.gather),
)


def _check(rows: tuple[TileOp, ...]) -> dict[str, TileOp]:
    by_name: dict[str, TileOp] = {}
    for row in rows:
        where = f"tile op {row.name!r}"
        if not row.name.isidentifier() or row.name in by_name:
            raise TileOpError(f"{where}: name must be an identifier not already in the table")
        if not callable(row.handler):
            raise TileOpError(f"{where}: handler must be callable")
        form = row.method
        if form is not None:
            if form.receiver not in (TILE, PARTITION) or not row.params:
                raise TileOpError(f"{where}: a method form needs a receiver (tile or partition) and "
                                  "a first parameter to take it")
            left_out = [p for p in row.params[1:] if p not in row.method_params()]
            if any(p.required for p in left_out) or (form.star and len(row.method_params()) != 1):
                raise TileOpError(f"{where}: method parameters must leave out only defaulted ones, "
                                  "and a star method has exactly one")
        by_name[row.name] = row
    return by_name


_BY_NAME = _check(TILE_OPS)


def get(name: str) -> TileOp | None:
    """The row called `name`, or None."""
    return _BY_NAME.get(name)


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def method(receiver: str, name: str) -> TileOp | None:
    """The row whose method form is `<receiver>.<name>(...)`, or None."""
    row = _BY_NAME.get(name)
    return row if row is not None and row.method is not None and row.method.receiver == receiver else None


def method_names(receiver: str) -> tuple[str, ...]:
    """The method names a receiver kind has (TILE: `x.sum` ...; PARTITION: `out.store` ...)."""
    return tuple(r.name for r in TILE_OPS if r.method is not None and r.method.receiver == receiver)
