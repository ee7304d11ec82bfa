"""`dsl.jax.kernel_call(..., backward=)` (dsl/integrations/jax_vjp.py): jax.grad and jax.jit(jax.grad)
through a kernel call on JAX's CPU backend (simulator), with a backward kernel bound by parameter names
or a Python backward, checked against float64 derivatives written here; scalars are not differentiated;
a call without backward still fails in JAX's own way, and bad backward kernels are refused when the op
is defined."""
from __future__ import annotations

import integration_kernels as K
import numpy as np
import pytest

import dsl


def _silu_grad64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    s = 1 / (1 + np.exp(-x))
    return s * (1 + x * (1 - s))


def test_jax_grad_through_a_kernel_with_a_backward_kernel(cpu_jax):
    jax, jnp = cpu_jax, cpu_jax.numpy
    silu = dsl.jax.kernel_call(K.silu, backward=K.silu_backward)
    x = np.linspace(-5, 5, 301).astype(np.float32)
    g = jax.grad(lambda t: jnp.sum(silu(t) * 3.0))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), 3.0 * _silu_grad64(x), rtol=2e-5, atol=2e-6)
    gj = jax.jit(jax.grad(lambda t: jnp.sum(silu(t) ** 2)))(jnp.asarray(x))
    y = x / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(gj), 2 * y * _silu_grad64(x), rtol=1e-4, atol=1e-5)


def test_jax_grad_with_a_python_backward_and_a_scalar_input(cpu_jax):
    jax, jnp = cpu_jax, cpu_jax.numpy
    seen = {}

    def backward(saved, ct):
        seen.update(saved)
        return ct * saved["s"], None

    scale = dsl.jax.kernel_call(K.scale, backward=backward)
    x = np.arange(1, 38, dtype=np.float32) * 0.25
    g = jax.grad(lambda t: jnp.sum(scale(t, 2.5) * t))(jnp.asarray(x))   # d/dx (2.5 x * x) = 5 x
    np.testing.assert_allclose(np.asarray(g), 5.0 * x, rtol=1e-6)
    assert set(seen) == {"x", "s", "out"} and seen["s"] == 2.5


def test_value_and_grad_gives_the_forward_value_too(cpu_jax):
    jax, jnp = cpu_jax, cpu_jax.numpy
    silu = dsl.jax.kernel_call(K.silu, backward=K.silu_backward)
    x = np.linspace(-2, 2, 17).astype(np.float32)
    v, g = jax.value_and_grad(lambda t: jnp.sum(silu(t)))(jnp.asarray(x))
    np.testing.assert_allclose(float(v), float(np.sum(x / (1 + np.exp(-x.astype(np.float64))))), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g), _silu_grad64(x), rtol=2e-5, atol=2e-6)


def test_without_backward_jax_grad_is_refused_by_jax(cpu_jax):
    jax, jnp = cpu_jax, cpu_jax.numpy
    silu = dsl.jax.kernel_call(K.silu)
    with pytest.raises(Exception, match="(?i)jvp|differentiat"):
        jax.grad(lambda t: jnp.sum(silu(t)))(jnp.ones(5, jnp.float32))


def test_a_backward_kernel_with_an_unknown_parameter_name_is_refused_at_definition(cpu_jax):
    with pytest.raises(ValueError, match="grad_<input>"):
        dsl.jax.kernel_call(K.silu, backward=K.scale)     # writes `out`, which is no grad_<input>


def test_backward_options_without_backward_and_non_callables_are_refused(cpu_jax):
    with pytest.raises(ValueError, match="backward_options= needs backward="):
        dsl.jax.kernel_call(K.silu, backward_options={"grid": 1})
    with pytest.raises(TypeError, match="expected a callable"):
        dsl.jax.kernel_call(K.silu, backward=3)
