"""The two sides of a differential check: what each one is, where it runs, and how its contract
relates to the other's (argument names, dtypes, written arguments, relations).

Kernels are matched by argument NAME: a DSL port drops the size scalars of its CUDA C++ original
(DSL arrays carry their shape), so a scalar only one side has must be determined by that side's
relations from the arrays both share (`len(x) == n`); anything else is an incompatibility.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from bridge import _native
from bridge.errors import LaunchContractError
from bridge.testing import _arrays, _solve
from bridge.testing._generate import (Arguments, GridNotDerivableError, _validate, contract_of, hook_options,
                                      no_grid_message, relations_config, suggested_block)


def key(name: str) -> str:
    """The name arguments are matched by: `in_` (a Python keyword with PEP 8's trailing underscore,
    as a DSL port must spell C++'s `in`) matches `in`."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


class IncompatibleContractsError(ValueError):
    """Two kernels cannot be compared: their contracts differ in arguments, dtypes, written
    arguments or relations. `differences` lists each one."""

    def __init__(self, message: str, differences: list[str]) -> None:
        super().__init__(message)
        self.differences = differences


@dataclass(frozen=True)
class configured:  # noqa: N801 - reads like a function at the call site
    """A kernel with its own launch configuration for `assert_equivalent`: `grid`/`block` are tuples
    or callables of the sizes dict (`args.sizes`), e.g. `configured(k, grid=lambda s: (s["rows"],))`;
    `shared_mem`: dynamic shared memory bytes (an int or a callable of the sizes)."""
    kernel: Any
    grid: Any = None
    block: Any = None
    shared_mem: Any = None


@dataclass(frozen=True)
class simulated:  # noqa: N801
    """A DSL kernel that runs on the CPU simulator even when the other side runs on the GPU."""
    kernel: Any


@dataclass
class Side:
    role: str                       # "reference" or "candidate"
    obj: Any                        # the kernel, or a plain Python callable
    label: str
    contract: Any                   # _native.Contract, or None for a plain callable
    home: str                       # "host", "device", "either" or "none" (a contract alone)
    grid: Any = None
    block: Any = None
    binds: bool = False             # has contract_call: builds its own call arguments and grid
    options: dict = field(default_factory=dict)   # the hook options this kernel takes
    shared_mem: Any = None


def describe(obj: Any) -> str:
    kind = type(obj).__name__
    name = getattr(obj, "__name__", None) or getattr(obj, "name", None) or kind
    if hasattr(obj, "launcher"):
        return f"{name} (bridge.Kernel)"
    if hasattr(obj, "launch_contract"):
        return f"{name} ({'@tile.kernel' if hasattr(obj, 'contract_call') else '@simt.kernel'})"
    return f"{name} (Python function)"


def make_side(obj: Any, role: str, dtypes: Any, options: Mapping[str, Any] | None) -> Side:
    grid = block = smem = None
    home = None
    if isinstance(obj, configured):
        obj, grid, block, smem = obj.kernel, obj.grid, obj.block, obj.shared_mem
    if isinstance(obj, simulated):
        obj, home = obj.kernel, "host"
    if isinstance(obj, configured):
        obj, grid, block, smem = obj.kernel, obj.grid, obj.block, obj.shared_mem
    if isinstance(obj, (_native.Contract, str, Mapping)) or (hasattr(obj, "to_json") and hasattr(obj, "native")):
        contract = contract_of(obj)
        return Side(role, None, f"{role} contract of {contract.kernel}", contract, "none")
    label = f"{role} {describe(obj)}"
    if hasattr(obj, "launcher") and hasattr(obj, "contract"):
        if home == "host":
            raise TypeError(f"{label}: simulated() takes a DSL kernel; a module kernel runs on the GPU only")
        return Side(role, obj, label, contract_of(obj), "device", grid, block, shared_mem=smem)
    if callable(getattr(obj, "launch_contract", None)):
        opts = hook_options(obj.launch_contract, options, strict=False)
        return Side(role, obj, label, contract_of(obj, dtypes=dtypes, options=opts), home or "either",
                    grid, block, binds=callable(getattr(obj, "contract_call", None)), options=opts,
                    shared_mem=smem)
    if callable(obj):
        if home == "host" or grid is not None or block is not None or smem is not None:
            raise TypeError(f"{label}: configured()/simulated() take kernels, not Python functions")
        return Side(role, obj, label, None, "host")
    raise TypeError(f"{role}: expected a kernel (bridge.Kernel, @simt.kernel, @tile.kernel) or a Python "
                    f"function computing the same outputs, got {type(obj).__name__}")


# ------------------------------------------------------------------------------------ compatibility
def _written(a: dict) -> bool:
    return a["kind"] == "array" and a.get("access", "read") != "read"


def structural_differences(ref: Side, cand: Side) -> list[str]:
    """Differences visible in the argument lists alone (relations are checked by `project`)."""
    a = {key(x["name"]): (i, x) for i, x in enumerate(ref.contract.args)}
    b = {key(x["name"]): (i, x) for i, x in enumerate(cand.contract.args)}
    out: list[str] = []
    for name in list(a) + [n for n in b if n not in a]:
        if name in a and name in b:
            (i, x), (j, y) = a[name], b[name]
            where = f"argument '{name}' (reference #{i}, candidate #{j})"
            if x["kind"] != y["kind"]:
                out.append(f"{where}: reference has a {x['kind']}, candidate a {y['kind']}")
            elif x["dtype"] != y["dtype"] and "any" not in (x["dtype"], y["dtype"]):
                out.append(f"{where}: reference dtype {x['dtype']}, candidate {y['dtype']}")
            elif x["kind"] == "array":
                if x["ndim"] >= 0 and y["ndim"] >= 0 and x["ndim"] != y["ndim"]:
                    out.append(f"{where}: reference is {x['ndim']}-d, candidate {y['ndim']}-d")
                if _written(x) != _written(y):
                    out.append(f"{where}: written by the {'reference' if _written(x) else 'candidate'} only "
                               f"(reference access {x['access']}, candidate {y['access']})")
                if {x.get("layout"), y.get("layout")} == {"C", "F"}:
                    out.append(f"{where}: reference layout {x['layout']}, candidate {y['layout']}")
            continue
        who, (i, x) = ("reference", a[name]) if name in a else ("candidate", b[name])
        other = "candidate" if who == "reference" else "reference"
        if x["kind"] == "array":
            out.append(f"argument '{name}' (#{i}): the {who} has this {x['dtype']} array, the {other} has none")
        elif x["dtype"] not in _solve._INT_RANGE:
            out.append(f"argument '{name}' (#{i}): the {who} has this {x['dtype']} scalar, the {other} has none "
                       f"(only integer size scalars that relations determine may be left out)")
    return out


def joint_layouts(ref: Any, cand: Any, spelled_as: Any) -> dict[str, str]:
    """Per shared array (named as in `spelled_as`, one of the two), the layout both contracts accept:
    C or F when either requires it; C when either requires more alignment than the element size."""
    names = {key(a["name"]): a["name"] for a in spelled_as.args}
    out: dict[str, str] = {}
    b = {key(x["name"]): x for x in cand.args}
    for x in ref.args:
        y = b.get(key(x["name"]))
        if x["kind"] != "array" or y is None:
            continue
        item = _arrays.numpy_dtype(x["dtype"]).itemsize if x["dtype"] != "any" else 1
        layouts = {x.get("layout", "any"), y.get("layout", "any")} - {"any"}
        if len(layouts) == 1:
            out[names[key(x["name"])]] = layouts.pop()
        elif max(x.get("align", 0), y.get("align", 0)) > item:
            out[names[key(x["name"])]] = "C"
    return out


def project(args: Arguments, target: Any, source_label: str, target_label: str) -> Arguments:
    """`args` (generated for one contract) as a launch of `target`: arrays and scalars by name, and
    the integer scalars only `target` has solved from its relations. IncompatibleContractsError when
    `target` refuses the launch or leaves a scalar undetermined."""
    src = {key(n): v for n, v in zip(args.names, args.values)}
    names = [a["name"] for a in target.args]
    ndims = {i: len(np.shape(src[key(a["name"])])) if key(a["name"]) in src else max(a["ndim"], 1)
             for i, a in enumerate(target.args) if a["kind"] == "array"}
    fixed: dict[tuple, int] = {}
    for i, a in enumerate(target.args):
        v = src.get(key(a["name"]))
        if a["kind"] == "array" and v is not None:
            fixed.update({("dim", i, k): int(n) for k, n in enumerate(np.shape(v))})
        elif a["kind"] == "scalar" and v is not None and a["dtype"] in _solve._INT_RANGE:
            fixed[("scalar", i)] = int(v)
    p = _solve.problem(target, ndims)
    pl = _solve.plan(p, fixed)
    where = f"{target_label} refuses a launch the {source_label} accepts ({args.describe()}, seed {args.seed})"
    if pl.conflicts:
        raise IncompatibleContractsError(f"{where}: {'; '.join(pl.conflicts)}", pl.conflicts)
    for root in pl.free:
        name = target.args[root[1]]["name"]
        msg = (f"{target_label} has the integer argument '{name}' (#{root[1]}) that the {source_label} lacks, "
               f"and none of its relations determines it from the shared arguments (e.g. 'len(x) == {name}')")
        raise IncompatibleContractsError(msg, [msg])
    sized = _solve.assign(p, pl, _solve.Draw(args.size, None, np.random.default_rng(0))) or {}
    bad = _solve.failing(p, sized)
    if bad:
        raise IncompatibleContractsError(f"{where}: relation {bad[0]!r} does not hold", bad)
    values = []
    for i, a in enumerate(target.args):
        if key(a["name"]) in src:
            v = src[key(a["name"])]
            values.append(_arrays.numpy_dtype(a["dtype"]).type(v) if a["kind"] == "scalar" else v)
        else:
            values.append(_arrays.numpy_dtype(a["dtype"]).type(sized[("scalar", i)]))
    if args.library == "numpy":          # device arrays were validated as host arrays before
        try:
            _validate(target, values, *relations_config(target))
        except LaunchContractError as e:
            raise IncompatibleContractsError(f"{where}: {e}", [str(e)]) from e
    sizes: dict[str, Any] = {}
    for i, (n, v, a) in enumerate(zip(names, values, target.args)):
        if a["kind"] == "array":
            sizes[n] = tuple(np.shape(v))
        elif ("scalar", i) in sized and (n in args.sizes or key(n) not in src):
            sizes[n] = int(v)
    rename = {key(n): n for n in names}
    return replace(args, kernel=target.kernel, contract=target, names=tuple(names), values=tuple(values),
                   sizes=sizes, grid=None, block=suggested_block(target),
                   records={rename[key(n)]: r for n, r in args.records.items() if key(n) in rename},
                   bases={rename[key(n)]: b for n, b in args.bases.items() if key(n) in rename})


def _own_grid(side: Side, live: Arguments, grid: Any, block: Any) -> tuple[Any, Any]:
    """The side's configured grid/block, else the call's (callables of the sizes evaluated; a size
    named `in_` on one side is also `in`, so one callable serves a C++ kernel and its port)."""
    g = side.grid if side.grid is not None else grid
    b = side.block if side.block is not None else block
    sizes = {**{key(n): v for n, v in live.sizes.items()}, **live.sizes}
    return (g(sizes) if callable(g) else g), (b(sizes) if callable(b) else b)


def launch_configs(sides: tuple[Side, Side], lives: Mapping[str, Arguments], grid: Any,
                   block: Any) -> dict[str, tuple[Any, Any, str]]:
    """Per side (by role): (grid, block, how the grid was chosen). A grid is given (configured() or
    grid=), derived by the side's own contract (grid_from: grid None), or, when the side's contract
    derives none, the grid the other side runs with (given, or resolved by the validator from that
    side's grid_from). GridNotDerivableError when none of these exists: no grid is ever guessed."""
    out: dict[str, tuple[Any, Any, str]] = {}
    pending = []
    for side in sides:
        if side.contract is None or side.binds:
            out[side.role] = (None, None, "none (a Python function)" if side.contract is None else
                              "the grid its partitions define")
            continue
        g, b = _own_grid(side, lives[side.role], grid, block)
        if g is not None:
            out[side.role] = (g, b, f"grid {g} (given)")
        elif side.contract.grid_from is not None:
            out[side.role] = (None, b, f"the grid its contract derives from '{side.contract.grid_from}'")
        else:
            pending.append((side, b))
    for side, b in pending:
        other = next(x for x in sides if x is not side)
        got = out.get(other.role)
        if got is None or other.contract is None or other.binds:
            raise GridNotDerivableError(f"assert_equivalent: {no_grid_message(side.contract, side.label)}; "
                                        f"or configured(kernel, grid=...) for this kernel alone",
                                        kernel=side.contract.kernel)
        borrowed = got[0]
        if borrowed is None:
            borrowed = _validate(other.contract, list(lives[other.role].values), None, got[1])[0]
        dims = (borrowed,) if isinstance(borrowed, (int, np.integer)) else tuple(borrowed)
        borrowed = tuple(max(1, int(x)) for x in dims)        # an empty launch still gets one block
        out[side.role] = (borrowed, b, f"grid {borrowed}: the {other.role}'s ({got[2]}), as its own "
                                       f"contract derives none")
    return out


def run(side: Side, live: Arguments, config: tuple[Any, Any], on_host: bool) -> Any:
    """Launch one side on `live` (host arrays for the simulator / a Python function, device arrays
    otherwise) with its (grid, block) and wait for it, so a device-side fault is reported here."""
    args = tuple(live.values)
    if side.contract is None:
        return side.obj(*args)
    if side.binds:                       # tile kernels: partitions define the grid
        call = side.obj.contract_call(args, **hook_options(side.obj.contract_call, side.options, strict=False))
        (side.obj.simulate if on_host else side.obj)(*call)
    else:
        g, b = config
        kw = {}
        if side.shared_mem is not None:
            kw["shared_mem"] = side.shared_mem(live.sizes) if callable(side.shared_mem) else side.shared_mem
        (side.obj.simulate if on_host else side.obj)(*args, grid=g, block=b, **kw)
    if not on_host:
        import bridge
        bridge.synchronize()
    return None


def outputs_of(side: Side, live: Arguments, result: Any, written: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Host copies of the written arguments after a run (a Python function may instead return them:
    a dict by name, one array, or a tuple in the order of the written arguments)."""
    if side.contract is None and result is not None:
        if isinstance(result, Mapping):
            got = dict(result)
        else:
            seq = result if isinstance(result, (tuple, list)) else (result,)
            if len(seq) != len(written):
                raise TypeError(f"{side.label} returned {len(seq)} value(s) but the kernel writes "
                                f"{len(written)} argument(s) ({', '.join(written)}); return them in that "
                                f"order, as a dict by name, or write them in place and return None")
            got = dict(zip(written, seq))
        missing = [n for n in written if n not in got]
        if missing:
            raise TypeError(f"{side.label} returned no value for {', '.join(missing)}")
        return {n: np.asarray(got[n]) for n in written}
    return {n: _arrays.to_host(live[n]) for n in written}
