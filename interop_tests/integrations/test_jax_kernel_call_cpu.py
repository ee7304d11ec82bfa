"""dsl.jax.kernel_call on JAX's CPU backend (the kernel runs on the simulator through pure_callback):
eager and jax.jit results against NumPy, vmap (sequential), in-place arguments, tile kernels, and typed
refusals at trace time."""
from __future__ import annotations

import integration_kernels as K
import numpy as np
import pytest

import dsl
from bridge.errors import ArgumentKindError, ContractDefinitionError, DTypeError, NdimError, ShapeRelationError
from interop_tests.kernels_zoo import sgemm_naive


def test_eager_and_jit_results_match_numpy(cpu_jax):
    jnp = cpu_jax.numpy
    call = dsl.jax.kernel_call(K.silu)
    x = np.linspace(-6, 6, 1001).astype(np.float32)
    ref = x / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(call(jnp.asarray(x))), ref, rtol=1e-6, atol=1e-6)
    jitted = cpu_jax.jit(lambda t: call(t * 2) + 1)
    np.testing.assert_allclose(np.asarray(jitted(jnp.asarray(x))), 2 * x / (1 + np.exp(-2 * x.astype(np.float64))) + 1,
                               rtol=1e-5, atol=1e-5)


def test_generic_kernel_with_a_static_scalar(cpu_jax):
    jnp = cpu_jax.numpy
    call = dsl.jax.kernel_call(K.scale)
    for dt in (jnp.float32, jnp.float64, jnp.int32):
        x = jnp.arange(11).astype(dt)
        y = cpu_jax.jit(lambda t: call(t, 3))(x)
        assert y.dtype == dt and np.array_equal(np.asarray(y), np.arange(11) * 3)


def test_output_shapes_from_per_axis_relations(cpu_jax):
    jnp = cpu_jax.numpy
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    c = cpu_jax.jit(dsl.jax.kernel_call(sgemm_naive))(jnp.asarray(a), jnp.asarray(b))
    assert c.shape == (5, 3)
    np.testing.assert_allclose(np.asarray(c), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    rows = dsl.jax.kernel_call(K.row_sums)
    np.testing.assert_allclose(np.asarray(cpu_jax.jit(rows)(jnp.asarray(a))), a.sum(1), rtol=1e-5, atol=1e-5)


def test_output_length_from_a_static_scalar(cpu_jax):
    iota = dsl.jax.kernel_call(K.iota)
    assert np.array_equal(np.asarray(cpu_jax.jit(lambda: iota(6))()), np.arange(6))


def test_vmap_runs_one_launch_per_batch_element(cpu_jax):
    jnp = cpu_jax.numpy
    rows = dsl.jax.kernel_call(K.row_sums)
    a = np.random.default_rng(2).standard_normal((4, 6, 3)).astype(np.float32)
    out = cpu_jax.jit(cpu_jax.vmap(rows))(jnp.asarray(a))
    assert out.shape == (4, 6)
    np.testing.assert_allclose(np.asarray(out), a.sum(2), rtol=1e-5, atol=1e-5)


def test_mutated_argument_returns_its_new_value(cpu_jax):
    jnp = cpu_jax.numpy
    hist = dsl.jax.kernel_call(K.histogram, mutates="hist", grid=lambda d, h: ((d.shape[0] + 127) // 128,))
    data = np.random.default_rng(3).integers(0, 37, 4000).astype(np.int32)
    start = jnp.ones(37, jnp.int32)
    out = cpu_jax.jit(hist)(jnp.asarray(data), start)
    np.testing.assert_array_equal(np.asarray(out), np.bincount(data, minlength=37) + 1)
    np.testing.assert_array_equal(np.asarray(start), np.ones(37))      # JAX arrays stay immutable


def test_output_the_kernel_reads_starts_at_zero(cpu_jax):
    jnp = cpu_jax.numpy
    tot = dsl.jax.kernel_call(K.total, out_shapes={"out": (1,)}, grid=lambda a: ((a.shape[0] + 255) // 256,))
    for _ in range(2):
        assert float(cpu_jax.jit(tot)(jnp.ones(1000, jnp.float32))[0]) == 1000.0


def test_tile_kernels(cpu_jax):
    jnp = cpu_jax.numpy
    add = dsl.jax.kernel_call(K.tile_add, out_shapes={"out": lambda a, b: a.shape}, tiles={"out": (256,)})
    a, b = (np.random.default_rng(s).standard_normal(1000).astype(np.float32) for s in (4, 5))
    np.testing.assert_allclose(np.asarray(cpu_jax.jit(add)(jnp.asarray(a), jnp.asarray(b))), a + b, rtol=1e-6)
    axpy = dsl.jax.kernel_call(K.tile_axpy, mutates="y", tiles={"y": (128,)}, static={"alpha": 0.5})
    np.testing.assert_allclose(np.asarray(cpu_jax.jit(axpy)(jnp.asarray(a), jnp.asarray(b))), b + 0.5 * a, rtol=1e-6)
    rows = dsl.jax.kernel_call(K.tile_rows_scaled, out_shapes={"out": lambda x: x.shape},
                               tiles={"out": lambda x: (1, x.shape[1])}, static={"k": 3})
    x = np.random.default_rng(6).standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(cpu_jax.jit(rows)(jnp.asarray(x))), x * 3, rtol=1e-6)


def test_wrong_dtype_is_refused_at_trace_time(cpu_jax):
    jnp = cpu_jax.numpy
    add = dsl.jax.kernel_call(K.add2d)
    a = jnp.zeros((2, 3), jnp.float32)
    with pytest.raises(DTypeError, match=r"add2d: argument 'b' \(#1\): expected float32 array, got float64 array "
                                         r"of shape \(2, 3\)"):
        cpu_jax.jit(add)(a, a.astype(jnp.float64))


def test_bad_shape_is_refused_at_trace_time_by_the_contract(cpu_jax):
    jnp = cpu_jax.numpy
    add = dsl.jax.kernel_call(K.add2d)
    with pytest.raises(ShapeRelationError, match=r"add2d: argument 'b' \(#1\): expected a.shape == b.shape, got "
                                                 r"a.shape = \(2, 3\), b.shape = \(3, 2\)"):
        cpu_jax.jit(add).lower(jnp.zeros((2, 3), jnp.float32), jnp.zeros((3, 2), jnp.float32))


def test_bad_ndim_and_traced_scalar_are_refused(cpu_jax):
    jnp = cpu_jax.numpy
    with pytest.raises(NdimError, match=r"silu: argument 'x' \(#0\): expected a 1-D array, got a 2-D array"):
        cpu_jax.jit(dsl.jax.kernel_call(K.silu))(jnp.zeros((2, 2), jnp.float32))
    scale = dsl.jax.kernel_call(K.scale)
    with pytest.raises(ArgumentKindError, match=r"scale: argument 's' \(#2\): a kernel scalar must be a concrete "
                                                r"number when traced"):
        cpu_jax.jit(scale)(jnp.zeros(3, jnp.float32), 2.0)


def test_undetermined_output_is_refused_at_creation(jax):
    with pytest.raises(ContractDefinitionError, match=r"dsl.jax.kernel_call: total: argument 'out' \(#1\): the "
                                                      r"contract does not determine the shape"):
        dsl.jax.kernel_call(K.total, grid=1)


def test_partition_grids_must_agree(cpu_jax):
    call = dsl.jax.kernel_call(K.tile_two_outputs, out_shapes={"p": lambda a: a.shape, "q": lambda a: a.shape},
                               tiles={"p": (64,), "q": (128,)})
    with pytest.raises(ShapeRelationError, match=r"tile_two_outputs: argument 'q' \(#2\): expected \(q.shape\[0\] \+ 127\) // 128 == "
                                                   r"\(p.shape\[0\] \+ 63\) // 64"):
        cpu_jax.jit(call)(cpu_jax.numpy.zeros(1000, cpu_jax.numpy.float32))


def test_kernel_fault_in_the_simulator_surfaces_with_its_message(cpu_jax):
    jnp = cpu_jax.numpy
    gather = dsl.jax.kernel_call(K.gather)
    with pytest.raises(Exception, match="gather: index 9 out of bounds for array 'x' with extent 6"):
        cpu_jax.block_until_ready(cpu_jax.jit(gather)(jnp.arange(6, dtype=jnp.float32),
                                                      jnp.asarray([0, 9, 1], jnp.int32)))
