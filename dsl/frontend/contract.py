"""The launch contract of a compiled SIMT kernel (docs/architecture.md, schema v1): a thin user of the
one IR-level builder (dsl/contracts.py), which both models share.

Array access is read from the IR: a DisjointSlice that is also loaded (or updated atomically) is
"readwrite", otherwise "write". `grid_from` comes from dsl/frontend/grid.py: the DisjointSlice the
kernel stores at its ThreadIndex (or an explicit `grid_from=`), with `per_thread = (n, 1, 1)` for
`simt.thread.chunk_1d(n)` kernels; a kernel with no such array has none and needs a grid at launch.
"""
from __future__ import annotations

from typing import Any, Callable

from dsl.contracts import build_contract
from dsl.frontend.annotations import parse_signature_annotations
from dsl.frontend.grid import grid_source, owns_elements
from dsl.ir import nodes as ir
from dsl.options import KernelOptions


def contract_dict(fn: ir.Function, options: KernelOptions) -> dict[str, Any]:
    """The contract as the schema-v1 dict (what `contract_for(...).to_dict()` gives): the one
    IR-level builder (dsl/contracts.py) with the kernel's options and derived grid."""
    grid = grid_source(fn, options)
    return build_contract(fn, domain=options.domain, block=options.block, launch_bounds=options.launch_bounds,
                          dynamic_smem=options.shared_mem, min_cc=options.min_cc,
                          requires=options.requires, inplace=options.inplace,
                          grid_from=grid.contract() if grid else None,
                          strict_domain=owns_elements(fn), launch=options.launch)


def contract_for(fn: ir.Function, options: KernelOptions) -> Any:
    """The kernel's `bridge.contract.LaunchContract` (parsed by the native validator)."""
    from bridge.contract import ArgSpec, LaunchContract
    d = contract_dict(fn, options)
    specs = [ArgSpec.scalar(a["name"], a["dtype"]) if a["kind"] == "scalar" else
             ArgSpec.array(a["name"], a["dtype"], a["ndim"], a["layout"], a["access"], a["align"], "view",
                           a.get("optional", False))
             for a in d["args"]]
    grid = d.get("grid_from")
    return LaunchContract(fn.name, specs, domain=options.domain, block=options.block,
                          launch_bounds=options.launch_bounds, shared_mem=options.shared_mem,
                          min_cc=options.min_cc, requires=options.requires, inplace=options.inplace,
                          grid_from=grid["arg"] if grid else None,
                          per_thread=tuple(grid.get("per_thread", (1, 1, 1))) if grid else (1, 1, 1),
                          grid_tile=tuple(grid["tile"]) if grid and "tile" in grid else None,
                          fault_sites=d.get("fault_sites", ()), strict_domain=d.get("strict_domain", False),
                          **options.launch.contract_kwargs())


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
