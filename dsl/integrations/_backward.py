"""A backward kernel bound to a forward op by parameter names; shared by dsl.torch and dsl.jax.

The backward kernel's parameters name what they receive: the forward op's inputs and outputs by their
own names, `grad_<output>` the incoming gradient of each forward output, and its writable
`grad_<input>` the gradient it computes for a forward input (allocated with that input's shape unless
its relations or `out_shapes=` say otherwise). Any other name is refused when the op is defined.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dsl.integrations._plan import OpPlan, kernel_params
from dsl.integrations._relations import derive_shapes


@dataclass(frozen=True)
class BackwardBinding:
    """What the backward op is given: `inputs` (its op inputs, by name, in its order), `grads_of`
    (grad_<output> -> output), `out_shapes` (rules for the gradients no relation derives: a callable
    of the backward op's inputs) and `options` (the rest of backward_options=)."""
    inputs: list[str]
    grads_of: dict[str, str]
    out_shapes: dict[str, Any]
    options: dict[str, Any]


def bind_backward(plan: OpPlan, kernel: Any, options: Mapping[str, Any], api: str) -> BackwardBinding:
    """Check `kernel`'s parameter names against the forward op `plan` (ValueError naming the parameter)
    and plan the shapes of the gradients it writes."""
    bname, bparams, brequires, _ = kernel_params(kernel, api)
    fwd_in = {p.name for p in plan.inputs}
    fwd_out = {p.name for p in plan.outputs}
    grads_of = {f"grad_{p.name}": p.name for p in plan.outputs}
    mutates = set(options.get("mutates", ()) or ())
    static = options.get("static", {}) or {}
    for q in bparams:
        if q.writable and q.name not in mutates:
            if q.name[5:] not in fwd_in or not q.name.startswith("grad_"):
                raise ValueError(f"{api}: backward kernel {bname}: writable argument '{q.name}' (#{q.index}) "
                                 f"must be named grad_<input> for one of the forward inputs "
                                 f"({', '.join(sorted(fwd_in))})")
        elif q.name not in fwd_in | fwd_out and q.name not in grads_of and q.name not in static:
            raise ValueError(f"{api}: backward kernel {bname}: argument '{q.name}' (#{q.index}) is neither a "
                             f"forward input/output ({', '.join(sorted(fwd_in | fwd_out))}) nor an incoming "
                             f"gradient ({', '.join(sorted(grads_of))})")
    opts = dict(options)
    given = dict(opts.pop("out_shapes", None) or {})
    inputs = [q.name for q in bparams if (not q.writable or q.name in mutates) and q.name not in static]
    outs = {q.name: q.ndim for q in bparams if q.writable and q.name not in mutates and q.name not in given}
    derived, _ = derive_shapes(brequires, outs, list(inputs), [q.name for q in bparams if not q.is_array])
    for out in outs:
        src = out[5:]
        if out not in derived and src in inputs:
            given[out] = _shape_of(inputs.index(src))
    return BackwardBinding(inputs, grads_of, given, opts)


def _shape_of(position: int) -> Callable[..., tuple]:
    return lambda *xs: tuple(xs[position].shape)
