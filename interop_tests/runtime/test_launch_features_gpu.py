"""Launch features on the GPU: CUDA C++ kernels built by nvcc here, with KB_COOPERATIVE / KB_CLUSTER /
KB_PDL contracts, launched through the native launcher (cuLaunchKernelEx attributes) — results against
NumPy float64, and refusals before launch with the output left as poisoned. The CPU half (schema,
validator messages): interop_tests/contract/test_launch_features.py."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import bridge

pytestmark = pytest.mark.gpu
POISON = -7.0

SOURCE = r'''
#include <cooperative_groups.h>
#include "kernelbridge/kernel_contract.cuh"
namespace cg = cooperative_groups;

// out = x - mean(x): one grid-wide barrier between the block sums and their use.
extern "C" __global__ void __launch_bounds__(256) center(const float* x, float* partial, float* out, int n) {
  __shared__ float s[256];
  cg::grid_group grid = cg::this_grid();
  float acc = 0.f;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
  grid.sync();
  float total = 0.f;
  for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
  const float mean = total / n;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) out[i] = x[i] - mean;
}
KB_CONTRACT(center, KB_BLOCK(256), KB_COOPERATIVE(),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(partial, f32, 1, readwrite), KB_ARRAY(out, f32, 1, write),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(out) == n", "len(partial) >= grid.x"));

// out[i] = x[i] + the same thread's element of the next block in the cluster (distributed shared memory).
__device__ void next_in_cluster(const float* x, float* out, int n) {
  __shared__ float v[128];
  cg::cluster_group cl = cg::this_cluster();
  const int i = blockIdx.x * 128 + threadIdx.x;
  v[threadIdx.x] = i < n ? x[i] : 0.f;
  cl.sync();
  const float* other = cl.map_shared_rank(v, (cl.block_rank() + 1) % cl.num_blocks());
  const float w = other[threadIdx.x];
  cl.sync();
  if (i < n) out[i] = x[i] + w;
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128) pair_compiled(const float* x, float* out,
                                                                                        int n) {
  next_in_cluster(x, out, n);
}
KB_CONTRACT(pair_compiled, KB_BLOCK(128), KB_CLUSTER(2), KB_MIN_CC(90),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(out, f32, 1, write), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(out) == n"), KB_GRID_FROM(out));
extern "C" __global__ void __launch_bounds__(128) ring_runtime(const float* x, float* out, int n) {
  next_in_cluster(x, out, n);
}
KB_CONTRACT(ring_runtime, KB_BLOCK(128), KB_CLUSTER(4), KB_MIN_CC(90),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(out, f32, 1, write), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(out) == n"), KB_GRID_FROM(out));
// the contract says 4, the function was compiled for 2: refused at launch
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128) pair_misdeclared(const float* x, float* out,
                                                                                           int n) {
  next_in_cluster(x, out, n);
}
KB_CONTRACT(pair_misdeclared, KB_BLOCK(128), KB_CLUSTER(4),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(out, f32, 1, write), KB_SCALAR(n, i32)),
            KB_GRID_FROM(out));

// A PDL chain: each kernel waits for its predecessor's writes before reading them.
extern "C" __global__ void __launch_bounds__(256) pdl_scale(const float* x, float* y, float s, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) y[i] = x[i] * s;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
KB_CONTRACT(pdl_scale, KB_BLOCK(256), KB_PDL(), KB_MIN_CC(90),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write), KB_SCALAR(s, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n"), KB_GRID_FROM(y));
extern "C" __global__ void __launch_bounds__(256) pdl_add(const float* y, const float* b, float* z, int n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) z[i] = y[i] + b[i];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
KB_CONTRACT(pdl_add, KB_BLOCK(256), KB_PDL(), KB_MIN_CC(90),
            KB_ARGS(KB_ARRAY(y, f32, 1, read), KB_ARRAY(b, f32, 1, read), KB_ARRAY(z, f32, 1, write),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(y) == n", "len(b) == n", "len(z) == n"), KB_GRID_FROM(z));

extern "C" __global__ void __launch_bounds__(256) plain_copy(const float* x, float* y, int n) {
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) y[i] = x[i];
}
KB_CONTRACT(plain_copy, KB_BLOCK(256), KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write),
                                               KB_SCALAR(n, i32)), KB_GRID_FROM(y));
'''


@pytest.fixture(scope="module")
def sm90():
    dev = bridge.Device(0)
    if dev.cc < (9, 0):
        pytest.skip(f"launch features need sm_90 (clusters, PDL); this device is {dev.arch}")
    return dev


@pytest.fixture(scope="module")
def mod(nvcc, sm90, tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    src, out = root / "features.cu", root / "features.cubin"
    src.write_text(SOURCE)
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-std=c++17", f"-I{bridge.cpp_kernels.include_dir()}",
                           str(src), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bridge.load_module(str(out), name="features")


def poisoned(n):
    return bridge.full((n,), POISON, "float32")


def assert_untouched(arr):
    bridge.synchronize()
    np.testing.assert_array_equal(arr.to_host(), np.full(arr.shape, POISON, np.float32))


# --- cooperative ---------------------------------------------------------------------------------------

def test_cooperative_grid_sync_kernel_runs_on_a_co_resident_grid(mod, sm90, rng):
    n = 1 << 20
    x_np = rng.standard_normal(n).astype(np.float32)
    x, out = bridge.from_host(x_np), poisoned(n)
    grid = 2 * sm90.sm_count                   # 2 blocks of 256 threads per SM are co-resident on sm_90
    partial = bridge.zeros((grid,), "float32")
    assert mod.center.launcher.launch_features
    for _ in range(2):                          # the second launch is the validator memo's cached path
        mod.center(x, partial, out, n, grid=grid)
    bridge.synchronize()
    assert mod.center.launcher.accepted_again >= 1
    want = x_np.astype(np.float64) - x_np.astype(np.float64).mean()
    np.testing.assert_allclose(out.to_host(), want, rtol=0, atol=1e-4)


def test_oversized_cooperative_grid_is_refused_before_launch(mod, sm90):
    n = 1 << 16
    x, out = bridge.zeros((n,), "float32"), poisoned(n)
    grid = 64 * sm90.sm_count                   # 64 blocks of 256 threads per SM cannot be resident
    partial = bridge.zeros((grid,), "float32")
    with pytest.raises(bridge.CooperativeGridError) as info:
        mod.center(x, partial, out, n, grid=grid)
    msg = str(info.value)
    assert msg.startswith(f"center: cooperative grid ({grid}, 1, 1): expected at most ")
    assert f"x {sm90.sm_count} SMs), got {grid} blocks" in msg
    assert_untouched(out)


# --- clusters --------------------------------------------------------------------------------------------

def _next_in_cluster(x, cluster, block=128):
    """NumPy float64 of next_in_cluster: each block adds the next block's elements within its cluster."""
    blocks = -(-len(x) // block)
    padded = np.zeros(blocks * block)
    padded[:len(x)] = x
    tiles = padded.reshape(blocks, block)
    partner = np.array([(b // cluster) * cluster + (b % cluster + 1) % cluster for b in range(blocks)])
    return (tiles + tiles[partner]).reshape(-1)[:len(x)]


@pytest.mark.parametrize("name,cluster", [("pair_compiled", 2), ("ring_runtime", 4)])
def test_cluster_kernel_reads_its_neighbour_through_distributed_shared_memory(mod, rng, name, cluster):
    n = 128 * 15 + 50                            # 16 blocks: divisible by 2 and by 4
    x_np = rng.standard_normal(n).astype(np.float32)
    x, out = bridge.from_host(x_np), poisoned(n)
    getattr(mod, name)(x, out, n)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), _next_in_cluster(x_np.astype(np.float64), cluster), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("name,cluster", [("pair_compiled", 2), ("ring_runtime", 4)])
def test_grid_that_is_no_multiple_of_the_cluster_is_refused(mod, name, cluster):
    n = 128 * 12 + 50                            # 13 blocks
    x, out = bridge.zeros((n,), "float32"), poisoned(n)
    with pytest.raises(bridge.ClusterError, match=rf"divisible by the (compiled )?cluster \({cluster}, 1, 1\), "
                                                  r"got 13 in x"):
        getattr(mod, name)(x, out, n)
    assert_untouched(out)


def test_contract_cluster_unlike_the_compiled_one_is_refused(mod):
    n = 128 * 16
    x, out = bridge.zeros((n,), "float32"), poisoned(n)
    with pytest.raises(bridge.ClusterError, match=r"expected \(2, 1, 1\) \(compiled into the function"):
        mod.pair_misdeclared(x, out, n)
    assert_untouched(out)


def test_function_attributes_report_the_compiled_cluster(mod):
    assert mod.pair_compiled.attributes.required_cluster == (2, 1, 1)
    assert mod.ring_runtime.attributes.required_cluster == (0, 0, 0)
    assert not mod.plain_copy.launcher.launch_features


# --- PDL -------------------------------------------------------------------------------------------------

def _chain(mod, x, b, y, z, n, s, **kw):
    """y = x*s; z = y+b; y = z*s; z = y+b; ... (6 dependent launches, each reading its predecessor's output)."""
    src = x
    for _ in range(3):
        mod.pdl_scale(src, y, np.float32(s), n, **kw)
        mod.pdl_add(y, b, z, n, **kw)
        src = z


def _chain_np(x, b, s):
    v = x.astype(np.float64)
    for _ in range(3):
        v = v * s + b.astype(np.float64)
    return v


@pytest.mark.parametrize("pdl", [True, False], ids=["pdl", "opted_out"])
def test_pdl_chain_gives_the_numpy_answer(mod, rng, pdl):
    n = (1 << 18) + 3
    x_np, b_np = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, b = bridge.from_host(x_np), bridge.from_host(b_np)
    y, z = poisoned(n), poisoned(n)
    assert mod.pdl_scale.launcher.launch_features
    s = 0.5
    _chain(mod, x, b, y, z, n, s, pdl=pdl)
    bridge.synchronize()
    np.testing.assert_allclose(z.to_host(), _chain_np(x_np, b_np, s), rtol=1e-5, atol=1e-5)


def test_pdl_chain_in_a_graph_capture_replays_the_numpy_answer(mod, rng):
    n = (1 << 16) + 5
    x_np, b_np = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, b = bridge.from_host(x_np), bridge.from_host(b_np)
    y, z = poisoned(n), poisoned(n)
    stream = bridge.Stream()
    with bridge.capture(stream) as graph:
        _chain(mod, x, b, y, z, n, 2.0)
    assert_untouched(z)                           # captured, not run
    for _ in range(2):
        graph.replay(stream)
        stream.synchronize()
        np.testing.assert_allclose(z.to_host(), _chain_np(x_np, b_np, 2.0), rtol=1e-5, atol=1e-5)


def test_pdl_launch_refusal_leaves_the_output_untouched(mod):
    n = 1000
    x, y = bridge.zeros((n + 1,), "float32"), poisoned(n)
    with pytest.raises(bridge.ShapeRelationError):
        mod.pdl_scale(x, y, np.float32(2.0), n)
    assert_untouched(y)


def test_pdl_option_must_be_a_bool(mod):
    n = 256
    with pytest.raises(TypeError, match="pdl_scale: pdl must be True or False"):
        mod.pdl_scale(bridge.zeros((n,), "float32"), poisoned(n), np.float32(1.0), n, pdl=1)
