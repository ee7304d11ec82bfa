"""Readable text form of the tile IR (dsl/tile/ir.py): the `tile_frontend` stage's dump.

One line per statement, nested bodies indented, each statement followed by its source line; an
expression prints inline with its tile type (`add(%x, 1.0:f32):tile<f32, (128,)>`). Variables print as
`name.N` (N = first-seen order) because identity, not the name, distinguishes them, as in the typed
IR's printer (dsl/ir/printer.py).
"""
from __future__ import annotations

from dsl.tile import ir as T
from dsl.tile.types import ArrayParamType, PartitionParamType, ScalarParamType


def format_param_type(t: object) -> str:
    """`Array[f32, 2]`, `Partition[f32, 2, tile=(16, 16)]` or the scalar dtype."""
    if isinstance(t, PartitionParamType):
        return f"Partition[{t.dtype}, {t.ndim}, tile={t.tile_shape}]"
    if isinstance(t, ArrayParamType):
        return f"{'Atomic' if t.atomic else 'Array'}[{t.dtype}, {t.ndim}]"
    if isinstance(t, ScalarParamType):
        return str(t.dtype)
    return repr(t)


def same_value(a: T.TExpr, b: T.TExpr) -> bool:
    """Do `a` and `b` compute the same value: the same text, variables told apart by identity (a
    `Read` of one variable in both; the caller makes sure it is not reassigned in between)."""
    p = _Printer()
    return p.e(a) == p.e(b)


class _Printer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.lines: list[str] = []

    def var(self, v: T.TVar) -> str:
        if id(v) not in self.names:
            self.names[id(v)] = f"{v.name}.{len(self.names)}"
        return self.names[id(v)]

    def e(self, x: T.TExpr) -> str:
        m = getattr(self, "e_" + type(x).__name__, None)
        return m(x) if m else self.generic(x)

    def args(self, xs) -> str:
        return ", ".join(self.e(i) for i in xs)

    def generic(self, x: T.TExpr) -> str:
        """A node without its own form: its name and operands (so a new node still prints)."""
        subs = [self.e(v) for v in vars(x).values() if isinstance(v, T.TExpr)]
        return f"{type(x).__name__.lower()}({', '.join(subs)}):{x.type}"

    # ------------------------------------------------------------------ expressions
    def e_Const(self, x: T.Const) -> str:
        return f"{x.value!r}:{x.type}"

    def e_ScalarArg(self, x: T.ScalarArg) -> str:
        return f"%{x.param.name}"

    def e_Read(self, x: T.Read) -> str:
        return self.var(x.var)

    def e_BlockId(self, x: T.BlockId) -> str:
        of = f" of %{x.param.name}" if x.param is not None else ""
        return f"bid({x.axis}{of})"

    def e_NumBlocks(self, x: T.NumBlocks) -> str:
        of = f" of %{x.param.name}" if x.param is not None else ""
        return f"num_blocks({x.axis}{of})"

    def e_ArrayDim(self, x: T.ArrayDim) -> str:
        return f"%{x.param.name}.shape[{x.axis}]"

    def e_Load(self, x: T.Load) -> str:
        return f"load %{x.param.name}[{self.args(x.index)}] padding={x.padding!r}:{x.type}"

    def e_BinOp(self, x: T.BinOp) -> str:
        return f"{x.op}({self.e(x.lhs)}, {self.e(x.rhs)}):{x.type}"

    e_Compare = e_BinOp

    def e_UnaryOp(self, x: T.UnaryOp) -> str:
        return f"{x.op}({self.e(x.operand)}):{x.type}"

    def e_Math(self, x: T.Math) -> str:
        return f"math.{x.fn}({self.args(x.args)}):{x.type}"

    def e_Where(self, x: T.Where) -> str:
        return f"where({self.e(x.cond)}, {self.e(x.then)}, {self.e(x.else_)}):{x.type}"

    def e_Reduce(self, x: T.Reduce) -> str:
        keep = ", keepdims" if x.keepdims else ""
        return f"{x.op}({self.e(x.operand)}, axis={x.axis}{keep}):{x.type}"

    def e_Permute(self, x: T.Permute) -> str:
        return f"permute({self.e(x.operand)}, axes={x.axes}):{x.type}"

    def e_Matmul(self, x: T.Matmul) -> str:
        acc = f", acc={self.e(x.acc)}" if x.acc is not None else ""
        return f"matmul({self.e(x.a)}, {self.e(x.b)}{acc}):{x.type}"

    def e_Full(self, x: T.Full) -> str:
        return f"full({x.value!r}):{x.type}"

    def e_Gather(self, x: T.Gather) -> str:
        mask = "" if x.mask is None else f" if {self.e(x.mask)}"
        return f"gather %{x.param.name}[{self.args(x.indices)}]{mask} padding={x.padding!r}:{x.type}"

    def e_LaunchValue(self, x: T.LaunchValue) -> str:
        return f"{x.op}():{x.type}"

    # Cast, Broadcast, Reshape, Arange print generically: cast(x):tile<f16, (16,)>, arange():...

    # ------------------------------------------------------------------ statements
    def block(self, stmts: list, depth: int) -> None:
        if not stmts:
            self.lines.append("  " * depth + "pass")
        for s in stmts:
            self.s(s, depth)

    def s(self, x: T.TStmt, d: int) -> None:
        pad = "  " * d
        where = f"  # line {x.loc.line}" if x.loc.line else ""
        if isinstance(x, T.Assign):
            self.lines.append(f"{pad}{self.var(x.var)} = {self.e(x.value)}{where}")
        elif isinstance(x, T.Store):
            at = "" if x.chunk is None else f"[chunk {self.args(x.chunk)}]"
            self.lines.append(f"{pad}store %{x.param.name}{at} <- {self.e(x.value)}{where}")
        elif isinstance(x, T.Scatter):
            mask = "" if x.mask is None else f" if {self.e(x.mask)}"
            self.lines.append(f"{pad}atomic_{x.op} %{x.param.name}[{self.args(x.indices)}] <- "
                              f"{self.e(x.value)}{mask}{where}")
        elif isinstance(x, T.For):
            self.lines.append(f"{pad}for {self.var(x.var)} in range({self.e(x.start)}, {self.e(x.stop)}, "
                              f"{self.e(x.step)}):{where}")
            self.block(x.body, d + 1)
        elif isinstance(x, T.If):
            self.lines.append(f"{pad}if {self.e(x.cond)}:{where}")
            self.block(x.then, d + 1)
            if x.else_:
                self.lines.append(f"{pad}else:")
                self.block(x.else_, d + 1)
        elif isinstance(x, T.LaunchStmt):
            self.lines.append(f"{pad}{x.op}(){where}")
        else:
            self.lines.append(f"{pad}{type(x).__name__.lower()}{where}")


def format_tile_function(fn: T.TileFunction) -> str:
    """The tile kernel `fn` as text: its header (parameters, the partition that defines the grid)
    and body."""
    p = _Printer()
    params = ", ".join(f"{q.name}: {format_param_type(q.type)}" for q in fn.params)
    p.lines.append(f"tile kernel {fn.name}({params})  [grid={fn.grid_param.name}]:")
    if fn.block_order is not None:
        p.lines.append(f"  block_order(run={p.e(fn.block_order[0])}, group={fn.block_order[1]})")
    p.block(fn.body, 1)
    return "\n".join(p.lines) + "\n"
