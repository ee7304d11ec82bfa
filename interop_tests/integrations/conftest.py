"""torch and JAX are optional extras: their tests skip with a visible reason when not installed.

JAX must not grab 75% of the GPU when its CUDA backend starts (the other tests of the same worker need
it), so preallocation is turned off before anything can import jax.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (optional extra: kernelbridge[torch])")


@pytest.fixture(scope="session")
def jax():
    jax = pytest.importorskip("jax", reason="JAX is not installed (optional extra: kernelbridge[jax])")
    jax.config.update("jax_enable_x64", True)     # the kernels' i64/f64 arrays stay 64-bit
    return jax


@pytest.fixture
def cpu_jax(jax):
    """JAX with the CPU as default device: kernel_call takes its simulator path (also on a GPU machine)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield jax
