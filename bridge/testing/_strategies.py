"""`strategy(kernel, ...)`: generated launches as a hypothesis strategy (hypothesis is imported
only here, and only when asked for: it is a test dependency, not a runtime one)."""
from __future__ import annotations

from typing import Any, Mapping

from bridge.testing._generate import Request, UnsatisfiableContractError, contract_of, generate


def strategy(kernel: Any, *, max_size: int = 2048, edges: bool = True, library: str = "numpy",
             dtypes: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
             **request: Any) -> Any:
    """A hypothesis strategy of `Arguments` for `kernel`: sizes 1..max_size, any seed, mixed or
    contiguous layouts, and (edges=True) the all-ones and empty edge cases; an edge case the contract
    forbids is rejected with `assume`, any other unsatisfiable contract is an error. `request` takes
    the other keywords of `arguments` (shapes=, scalars=, values=, grid=, ...)."""
    import hypothesis
    from hypothesis import strategies as st
    contract = contract_of(kernel, dtypes=dtypes, options=options)
    fixed_layouts = request.pop("layouts", None)
    edge_choice = st.sampled_from([None, None, None, "one", "empty"]) if edges else st.just(None)

    @st.composite
    def launches(draw: Any) -> Any:
        size = draw(st.integers(1, max_size))
        seed = draw(st.integers(0, 2**32 - 1))
        edge = draw(edge_choice)
        layouts = fixed_layouts or draw(st.sampled_from(["mixed", "contiguous"]))
        try:
            return generate(contract, Request(size=size, seed=seed, edge=edge, library=library,
                                              layouts=layouts, **request))
        except UnsatisfiableContractError:
            if edge is None:
                raise
            hypothesis.assume(False)

    return launches()
