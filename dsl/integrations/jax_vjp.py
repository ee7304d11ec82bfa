"""`dsl.jax.kernel_call(..., backward=)`: reverse-mode autodiff of a kernel call through `jax.custom_vjp`.

A kernel call is opaque to JAX (an FFI custom call, or a `pure_callback` on the CPU), so `jax.grad`
through it needs the gradient given, as `dsl.torch.custom_op` takes one. `backward` is either
- a callable `backward(saved, *cotangents)`: `saved` maps the forward op's inputs and outputs by name
  (scalars included), one cotangent per output; it returns one gradient (or None) per op input, or
- a kernel bound by parameter names (dsl/integrations/_backward.py): forward inputs / outputs by name,
  `grad_<output>` the cotangents, writable `grad_<input>` the gradients it computes; it runs through
  its own `kernel_call`, so under `jax.jit` on a GPU it is an FFI call too.
Scalars (concrete numbers) are not differentiated: they close over the custom_vjp function, which is
built per call. Integer inputs get a zero (float0) cotangent.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

API = "dsl.jax.kernel_call"


class Differentiable:
    """A KernelCall with a backward: same call signature, differentiable with jax.grad / jax.vjp."""

    def __init__(self, forward: Any, backward: Any, options: Mapping[str, Any] | None,
                 kernel_call: Callable[..., Any]) -> None:
        self.forward = forward
        self.plan = forward.plan
        self._kernel_call = kernel_call        # dsl.jax.kernel_call, for a backward kernel's own call
        self._backward = self._bind(backward, options or {})

    def __repr__(self) -> str:
        return f"<dsl.jax.kernel_call {self.plan.name} (with backward)>"

    def _bind(self, backward: Any, options: Mapping[str, Any]) -> Callable[[dict, tuple], tuple]:
        from dsl.integrations._plan import kernel_params
        plan = self.plan
        if plan.mutates:
            raise ValueError(f"{API}: {plan.name}: backward= is not supported for calls that mutate "
                             f"their inputs (mutates={sorted(plan.mutates)})")
        try:
            kernel_params(backward, API)
        except TypeError:
            if not callable(backward):
                raise TypeError(f"{API}: {plan.name}: backward: expected a callable (saved, *cotangents) or "
                                f"a @simt.kernel/@tile.kernel, got {type(backward).__name__}") from None
            if options:
                raise ValueError(f"{API}: {plan.name}: backward_options= is for a backward kernel") from None
            return lambda saved, cts: _as_tuple(backward(saved, *cts))
        from dsl.integrations._backward import bind_backward
        bound = bind_backward(plan, backward, options, API)
        call = self._kernel_call(backward, out_shapes=bound.out_shapes or None, **bound.options)

        def run(saved: dict, cts: tuple) -> tuple:
            values = {**saved, **{g: cts[k] for k, g in enumerate(bound.grads_of)}}
            res = _as_tuple(call(*(values[q.name] for q in call.plan.inputs)))
            by_input = {q.name[5:]: r for q, r in zip(call.plan.outputs, res)}
            return tuple(by_input.get(p.name) for p in plan.inputs)
        return run

    def __call__(self, *args: Any) -> Any:
        import jax
        plan = self.plan
        if len(args) != len(plan.inputs):
            return self.forward(*args)         # the forward's own typed ArgumentCountError
        arrays = [k for k, p in enumerate(plan.inputs) if p.is_array]
        fixed = {k: a for k, a in enumerate(args) if k not in arrays}

        def full(primals: tuple) -> list:
            out = list(args)
            for k, v in zip(arrays, primals):
                out[k] = v
            for k, v in fixed.items():
                out[k] = v
            return out

        @jax.custom_vjp
        def f(*primals: Any) -> Any:
            return self.forward(*full(primals))

        def f_fwd(*primals: Any) -> tuple:
            out = self.forward(*full(primals))
            return out, (primals, out)

        def f_bwd(res: tuple, ct: Any) -> tuple:
            primals, out = res
            values = full(primals)
            saved = {p.name: values[k] for k, p in enumerate(plan.inputs)}
            saved.update(zip((p.name for p in plan.outputs), _as_tuple(out)))
            grads = self._backward(saved, _as_tuple(ct))
            if len(grads) != len(plan.inputs):
                raise ValueError(f"{API}: {plan.name}: backward returned {len(grads)} gradients, expected "
                                 f"one per input ({len(plan.inputs)}: "
                                 f"{', '.join(p.name for p in plan.inputs)})")
            return tuple(_cotangent(grads[k], primals[j]) for j, k in enumerate(arrays))

        f.defvjp(f_fwd, f_bwd)
        return f(*(args[k] for k in arrays))


def _as_tuple(v: Any) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def _cotangent(g: Any, primal: Any) -> Any:
    """The gradient as JAX wants it: None (zero) for integer inputs and for inputs given none."""
    import jax.numpy as jnp
    if g is None or not jnp.issubdtype(primal.dtype, jnp.inexact):
        return None
    return jnp.asarray(g, primal.dtype).reshape(primal.shape)
