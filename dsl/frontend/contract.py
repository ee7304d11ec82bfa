"""The launch contract of a compiled kernel (docs/architecture.md, schema v1), built from its IR.

Array access is read from the IR: a DisjointSlice that is also loaded (or updated atomically) is
"readwrite", otherwise "write". `grid_from` comes from dsl/frontend/grid.py: the DisjointSlice the
kernel stores at its ThreadIndex (or an explicit `grid_from=`), with `per_thread = (n, 1, 1)` for
`simt.thread.chunk_1d(n)` kernels; a kernel with no such array has none and needs a grid at launch.
"""
from __future__ import annotations

from typing import Any, Callable

from dsl.frontend.annotations import parse_signature_annotations
from dsl.frontend.grid import grid_source
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.options import KernelOptions


def _walk(node: Any):
    """Every IR node below `node` (device function bodies included)."""
    stack = [node]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, ir.Call):
            stack.extend(n.callee.body)
        for value in vars(n).values() if hasattr(n, "__dict__") else ():
            if isinstance(value, (ir.Expr, ir.Stmt)):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, (ir.Expr, ir.Stmt)))


def _read_params(fn: ir.Function) -> set[str]:
    names = set()
    for st in fn.body:
        for n in _walk(st):
            if isinstance(n, (ir.Load, ir.Atomic)) and isinstance(n.array, ir.ParamRef):
                names.add(n.array.param.name)
            if isinstance(n, ir.Call):
                # arrays handed to device functions: be conservative
                names.update(a.param.name for a in n.args if isinstance(a, ir.ParamRef)
                             and isinstance(a.type, irt.ArrayType))
    return names


def contract_dict(fn: ir.Function, options: KernelOptions) -> dict[str, Any]:
    """The contract as the schema-v1 dict (what `contract_for(...).to_dict()` gives)."""
    read = _read_params(fn)
    args: list[dict[str, Any]] = []
    for p in fn.params:
        t = p.type
        if isinstance(t, irt.ArrayType):
            access = ("readwrite" if p.name in read else "write") if t.writable else "read"
            args.append({"name": p.name, "kind": "array", "dtype": t.dtype.name, "ndim": t.ndim,
                         "layout": t.layout, "align": 16 if t.aligned16 else t.dtype.itemsize,
                         "access": access, "abi": "view"})
        else:
            args.append({"name": p.name, "kind": "scalar", "dtype": t.name})
    d: dict[str, Any] = {"version": 1, "kernel": fn.name, "domain": options.domain}
    if options.block is not None:
        d["block"] = {"exact": list(options.block)}
    elif options.launch_bounds is not None:
        d["block"] = {"max_threads": options.launch_bounds}
    sm = options.shared_mem
    d["dynamic_smem"] = {"max": sm[1]} if isinstance(sm, tuple) else {"exact": sm}
    d["min_cc"] = options.min_cc
    d["args"] = args
    d["requires"] = list(options.requires)
    d["inplace"] = [list(p) for p in options.inplace]
    grid = grid_source(fn, options)
    if grid is not None:
        d["grid_from"] = {"arg": grid[0], "per_thread": [grid[1], 1, 1]}
    if fn.fault_sites:
        params = {p.name for p in fn.params}
        d["fault_sites"] = [_site(s, params) for s in fn.fault_sites]
    return d


def _site(s: ir.FaultSite, params: set[str]) -> dict[str, Any]:
    """A fault site: the array may be a kernel argument, a shared array or a device-function
    parameter (the contract's "array" field is informational)."""
    return {"id": s.id, "array": s.array, "file": s.loc.file, "line": s.loc.line, "text": s.loc.text}


def contract_for(fn: ir.Function, options: KernelOptions) -> Any:
    """The kernel's `bridge.contract.LaunchContract` (parsed by the native validator)."""
    from bridge.contract import ArgSpec, LaunchContract
    d = contract_dict(fn, options)
    specs = [ArgSpec.scalar(a["name"], a["dtype"]) if a["kind"] == "scalar" else
             ArgSpec.array(a["name"], a["dtype"], a["ndim"], a["layout"], a["access"], a["align"], "view")
             for a in d["args"]]
    grid = d.get("grid_from")
    return LaunchContract(fn.name, specs, domain=options.domain, block=options.block,
                          launch_bounds=options.launch_bounds, shared_mem=options.shared_mem,
                          min_cc=options.min_cc, requires=options.requires, inplace=options.inplace,
                          grid_from=grid["arg"] if grid else None,
                          per_thread=tuple(grid["per_thread"]) if grid else (1, 1, 1),
                          fault_sites=d.get("fault_sites", ()))


def validate_requires(pyfunc: Callable, options: KernelOptions) -> None:
    """Each `requires=` relation must parse and name only parameters, each `inplace=` pair two
    parameters. The decorator already checked this at the `def` (dsl/options.py); this repeats it
    for options built by hand, with the same error at the same place."""
    from dsl.frontend.decorator import raise_option_error
    from dsl.options import OptionError, check_relations
    names = tuple(a.name for a in parse_signature_annotations(pyfunc))
    try:
        check_relations(names, options.requires, options.inplace)
    except OptionError as err:
        raise_option_error(pyfunc, "simt.kernel", err)
