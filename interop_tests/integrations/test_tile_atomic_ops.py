"""A tile kernel's `tile.Atomic` parameter through dsl.torch.custom_op and dsl.jax.kernel_call (CPU, the
simulator): it is written (atomically), so the op treats it as an output, never as a read-only input it would
silently change. Allocated, it starts at zero on every call (the atomics add into its starting values);
named in `mutates=`, it starts from the caller's array. And a partition the kernel only loads (a global
reduction's input, which defines its grid) is an op input, not an output to allocate."""
from __future__ import annotations

import itertools

import integration_kernels as K
import numpy as np
import pytest

import dsl

_ids = itertools.count()
N = 1000                  # four tiles of 256, the last one partly past the end


def _a() -> np.ndarray:
    return np.random.default_rng(11).standard_normal(N).astype(np.float32)


def _poison_new_arrays(monkeypatch, module, fill=np.nan):
    """Every float array `module.empty` makes during the test comes filled with `fill` (fresh memory is often zero
    by chance, which would hide an output that is not zero-filled)."""
    empty = module.empty

    def poisoned(*args, **kwargs):
        x = empty(*args, **kwargs)
        if isinstance(x, np.ndarray):                    # NumPy (the JAX call's simulator path)
            if np.issubdtype(x.dtype, np.floating):
                x.fill(fill)
        elif x.dtype.is_floating_point:                  # torch
            x.fill_(fill)
        return x
    monkeypatch.setattr(module, "empty", poisoned)


def test_an_atomic_parameter_is_an_op_output_that_starts_at_zero_every_call(torch, monkeypatch):
    _poison_new_arrays(monkeypatch, torch)
    op = dsl.torch.custom_op(f"kb_test_atomic::doubled_total_{next(_ids)}", K.tile_doubled_total,
                             out_shapes={"out": lambda a: a.shape, "total": (1,)}, tiles={"out": (256,)})
    assert str(op._opoverload._schema).endswith("(Tensor a) -> (Tensor, Tensor)")
    a = torch.from_numpy(_a())
    for _ in range(2):                                   # a garbage or carried-over start would show here
        out, total = op(a)
        torch.testing.assert_close(out, a * 2)
        np.testing.assert_allclose(total.numpy(), [_a().astype(np.float64).sum()], rtol=1e-5, atol=1e-4)


def test_an_atomic_parameter_named_in_mutates_starts_from_the_callers_values(torch):
    op = dsl.torch.custom_op(f"kb_test_atomic::doubled_total_{next(_ids)}", K.tile_doubled_total, mutates="total",
                             out_shapes={"out": lambda a, total: a.shape}, tiles={"out": (256,)})
    assert str(op._opoverload._schema).endswith("(Tensor a, Tensor(a0!) total) -> Tensor")
    a, total = torch.from_numpy(_a()), torch.tensor([5.0])
    torch.testing.assert_close(op(a, total), a * 2)
    np.testing.assert_allclose(total.numpy(), [5.0 + _a().astype(np.float64).sum()], rtol=1e-5, atol=1e-4)
    torch.library.opcheck(op._opoverload, (a, torch.tensor([5.0])))


def test_jax_returns_an_atomic_parameter_and_leaves_its_input_unchanged(cpu_jax, monkeypatch):
    jnp = cpu_jax.numpy
    from dsl.integrations import jax_call
    _poison_new_arrays(monkeypatch, jax_call.np)
    fresh = dsl.jax.kernel_call(K.tile_doubled_total, out_shapes={"out": lambda a: a.shape, "total": (1,)},
                                tiles={"out": (256,)})
    want = _a().astype(np.float64).sum()
    for _ in range(2):
        out, total = cpu_jax.jit(fresh)(jnp.asarray(_a()))
        np.testing.assert_allclose(np.asarray(out), _a() * 2, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(total), [want], rtol=1e-5, atol=1e-4)
    carried = dsl.jax.kernel_call(K.tile_doubled_total, mutates="total",
                                  out_shapes={"out": lambda a, total: a.shape}, tiles={"out": (256,)})
    start = jnp.asarray([5.0], jnp.float32)
    out, total = cpu_jax.jit(carried)(jnp.asarray(_a()), start)
    np.testing.assert_allclose(np.asarray(total), [5.0 + want], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(start), [5.0])          # JAX arrays stay immutable


def test_an_atomic_parameter_is_planned_as_written_not_as_an_input():
    from dsl.integrations._plan import OpPlan
    plan = OpPlan(K.tile_doubled_total, "test", out_shapes={"out": (N,), "total": (1,)}, tiles={"out": (256,)})
    assert [p.name for p in plan.inputs] == ["a"]
    assert [p.name for p in plan.outputs] == ["out", "total"]
    with pytest.raises(Exception, match=r"'a'.*writable"):
        OpPlan(K.tile_doubled_total, "test", mutates="a", out_shapes={"out": (N,), "total": (1,)},
               tiles={"out": (256,)})


def test_a_global_reduction_takes_its_loaded_partition_as_an_input(torch, cpu_jax):
    """docs/tile.md's global norm as an op: x (a partition only loaded) in, out (tile.Atomic) out."""
    op = dsl.torch.custom_op(f"kb_test_atomic::sumsq_{next(_ids)}", K.tile_global_sumsq, out_shapes={"out": (1,)},
                             tiles={"x": (256,)})
    assert str(op._opoverload._schema).endswith("(Tensor x) -> Tensor")
    x = torch.from_numpy(_a())
    want = (_a().astype(np.float64) ** 2).sum()
    np.testing.assert_allclose(op(x).numpy(), [want], rtol=1e-5)
    np.testing.assert_array_equal(x.numpy(), _a())                    # the input is not written
    jnp = cpu_jax.numpy
    call = dsl.jax.kernel_call(K.tile_global_sumsq, out_shapes={"out": (1,)}, tiles={"x": (256,)})
    np.testing.assert_allclose(np.asarray(cpu_jax.jit(call)(jnp.asarray(_a()))), [want], rtol=1e-5)


def test_a_loaded_partition_named_in_mutates_stays_an_in_place_argument():
    """Before partitions only loaded became inputs, mutates= was the way to pass one; it still is accepted."""
    from dsl.integrations._plan import OpPlan
    plan = OpPlan(K.tile_global_sumsq, "test", out_shapes={"out": (1,)}, tiles={"x": (256,)})
    assert [p.name for p in plan.inputs] == ["x"] and [p.name for p in plan.outputs] == ["out"]
    kept = OpPlan(K.tile_global_sumsq, "test", mutates="x", out_shapes={"out": (1,)}, tiles={"x": (256,)})
    assert [p.name for p in kept.inputs] == ["x"] and kept.mutates == {"x"}
