"""The ONE IR-level launch-contract builder: any lowered kernel (dsl.ir Function, which both the SIMT
front end and the tile lowering produce) plus what the IR cannot say → the schema-v1 contract dict
(docs/architecture.md).

From the IR: the arguments (dtype, ndim, layout, alignment of arrays from their ArrayType), each
array's access (read-only arrays "read"; a writable array that is also read — loaded, updated
atomically, handed to a device function or to inline PTX as an address — "readwrite", else "write")
and the fault sites. From the caller: the domain, the block (exact or launch bounds), the dynamic
shared memory, min_cc, relations, in-place pairs and the grid derivation — for SIMT kernels their
options and dsl/frontend/grid.py, for tile kernels the tile grid, the partition-agreement relations
and the facts the lowering relied on (dsl/tile/compile.py). Keys a caller leaves as None are omitted
(the schema's defaults apply), so each model's contract text stays what it was.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from dsl.ir import nodes as ir
from dsl.ir import types as irt


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


def read_params(fn: ir.Function) -> set[str]:
    """Names of the kernel parameters the body may read (conservative: an array passed to a device
    function or whose address goes to inline PTX counts as read)."""
    from dsl.ir import tile_nodes as TN
    names = set()
    for st in fn.body:
        for n in _walk(st):
            if isinstance(n, (ir.Load, ir.Atomic, TN.GlobalAddress)) and isinstance(n.array, ir.ParamRef):
                names.add(n.array.param.name)
            if isinstance(n, ir.Call):
                names.update(a.param.name for a in n.args if isinstance(a, ir.ParamRef)
                             and isinstance(a.type, irt.ArrayType))
    return names


def _site(s: ir.FaultSite) -> dict[str, Any]:
    """A fault site: the array may be a kernel argument, a shared array or a device-function
    parameter (the contract's "array" field is informational)."""
    return {"id": s.id, "array": s.array, "file": s.loc.file, "line": s.loc.line, "text": s.loc.text}


def contract_args(fn: ir.Function, reads: set[str] | None = None,
                  aligned: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The contract's "args" of `fn`'s parameters. `reads`: parameters the body reads (None: from the
    IR). `aligned`: names whose 16-byte alignment the contract states (None: the ArrayType's
    aligned16)."""
    read = read_params(fn) if reads is None else reads
    a16 = None if aligned is None else set(aligned)
    args: list[dict[str, Any]] = []
    for p in fn.params:
        t = p.type
        if isinstance(t, irt.ArrayType):
            access = ("readwrite" if p.name in read else "write") if t.writable else "read"
            is16 = t.aligned16 if a16 is None else p.name in a16
            args.append({"name": p.name, "kind": "array", "dtype": t.dtype.name, "ndim": t.ndim,
                         "layout": t.layout, "align": 16 if is16 else t.dtype.itemsize,
                         "access": access, "abi": "view"})
            if t.optional:      # `simt.Array[f32] | None`: the validator lets None through
                args[-1]["optional"] = True
        elif isinstance(t, irt.ScalarType):
            args.append({"name": p.name, "kind": "scalar", "dtype": t.name})
        elif isinstance(t, irt.TensorMapType):
            continue    # built by the launcher: the contract's "tensor_maps" (tensor_maps below)
        else:
            raise TypeError(f"{fn.name}: parameter '{p.name}' of type {t} has no contract spelling")
    return args


def tensor_maps(fn: ir.Function) -> list[dict[str, Any]]:
    """The contract's "tensor_maps" of `fn`: one per TensorMapType parameter, in parameter order
    (the launcher passes them in that order after the arguments)."""
    return [{"arg": p.type.array, "box": list(p.type.box), "swizzle": p.type.swizzle}
            for p in fn.params if isinstance(p.type, irt.TensorMapType)]


def build_contract(fn: ir.Function, *, domain: int = 1, block: Sequence[int] | None = None,
                   launch_bounds: int | None = None, dynamic_smem: int | tuple[str, int] | None = None,
                   min_cc: int | None = None, requires: Sequence[str] | None = None,
                   inplace: Iterable[Sequence[str]] | None = None, grid_from: dict | None = None,
                   reads: set[str] | None = None, aligned: Iterable[str] | None = None,
                   strict_domain: bool = False, launch: Any = None) -> dict[str, Any]:
    """The schema-v1 contract dict of the lowered kernel `fn`. `block`: exact block (else
    `launch_bounds`: max threads; neither: any block). `dynamic_smem`: exact bytes or ("max", n).
    `grid_from`: the schema's grid_from object. `strict_domain`: the threads own elements by their
    domain-D index (launches must be 1 past the domain). `launch`: the kernel's launch features
    (dsl.options.LaunchFeatures; "pdl", "cooperative", "cluster" keys where set). None/False omits a
    key; see the module docstring."""
    if not fn.is_kernel:
        raise TypeError(f"build_contract: {fn.name} is a device function, not a kernel")
    d: dict[str, Any] = {"version": 1, "kernel": fn.name, "domain": domain}
    if strict_domain:
        d["strict_domain"] = True
    if block is not None:
        d["block"] = {"exact": list(block)}
    elif launch_bounds is not None:
        d["block"] = {"max_threads": launch_bounds}
    if dynamic_smem is not None:
        d["dynamic_smem"] = {"max": dynamic_smem[1]} if isinstance(dynamic_smem, tuple) else \
            {"exact": dynamic_smem}
    if min_cc is not None:
        d["min_cc"] = min_cc
    d["args"] = contract_args(fn, reads, aligned)
    if requires is not None:
        d["requires"] = list(requires)
    if inplace is not None:
        d["inplace"] = [list(p) for p in inplace]
    optional = {p.name for p in fn.params if isinstance(p.type, irt.ArrayType) and p.type.optional}
    if grid_from is not None and grid_from.get("arg") not in optional:   # never derived from what may be None
        d["grid_from"] = dict(grid_from)
    if fn.fault_sites:
        d["fault_sites"] = [_site(s) for s in fn.fault_sites]
    maps = tensor_maps(fn)
    if maps:
        d["tensor_maps"] = maps
    for key, value in (launch.contract_kwargs().items() if launch is not None else ()):
        d[key] = list(value) if key == "cluster" else value
    return d
