"""DSL kernels inside `jax.jit`: a SIMT kernel and a tile kernel become XLA custom calls
(`dsl.jax.kernel_call`, through the XLA FFI), launched on XLA's stream with XLA's buffers and validated
by their launch contracts, in one jitted function next to ordinary jax.numpy code.

    python examples/jax_jit.py

Output shapes come from the contracts (`x.shape == out.shape`) or a shape rule; a bad argument is the
bridge's typed error when the function is traced, before anything runs; `jax.vmap` runs one launch per
batch element.
"""
import argparse
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # share the GPU politely

import numpy as np

import bridge
import dsl
from dsl import TypeVar, f32, simt, tile

T = TypeVar("T")


@simt.kernel(block=256, requires=["x.shape == out.shape"])
def gelu_tanh(x: simt.Array[T], out: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    out[i] = T(0.5) * x[i] * (T(1) + simt.tanh(T(0.7978845608028654) * (x[i] + T(0.044715) * x[i] * x[i] * x[i])))


@tile.kernel
def scaled_add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32], alpha: f32):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + alpha * tile.load(b, t, out.tile_shape))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20, help="elements per array")
    args = ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"jax_jit needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        print(f"jax_jit needs a CUDA GPU and JAX with its CUDA plugin: {exc}")
        return 1
    if jax.default_backend() != "gpu" or not dsl.jax.ffi_available():
        print(f"jax_jit needs a CUDA GPU for JAX (backend: {jax.default_backend()}) and the FFI handler "
              f"(built: {dsl.jax.ffi_available()})")
        return 1

    gelu = dsl.jax.kernel_call(gelu_tanh)
    axpy = dsl.jax.kernel_call(scaled_add, out_shapes={"out": lambda a, b: a.shape}, tiles={"out": (1024,)},
                               static={"alpha": 0.5})

    @jax.jit
    def block(x, y):
        h = gelu(x * 2.0)                      # SIMT kernel
        return jnp.tanh(axpy(h, y)).sum()      # tile kernel, then XLA's own ops

    def reference(x, y):
        h = jax.nn.gelu(x * 2.0, approximate=True)
        return jnp.tanh(h + 0.5 * y).sum()

    kx, ky = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (args.n,), jnp.float32)
    y = jax.random.normal(ky, (args.n,), jnp.float32)
    hlo = block.lower(x, y).as_text()
    calls = hlo.count(dsl.jax.TARGET)
    assert calls >= 2, hlo[:2000]
    got, want = float(block(x, y)), float(jax.jit(reference)(x, y))
    assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)
    print(f"jax.jit: {calls} kernelbridge custom calls in the HLO; sum {got:.4f} matches jax.numpy's {want:.4f}")

    batched = jax.jit(jax.vmap(gelu))(x.reshape(16, -1))
    np.testing.assert_allclose(np.asarray(batched).reshape(-1), np.asarray(jax.nn.gelu(x, approximate=True)),
                               rtol=2e-5, atol=2e-6)
    print("jax.vmap: 16 launches of the SIMT kernel, one per row, match jax.nn.gelu")

    try:
        jax.jit(gelu).lower(x.reshape(16, -1))     # the kernel declares a 1-D array
    except bridge.LaunchContractError as exc:
        print(f"bad shape refused while tracing: {type(exc).__name__}: {exc}")
    else:
        raise AssertionError("a 2-D array for a 1-D kernel parameter was not refused")
    dsl.jax.check_faults()                     # would raise a recorded bridge.KernelFault
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
