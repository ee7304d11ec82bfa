"""The XLA FFI handler launches with cuLaunchKernel, which cannot make a grid co-resident: a cooperative
kernel (simt.grid.sync()) given to dsl.jax.kernel_call on the GPU is refused with a typed error naming the
kernel, at trace time, before any launch (its CPU path, the simulator, runs it)."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from bridge.errors import ContractDefinitionError
from dsl import f32, simt

pytestmark = pytest.mark.gpu


@simt.kernel(block=128, cooperative=True, requires=["len(a) == len(out)"])
def coop_copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    simt.grid.sync()
    out[i] = a[i]


def test_cooperative_kernel_is_refused_as_an_xla_custom_call(jax):
    if not dsl.jax.ffi_available():
        pytest.fail("the JAX FFI handler was not built on the GPU machine (dsl.jax.ffi_available() is False)")
    call = dsl.jax.kernel_call(coop_copy, grid=(4, 1, 1), block=(128, 1, 1))
    x = jax.numpy.asarray(np.arange(512, dtype=np.float32))
    with pytest.raises(ContractDefinitionError, match=r"coop_copy: cooperative=True kernels cannot run as XLA"):
        jax.block_until_ready(jax.jit(call)(x))
