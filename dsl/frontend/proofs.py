"""Range proofs that let the front end drop run-time bounds checks.

An access `a[i0, i1, ...]` needs no check when, for every axis k, `ik >= 0` and `ik < a.shape[k]` are
known. Facts come from:
- guarded regions: inside the guarded write `out[idx] = ...`, each ThreadIndex component is below the
  matching extent of `out` (and the same for a tested `get_mut` slot and an `if i < len(a):` branch);
- `for j in range(len(a))` / `range(a.shape[k])` / `range(c)`: j is in [0, bound) when j is never assigned;
- contract relations (`requires=`): `len(a) == len(out)`, `a.shape == out.shape`, `len(x) <= len(y)`,
  `a.shape[1] == b.shape[0]` make extents equal / ordered, so a bound on one array carries to another;
  an integer scalar parameter is a term too (`V <= a.shape[1]`: `for j in range(V)` indexes a's axis 1);
- exact block / launch bounds: `threadIdx.x < block[0]`, used for static shared arrays;
- constant indices into static shared arrays.
Index expressions are compared by a *key*: ("tid", ndim, k) for ThreadIndex components, ("var", id)
for loop variables, ("reg", name) for hardware registers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.ir.relations import Extent, Relations


def strip_int_casts(e: ir.Expr) -> ir.Expr:
    """The operand under integer-to-integer casts (an index keeps its identity through them)."""
    while isinstance(e, ir.Cast) and isinstance(e.operand.type, irt.ScalarType) and e.operand.type.is_int:
        e = e.operand
    return e


def index_key(e: ir.Expr) -> tuple | None:
    """Identity of an index expression for proofs (None: not tracked).

    Sums and products of tracked values and constants get a structural key, so a guard written as
    `if by + ty + j < a.shape[0]:` proves the access `a[by + ty + j, ...]` spelled the same way.
    """
    e = strip_int_casts(e)
    if isinstance(e, ir.TupleGet) and isinstance(e.value, ir.ThreadIndexValue):
        return ("tid", e.value.ndim, e.k)
    if isinstance(e, ir.TupleGet) and isinstance(e.value, ir.OwnerIndexValue):
        return ("own", e.value.scope)
    if isinstance(e, ir.ReadVar):
        return ("var", id(e.var))
    if isinstance(e, ir.Special):
        return ("reg", e.name)
    if isinstance(e, ir.BinOp) and e.op in ("add", "mul"):
        lhs, rhs = _operand_key(e.lhs), _operand_key(e.rhs)
        if lhs is not None and rhs is not None:
            return ("bin", e.op, lhs, rhs)
    return None


def _operand_key(e: ir.Expr) -> tuple | None:
    e = strip_int_casts(e)
    if isinstance(e, ir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return ("const", e.value)
    return index_key(e)


def scalar_param_bound(stop: ir.Expr, loop_type: irt.Type) -> Extent | None:
    """`range(.., V, ..)` with V an integer scalar parameter the kernel never assigns (a ParamRef):
    the extent term (V, -1) that `requires=["V <= a.shape[1]"]` orders below a's extent
    (dsl/ir/relations.py), so `a[.., j]` needs no check. Only when the loop's type holds every value
    of V's type: then j < V in the loop's type is j < V."""
    if not (isinstance(stop, ir.ParamRef) and isinstance(stop.type, irt.ScalarType) and stop.type.is_int
            and isinstance(loop_type, irt.ScalarType) and loop_type.is_int):
        return None
    src, dst = stop.type, loop_type
    holds = dst.bits >= src.bits if src.kind == dst.kind else (not src.is_signed and dst.bits > src.bits)
    return (stop.param.name, -1) if holds else None


def pure_index_expr(e: ir.Expr) -> bool:
    """Sums/products of registers, thread-index components, lengths and constants: a single-assigned
    local holding one is bound to the expression itself, so proofs can see through the name."""
    if isinstance(e, ir.Cast):
        return isinstance(e.operand.type, irt.ScalarType) and e.operand.type.is_int and \
            pure_index_expr(e.operand)
    if isinstance(e, (ir.Special, ir.ArrayLen)):
        return True
    if isinstance(e, ir.TupleGet) and isinstance(e.value, (ir.ThreadIndexValue, ir.OwnerIndexValue)):
        return True
    if isinstance(e, ir.Const):
        return isinstance(e.value, int) and not isinstance(e.value, bool)
    if isinstance(e, ir.BinOp) and e.op in ("add", "mul"):
        return pure_index_expr(e.lhs) and pure_index_expr(e.rhs)
    return False


# Exclusive upper bounds used when nothing tighter is known. A length or a thread-index component is
# below 2**49 (no GPU maps more bytes); a grid or block register is a 32-bit value.
_EXTENT_BOUND = 1 << 49
_REGISTER_BOUND = {"tid.x": 1024, "tid.y": 1024, "tid.z": 64, "ntid.x": 1025, "ntid.y": 1025,
                   "ntid.z": 65, "laneid": 32, "warpsize": 33}


def _upper(facts: "Facts", key: tuple) -> int | None:
    """Exclusive upper bound of a keyed value, or None when unbounded."""
    kind = key[0]
    if kind == "const":
        return key[1] + 1 if key[1] >= 0 else None
    if kind == "bin":
        a, b = _upper(facts, key[2]), _upper(facts, key[3])
        if a is None or b is None:
            return None
        return a + b - 1 if key[1] == "add" else (a - 1) * (b - 1) + 1
    bound = facts.below_const.get(key)
    if bound is not None:
        return bound
    if kind == "reg":
        return _REGISTER_BOUND.get(key[1], 1 << 32)
    if kind in ("tid", "own") or facts.below_extent.get(key):
        return _EXTENT_BOUND
    return None


def _nonneg_key(facts: "Facts", key: tuple) -> bool:
    if key[0] == "const":
        return key[1] >= 0
    if key[0] == "bin":
        return _nonneg_key(facts, key[2]) and _nonneg_key(facts, key[3])
    return key[0] in ("reg", "tid", "own") or key in facts.nonneg


def nonnegative_expr(e: ir.Expr) -> bool:
    """True for expressions that are never negative whatever the values (registers, lengths, unsigned)."""
    t = e.type
    if isinstance(e, ir.Cast):
        return nonnegative_expr(e.operand) and isinstance(t, irt.ScalarType) and \
            (t.bits >= e.operand.type.bits if isinstance(e.operand.type, irt.ScalarType) else False)
    if isinstance(t, irt.ScalarType) and t.kind == "uint":
        return True
    if isinstance(e, (ir.Special, ir.ArrayLen, ir.ChunkStart)):
        return True
    if isinstance(e, ir.TupleGet) and isinstance(e.value, (ir.ThreadIndexValue, ir.OwnerIndexValue)):
        return True
    if isinstance(e, ir.Const):
        return isinstance(e.value, (int, float)) and e.value >= 0
    return False


@dataclass
class Facts:
    """Known facts in the current region: upper bounds and non-negativity per index key."""
    below_extent: dict[tuple, set[Extent]] = field(default_factory=dict)
    below_const: dict[tuple, int] = field(default_factory=dict)
    nonneg: set[tuple] = field(default_factory=set)
    slots: set[int] = field(default_factory=set)     # ids of get_mut() slots known not None
    at_least: dict[tuple, int] = field(default_factory=dict)              # key >= c  (`if r > 0:`)
    below_extent_minus: dict[tuple, set[tuple[Extent, int]]] = field(default_factory=dict)  # key < ext - d
    present: set[str] = field(default_factory=set)   # optional array parameters tested `is not None`

    def copy(self) -> "Facts":
        return Facts({k: set(v) for k, v in self.below_extent.items()}, dict(self.below_const),
                     set(self.nonneg), set(self.slots), dict(self.at_least),
                     {k: set(v) for k, v in self.below_extent_minus.items()}, set(self.present))

    def add_lower(self, key: tuple, bound: int) -> None:
        self.at_least[key] = max(bound, self.at_least.get(key, bound))
        if bound >= 0:
            self.nonneg.add(key)

    def add_extent_minus(self, key: tuple, ext: Extent, d: int) -> None:
        if d <= 0:
            if d == 0:
                self.add_extent(key, ext)
            return
        self.below_extent_minus.setdefault(key, set()).add((ext, d))

    def add_extent(self, key: tuple, ext: Extent) -> None:
        self.below_extent.setdefault(key, set()).add(ext)

    def add_const(self, key: tuple, bound: int) -> None:
        cur = self.below_const.get(key)
        self.below_const[key] = bound if cur is None else min(cur, bound)


def in_range(facts: Facts, rel: Relations, idx: ir.Expr, array: str, axis: int,
             static_extent: int | None) -> bool:
    """Is `0 <= idx < array.shape[axis]` known here?"""
    if isinstance(idx, ir.Const):
        return static_extent is not None and 0 <= idx.value < static_extent
    shifted = _offset_form(idx)
    if shifted is not None and _offset_in_range(facts, rel, *shifted, array, axis, static_extent):
        return True
    key = index_key(idx)
    if key is None:
        return False
    if shifted is None and key[0] != "bin" and static_extent is None and \
            _offset_in_range(facts, rel, key, 0, array, axis, None):
        return True      # `r < u.shape[0] - 1` bounds r itself by u.shape[0] (and out.shape[0] if equal)
    if key[0] == "bin":
        # Every term non-negative and the sum/product provably below 2**(bits-1): no wrap-around,
        # so the value the guard compared is the value used here.
        bits = idx.type.bits if isinstance(idx.type, irt.ScalarType) else 64
        ub = _upper(facts, key)
        if not _nonneg_key(facts, key) or ub is None or ub > (1 << (bits - 1)):
            return False
        if static_extent is not None and static_extent >= 0:
            return ub <= static_extent
        return any(rel.at_most(ext, (array, axis)) for ext in facts.below_extent.get(key, ()))
    if not (key in facts.nonneg or nonnegative_expr(idx)):
        return False
    if static_extent is not None and static_extent >= 0:
        bound = facts.below_const.get(key)
        if bound is None and key[0] == "reg":
            bound = _REGISTER_BOUND.get(key[1])
        if bound is not None and bound <= static_extent:
            return True
        return False
    return any(rel.at_most(ext, (array, axis)) for ext in facts.below_extent.get(key, ()))


def _offset_form(idx: ir.Expr) -> tuple[tuple, int] | None:
    """`k + c` / `k - c` with k a tracked value and c an integer constant -> (key of k, signed c)."""
    idx = strip_int_casts(idx)
    if not (isinstance(idx, ir.BinOp) and idx.op in ("add", "sub")):
        return None
    c = _operand_key(idx.rhs)
    base = index_key(idx.lhs)
    if c is None or c[0] != "const" or base is None or base[0] == "bin":
        return None
    return base, (c[1] if idx.op == "add" else -c[1])


def _offset_in_range(facts: Facts, rel: Relations, key: tuple, off: int, array: str, axis: int,
                     static_extent: int | None) -> bool:
    """0 <= key + off < extent from `key >= lo` and `key < ext - d` with d >= off (stencil neighbours:
    `if r > 0 and r < len(u) - 1:` proves u[r - 1] and u[r + 1])."""
    lo = facts.at_least.get(key)
    if lo is None and (key in facts.nonneg or key[0] in ("reg", "tid")):
        lo = 0
    if lo is None or lo + off < 0:
        return False
    if static_extent is not None and static_extent >= 0:
        ub = facts.below_const.get(key)
        return ub is not None and ub + off <= static_extent
    if off <= 0 and any(rel.at_most(ext, (array, axis)) for ext in facts.below_extent.get(key, ())):
        return True
    return any(d >= off and rel.at_most(ext, (array, axis)) for ext, d in facts.below_extent_minus.get(key, ()))
