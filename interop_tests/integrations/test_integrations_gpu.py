"""On the GPU: generated torch ops on CUDA tensors (torch's current stream, torch.compile(fullgraph=True)
with inductor and no graph break, CUDA-graph capture and replay, autograd), and DSL kernels inside
jax.jit through the XLA FFI handler (SIMT and tile kernels, vmap, in-place arguments, trace-time
refusals, run-time faults reported by dsl.jax.check_faults), each against framework references."""
from __future__ import annotations

import itertools

import integration_kernels as K
import numpy as np
import pytest

import bridge
import dsl
from bridge.errors import DTypeError, ShapeRelationError

pytestmark = pytest.mark.gpu
_ids = itertools.count()


def op_name(base: str) -> str:
    return f"kb_test_gpu::{base}_{next(_ids)}"


# ---------------------------------------------------------------------------------------------- torch

@pytest.fixture
def cuda_torch(torch):
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    return torch


def test_torch_ops_on_cuda_match_torch(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu)
    x = torch.randn(1_000_003, device="cuda")
    torch.testing.assert_close(silu(x), torch.nn.functional.silu(x), rtol=1e-5, atol=1e-6)
    add = dsl.torch.custom_op(op_name("add2d"), K.add2d)
    a, b = torch.randn(333, 257, device="cuda"), torch.randn(333, 257, device="cuda")
    torch.testing.assert_close(add(a, b), a + b)
    tadd = dsl.torch.custom_op(op_name("tadd"), K.tile_add, out_shapes={"out": lambda a, b: a.shape},
                               tiles={"out": (1024,)})
    u, v = torch.randn(100_001, device="cuda"), torch.randn(100_001, device="cuda")
    torch.testing.assert_close(tadd(u, v), u + v)
    hist = dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist",
                               grid=lambda d, h: ((len(d) + 127) // 128,))
    data = torch.randint(0, 37, (200_000,), dtype=torch.int32, device="cuda")
    h = torch.zeros(37, dtype=torch.int32, device="cuda")
    hist(data, h)
    assert torch.equal(h, torch.bincount(data, minlength=37).to(torch.int32))


def test_torch_op_is_ordered_on_torchs_current_side_stream(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda.set_sync_debug_mode("error")      # no host synchronisation on the op's path
        try:
            for _ in range(3):
                x = torch.randn(1 << 22, device="cuda") * 3      # produced on `side`, consumed at once
                y = silu(x)
                ref = torch.nn.functional.silu(x)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    bridge.synchronize()


def test_compiled_fullgraph_with_inductor_and_no_graph_break(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu)

    def f(x):
        return silu(x * 2) + 1

    x = torch.randn(100_000, device="cuda")
    explanation = torch._dynamo.explain(f)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(f, fullgraph=True)              # inductor
    torch.testing.assert_close(compiled(x), torch.nn.functional.silu(x * 2) + 1, rtol=1e-5, atol=1e-5)
    dynamic = torch.compile(f, fullgraph=True, dynamic=True)
    for n in (1000, 4097):
        y = torch.randn(n, device="cuda")
        torch.testing.assert_close(dynamic(y), torch.nn.functional.silu(y * 2) + 1, rtol=1e-5, atol=1e-5)


def test_cuda_graph_capture_and_replay(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu)
    tadd = dsl.torch.custom_op(op_name("tadd"), K.tile_add, out_shapes={"out": lambda a, b: a.shape},
                               tiles={"out": (1024,)})
    hist = dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist",
                               grid=lambda d, h: ((len(d) + 127) // 128,))
    n = 50_000
    static_x = torch.randn(n, device="cuda")
    static_d = torch.randint(0, 37, (n,), dtype=torch.int32, device="cuda")

    def step():
        h = torch.zeros(37, dtype=torch.int32, device="cuda")
        hist(static_d, h)
        return tadd(silu(static_x), static_x) * 2, h

    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):          # warm up: specialise, compile and load outside the capture
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y, static_h = step()
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        static_x.copy_(torch.randn(n, device="cuda", generator=g))
        static_d.copy_(torch.randint(0, 37, (n,), dtype=torch.int32, device="cuda", generator=g))
        graph.replay()
        torch.testing.assert_close(static_y, (torch.nn.functional.silu(static_x) + static_x) * 2, rtol=1e-5,
                                   atol=1e-5)
        assert torch.equal(static_h, torch.bincount(static_d, minlength=37).to(torch.int32))
    # the captured launches left nothing in the bridge's memory log that a later launch would wait on
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        again = silu(static_y)
    torch.cuda.current_stream().wait_stream(other)
    torch.testing.assert_close(again, torch.nn.functional.silu(static_y), rtol=1e-5, atol=1e-6)
    bridge.synchronize()


def test_compile_reduce_overhead_replays_a_cuda_graph(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu)
    compiled = torch.compile(lambda t: silu(t * 2) + 1, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        x = torch.randn(4096, device="cuda")
        torch.testing.assert_close(compiled(x).clone(), torch.nn.functional.silu(x * 2) + 1, rtol=1e-5, atol=1e-5)


def test_autograd_with_a_backward_kernel_on_cuda(cuda_torch):
    torch = cuda_torch
    silu = dsl.torch.custom_op(op_name("silu"), K.silu, backward=K.silu_backward)
    x = torch.randn(10_000, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    silu(x).square().sum().backward()
    torch.nn.functional.silu(xr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
    xd = torch.randn(64, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(silu, (xd,))


def test_bad_dtype_on_cuda_is_refused_and_nothing_is_written(cuda_torch):
    torch = cuda_torch
    hist = dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist", grid=1)
    h = torch.full((37,), 5, dtype=torch.int32, device="cuda")
    with pytest.raises(DTypeError, match=r"histogram: argument 'data' \(#0\): expected int32 array, got int64"):
        hist(torch.zeros(10, dtype=torch.int64, device="cuda"), h)
    assert torch.equal(h, torch.full((37,), 5, dtype=torch.int32, device="cuda"))


# ---------------------------------------------------------------------------------------------- JAX

@pytest.fixture
def gpu_jax(jax):
    assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()!r}, not the GPU (CUDA plugin?)"
    assert dsl.jax.ffi_available(), "the JAX FFI handler was not built on the GPU machine"
    return jax


def test_jax_simt_kernel_under_jit_through_the_ffi(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    silu = dsl.jax.kernel_call(K.silu)
    f = jax.jit(lambda t: silu(t * 2) + 1)
    x = jax.random.normal(jax.random.PRNGKey(0), (1_000_003,), jnp.float32)
    assert dsl.jax.TARGET in f.lower(x).as_text()
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(jax.nn.silu(x * 2) + 1), rtol=1e-5, atol=1e-5)
    add = dsl.jax.kernel_call(K.add2d)
    a, b = (jax.random.normal(jax.random.PRNGKey(s), (300, 257), jnp.float32) for s in (1, 2))
    np.testing.assert_allclose(np.asarray(jax.jit(add)(a, b)), np.asarray(a + b), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(silu(x)), np.asarray(jax.nn.silu(x)), rtol=1e-5, atol=1e-6)   # eager


def test_jax_tile_kernels_under_jit(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    add = dsl.jax.kernel_call(K.tile_add, out_shapes={"out": lambda a, b: a.shape}, tiles={"out": (1024,)})
    a, b = (jax.random.normal(jax.random.PRNGKey(s), (100_001,), jnp.float32) for s in (3, 4))
    f = jax.jit(add)
    assert dsl.jax.TARGET in f.lower(a, b).as_text()
    np.testing.assert_allclose(np.asarray(f(a, b)), np.asarray(a + b), rtol=1e-6)
    axpy = dsl.jax.kernel_call(K.tile_axpy, mutates="y", tiles={"y": (1024,)}, static={"alpha": 0.25})
    np.testing.assert_allclose(np.asarray(jax.jit(axpy)(a, b)), np.asarray(b + 0.25 * a), rtol=1e-6)
    rows = dsl.jax.kernel_call(K.tile_rows_scaled, out_shapes={"out": lambda x: x.shape},
                               tiles={"out": lambda x: (1, x.shape[1])}, static={"k": 3})
    x = jax.random.normal(jax.random.PRNGKey(5), (77, 256), jnp.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(rows)(x)), np.asarray(x * 3), rtol=1e-6)


def test_jax_tma_gemm_under_jit(gpu_jax):
    """The sm_90 tile GEMM takes A and B through TMA tensor maps: the XLA FFI handler builds them from
    XLA's buffers and packs them at the driver's parameter offsets, like the bridge's launcher."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "tile_kernels_lib_jax", Path(__file__).resolve().parents[1] / "dsl_tile" / "tile_kernels_lib.py")
    TK = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(TK)
    jax, jnp = gpu_jax, gpu_jax.numpy
    a = jax.random.normal(jax.random.PRNGKey(7), (300, 200), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(8), (200, 176), jnp.float32).astype(jnp.bfloat16)
    ah, bh = (np.asarray(x.astype(jnp.float32)).astype(np.float64) for x in (a, b))
    if bridge.current_device().cc >= (9, 0):
        import json
        probe = TK.gemm.compile((bridge.from_host(np.asarray(a)), bridge.from_host(np.asarray(b)),
                                 dsl.tile.partition(bridge.empty((300, 176), "float32"), (128, 128)), 64),
                                bridge.current_device().arch)
        assert "tensor_maps" in json.loads(probe.contract_json)
    gemm = dsl.jax.kernel_call(TK.gemm, out_shapes={"c": lambda a, b: (a.shape[0], b.shape[1])},
                               tiles={"c": (128, 128)}, static={"bk": 64})
    np.testing.assert_allclose(np.asarray(jax.jit(gemm)(a, b)), ah @ bh, rtol=1e-3, atol=1e-2)


def test_jax_vmap_mutates_and_zeroed_outputs_on_gpu(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    rows = dsl.jax.kernel_call(K.row_sums)
    a = jax.random.normal(jax.random.PRNGKey(6), (5, 300, 17), jnp.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(rows))(a)), np.asarray(a.sum(2)), rtol=1e-5, atol=1e-4)
    hist = dsl.jax.kernel_call(K.histogram, mutates="hist", grid=lambda d, h: ((d.shape[0] + 127) // 128,))
    data = jax.random.randint(jax.random.PRNGKey(7), (200_000,), 0, 37, jnp.int32)
    start = jnp.full(37, 2, jnp.int32)
    out = jax.jit(hist)(data, start)
    np.testing.assert_array_equal(np.asarray(out), np.bincount(np.asarray(data), minlength=37) + 2)
    np.testing.assert_array_equal(np.asarray(start), np.full(37, 2))
    tot = dsl.jax.kernel_call(K.total, out_shapes={"out": (1,)}, grid=lambda t: ((t.shape[0] + 255) // 256,))
    f = jax.jit(lambda t: tot(t)[0] + tot(t * 2)[0])
    for _ in range(3):                      # XLA result buffers start as garbage: the output is zeroed
        assert float(f(jnp.ones(4096, jnp.float32))) == 3 * 4096.0


def test_jax_refusals_at_trace_time_on_gpu(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    add = dsl.jax.kernel_call(K.add2d)
    a = jnp.zeros((4, 5), jnp.float32)
    with pytest.raises(DTypeError, match=r"add2d: argument 'b' \(#1\): expected float32 array, got float64"):
        jax.jit(add).lower(a, jnp.zeros((4, 5), jnp.float64))
    with pytest.raises(ShapeRelationError, match=r"add2d: argument 'b' \(#1\): expected a.shape == b.shape"):
        jax.jit(add).lower(a, jnp.zeros((5, 4), jnp.float32))


def test_jax_kernel_fault_is_reported_by_check_faults(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    gather = jax.jit(dsl.jax.kernel_call(K.gather))
    x = jnp.arange(6, dtype=jnp.float32)
    dsl.jax.check_faults()                  # nothing recorded yet
    jax.block_until_ready(gather(x, jnp.asarray([0, 9, 1], jnp.int32)))
    with pytest.raises(dsl.KernelFault, match=r"gather: index 9 out of bounds for array 'x' with extent 6") as ei:
        dsl.jax.check_faults()
    assert ei.value.kernel == "gather" and ei.value.index == 9 and ei.value.extent == 6
    good = jax.block_until_ready(gather(x, jnp.asarray([5, 0], jnp.int32)))
    dsl.jax.check_faults()                  # cleared: the next launch works and reports nothing
    np.testing.assert_array_equal(np.asarray(good), [5.0, 0.0])


def test_jax_and_torch_ops_in_one_process(gpu_jax, cuda_torch):
    jax, jnp, torch = gpu_jax, gpu_jax.numpy, cuda_torch
    silu_t = dsl.torch.custom_op(op_name("silu"), K.silu)
    silu_j = jax.jit(dsl.jax.kernel_call(K.silu))
    x = np.random.default_rng(8).standard_normal(10_000).astype(np.float32)
    yt = silu_t(torch.from_numpy(x).cuda()).cpu().numpy()
    yj = np.asarray(silu_j(jnp.asarray(x)))
    np.testing.assert_array_equal(yt, yj)            # the same kernel, bit for bit


def test_jax_grad_through_the_ffi_with_a_backward_kernel(gpu_jax):
    jax, jnp = gpu_jax, gpu_jax.numpy
    silu = dsl.jax.kernel_call(K.silu, backward=K.silu_backward)
    x = jax.random.normal(jax.random.PRNGKey(3), (100_003,), jnp.float32) * 3
    grad = jax.jit(jax.grad(lambda t: jnp.sum(silu(t) ** 2)))
    assert dsl.jax.TARGET in grad.lower(x).as_text()
    want = jax.grad(lambda t: jnp.sum(jax.nn.silu(t) ** 2))(x)
    np.testing.assert_allclose(np.asarray(grad(x)), np.asarray(want), rtol=1e-4, atol=1e-5)
