"""Testing kernels from their launch contracts: generated inputs and differential checks.

Every kernel kernelbridge launches (CUDA C++, DSL SIMT, DSL tile, foreign PTX) carries a contract
saying its argument dtypes, ranks, layouts, which arguments it writes and how sizes relate. That is
enough to generate launches the kernel must accept, and to run two kernels that claim to do the same
job on the same inputs (docs/porting.md):

    args = bridge.testing.arguments(kernel, size=1000, seed=7)        # validated launch, host arrays
    kernel.simulate(*args)                                            # or kernel(*args.to("cupy"))
    bridge.testing.assert_equivalent(cpp_kernel, dsl_port, trials=5)  # differential check

Works from a contract alone: `bridge` never imports `dsl`; DSL kernels are reached through their
`launch_contract(dtypes=...)` hook.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from bridge.testing._generate import (Arguments, GridNotDerivableError, Request, UnsatisfiableContractError,
                                      contract_of, generate, suggested_block, suggested_grid)

__all__ = ["arguments", "Arguments", "contract_of", "UnsatisfiableContractError", "GridNotDerivableError",
           "suggested_grid", "suggested_block"]


def arguments(kernel: Any, size: int = 1000, seed: int | None = None, *, edge: str | None = None,
              library: str = "numpy", layouts: str | Mapping[str, str] = "mixed", readonly: bool = True,
              shapes: Mapping[str, Sequence[int]] | None = None, scalars: Mapping[str, Any] | None = None,
              values: Mapping[str, Any] | None = None, grid: Any = None, block: Any = None,
              dtypes: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None) -> Arguments:
    """A launch of `kernel` that its contract accepts (checked by the real validator before it is
    returned), as an `Arguments` sequence: `kernel(*args)`.

    size: about how many elements a 1-D array gets (n-D: size**(1/n) per axis); free sizes are odd,
    so never a multiple of a block. seed: makes the launch reproducible (`args.replay()`).
    edge: None, "one" (every free size 1) or "empty" (some array empty; an error when the contract
    forbids it). library: "numpy" (host, for the simulator), "bridge", "cupy" or "torch".
    layouts: "mixed" (C, strided, negative-stride and Fortran views wherever the contract's layout is
    `any`), "contiguous", or a mapping name -> layout. readonly: read-only inputs are read-only views.
    shapes / scalars: fix some sizes; values: name -> array or `fn(rng, shape, numpy_dtype)` for
    values the kernel needs (e.g. valid bin indices). grid / block: the launch configuration to
    validate with (a grid may be a callable of `sizes`; `args.grid`); by default the grid the contract
    derives from its grid_from (`args.grid` None). A contract without grid_from says nothing about how
    its threads cover the work, so no grid is suggested for it: GridNotDerivableError, pass grid=.
    dtypes / options: how a generic
    DSL kernel is specialised (e.g. dtypes={"T": "f32"}; tile kernels: options={"tile_shapes":
    {"out": (256,)}, "constants": {...}}).
    """
    contract = contract_of(kernel, dtypes=dtypes, options=options)
    return generate(contract, Request(size=size, seed=seed, edge=edge, library=library, layouts=layouts,
                                      readonly=readonly, shapes=shapes, scalars=scalars, values=values,
                                      grid=grid, block=block))


from bridge.testing._equivalence import (CoverageError, EquivalenceError, EquivalenceReport,  # noqa: E402
                                         assert_equivalent, check_compatible)
from bridge.testing._sides import IncompatibleContractsError, configured, simulated  # noqa: E402
from bridge.testing._strategies import strategy  # noqa: E402

__all__ += ["assert_equivalent", "check_compatible", "configured", "simulated", "strategy",
            "EquivalenceError", "CoverageError", "EquivalenceReport", "IncompatibleContractsError"]
