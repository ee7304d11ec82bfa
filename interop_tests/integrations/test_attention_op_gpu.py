"""examples/attention_op.py on the GPU: the SDPA drop-in (bf16/f16) against torch autograd of SDPA in
float64, under torch.compile(fullgraph=True) with inductor, inside a CUDA-graph capture, under
torch.library.opcheck, and the JAX custom_vjp through the XLA FFI handler."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import attention_op as A  # noqa: E402

pytestmark = pytest.mark.gpu

# P and dS are rounded to the input dtype for the products: the backward example measures up to 3.3e-3
# (bf16) and 3.0e-4 (f16) relative to the largest gradient; these bounds leave a factor of 3 and more.
TOL = {"bfloat16": 1e-2, "float16": 2e-3}


@pytest.fixture
def cuda_torch(torch):
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    return torch


def relative(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max())


def make(torch, shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(shape, device="cuda", dtype=getattr(torch, dtype), generator=g).requires_grad_()
            for _ in range(3)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_matches_float64_autograd_on_gpu(cuda_torch, dtype, d, causal):
    torch = cuda_torch
    q, k, v = make(torch, (2, 4, 320, d), dtype, seed=d)          # 320: five 64-row tiles
    w = torch.randn(q.shape, device="cuda", dtype=torch.float64, generator=torch.Generator("cuda").manual_seed(1))
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal)
    (out.double() * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal)
    (ref * w).sum().backward()
    assert out.dtype == q.dtype
    assert relative(out, ref) < TOL[dtype]
    for x, r in zip((q, k, v), x64):
        assert relative(x.grad, r.grad) < TOL[dtype]


def grouped_grads_match_float64(torch, q, k, v, causal: bool, g) -> tuple:
    """Backward through the drop-in (enable_gqa) with a random float64 upstream gradient, each gradient
    against autograd of SDPA in float64 within the bf16 bound; returns (our output, SDPA's in float64)."""
    w = torch.randn(q.shape, device="cuda", dtype=torch.float64, generator=g)
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    (out.double() * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=True)
    (ref * w).sum().backward()
    for x, r in zip((q, k, v), x64):
        assert x.grad.shape == r.grad.shape and relative(x.grad, r.grad) < TOL["bfloat16"]
    return out, ref


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_drop_in_matches_float64_autograd_on_gpu(cuda_torch, causal):
    """H 8 query heads on H_kv 2 key/value heads (enable_gqa=True), bf16, D128, S 320."""
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(3 + causal)
    q, k, v = (torch.randn((2, h, 320, 128), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for h in (8, 2, 2))
    out, ref = grouped_grads_match_float64(torch, q, k, v, causal, g)
    assert relative(out, ref) < TOL["bfloat16"]


@pytest.mark.parametrize("causal", [False, True])
def test_fused_backward_is_the_default_at_d128_and_matches_float64_autograd(cuda_torch, causal):
    """D128 with S a multiple of 128 on sm_90: the op's backward is the fused one (dQ added atomically),
    grouped-query (H 4 on H_kv 2), bf16, against autograd of SDPA in float64."""
    torch = cuda_torch
    g = torch.Generator(device="cuda").manual_seed(11 + causal)
    q, k, v = (torch.randn((2, h, 384, 128), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for h in (4, 2, 2))
    expected = A.fused.FASTEST[128] if A.fwd.on_warpgroup_mma() else None
    assert A.backward_form(q, 384) == expected
    grouped_grads_match_float64(torch, q, k, v, causal, g)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_staged_fused_backward_converts_dq_beside_its_last_launch_and_matches_float64(cuda_torch, d, causal):
    """B4 H16 S384: 64 heads, so full attention's fused backward runs in two stages (cut before its split's parts:
    192 key blocks on 132 SMs; causal in one) and converts the first stage's dQ rows on torch's stream while
    the rest runs on its high-priority stream; the gradients, read on torch's stream, against autograd of SDPA in
    float64."""
    torch = cuda_torch
    b, h, s = 4, 16, 384
    q, k, v = make(torch, (b, h, s, d), "bfloat16", seed=40 + d + causal)
    form = A.backward_form(q, s, causal)
    if form is None:
        pytest.skip("the fused backward runs on warpgroup MMA (sm_90) only; this GPU takes the two-kernel one")
    rows = [x.detach().reshape(-1, d) for x in (q, k, v)]
    stages = A.fused.staged_launch_args(*rows, rows[0], rows[0], torch.empty(b * h * s, device="cuda"),
                                        torch.empty(b * h * s, device="cuda"), torch.empty((b * h * s, d), device="cuda"),
                                        torch.empty_like(rows[1]), torch.empty_like(rows[2]), s, causal,
                                        **A.fused.form_options(form))
    if causal:                               # never cut by heads by default (fused.TAIL_HEADS)
        assert not stages.rest and stages.done == b * h * s
    else:
        assert stages.rest and 0 < stages.done < b * h * s, stages.done
    w = torch.randn(q.shape, device="cuda", dtype=torch.float64, generator=torch.Generator("cuda").manual_seed(3))
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal)
    (out.double() * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    (torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal) * w).sum().backward()
    for x, r in zip((q, k, v), x64):
        assert x.grad.dtype == torch.bfloat16
        assert relative(x.grad, r.grad) < TOL["bfloat16"]


def test_deterministic_algorithms_run_the_two_kernel_backward_bit_for_bit(cuda_torch):
    """Under torch.use_deterministic_algorithms(True) the op leaves the fused backward (its atomic dQ
    adds make the last bits depend on block order): two backward passes give identical gradients."""
    torch = cuda_torch
    q, k, v = make(torch, (1, 4, 384, 128), "bfloat16", seed=12)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert A.backward_form(q, 384) is None
        grads = []
        for _ in range(2):
            out = A.scaled_dot_product_attention(q, k, v, is_causal=True)
            grads.append(torch.autograd.grad(out.float().square().sum(), (q, k, v)))
    finally:
        torch.use_deterministic_algorithms(before)
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    assert float(grads[0][0].abs().max()) > 0


def test_compiled_with_inductor_fullgraph_equals_eager(cuda_torch):
    torch = cuda_torch
    q, k, v = make(torch, (1, 2, 256, 128), "bfloat16", seed=2)

    def loss(q, k, v):
        return A.scaled_dot_product_attention(q, k, v, is_causal=True).float().square().sum()

    got = torch.compile(loss, fullgraph=True)(q, k, v)
    got.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    want = loss(q, k, v)
    want.backward()
    assert relative(got, want) < 1e-4        # inductor sums the 65536 squares in another order (f32)
    for a, x in zip(grads, (q, k, v)):
        assert relative(a, x.grad) < 1e-2      # the compiled graph may fuse the casts around the ops differently


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("d,seq", [(64, 256), (128, 256), (128, 320)])
@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_under_no_grad_matches_float64_in_the_inputs_dtype(cuda_torch, dtype, d, seq, causal):
    """torch.no_grad: the ::infer op (flash_attention.infer_launch: at D128 and S256 the ws ping-pong rung
    with the overlap, at S320 flash_fwd's own tiles), O in the inputs' dtype."""
    torch = cuda_torch
    q, k, v = make(torch, (2, 4, seq, d), dtype, seed=d + seq)
    with torch.no_grad():
        out = A.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert out.dtype == q.dtype and relative(out, ref) < TOL[dtype]


def test_forward_replays_in_a_cuda_graph(cuda_torch):
    torch = cuda_torch
    q, k, v = (x.detach() for x in make(torch, (1, 2, 128, 64), "bfloat16", seed=3))
    A.scaled_dot_product_attention(q, k, v)                 # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = A.scaled_dot_product_attention(q, k, v)
    for x in (q, k, v):
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert relative(out, ref) < TOL["bfloat16"]


@pytest.mark.parametrize("causal", [False, True])
def test_staged_backward_replays_in_a_cuda_graph(cuda_torch, causal):
    """The staged fused backward (B4 H16 S384 D128: its side stream forked from and joined to the capturing
    stream) captured in a CUDA graph, then replayed on new inputs and cotangents: against float64 autograd."""
    torch = cuda_torch
    ops = A.define_torch_ops()
    q, k, v = (x.detach() for x in make(torch, (4, 16, 384, 128), "bfloat16", seed=50 + causal))
    dout = torch.randn_like(q)
    o, lse = ops.forward(q, k, v, causal, 128 ** -0.5)
    ops.backward(dout, q, k, v, o, lse, causal, 128 ** -0.5)            # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = ops.forward(q, k, v, causal, 128 ** -0.5)
        grads = ops.backward(dout, q, k, v, o, lse, causal, 128 ** -0.5)
    for x in (q, k, v, dout):
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal).backward(dout.double())
    for got, r in zip(grads, x64):
        assert relative(got, r.grad) < TOL["bfloat16"]


def test_ops_pass_opcheck_on_cuda(cuda_torch):
    torch = cuda_torch
    ops = A.define_torch_ops()
    q, k, v = make(torch, (1, 1, 128, 64), "bfloat16", seed=4)
    torch.library.opcheck(ops.forward, (q, k, v, False, 0.125))
    torch.library.opcheck(ops.infer, (q.detach(), k.detach(), v.detach(), False, 0.125))
    o, lse = ops.forward(q.detach(), k.detach(), v.detach(), False, 0.125)
    dout = torch.randn_like(q.detach())
    torch.library.opcheck(ops.backward, (dout, q.detach(), k.detach(), v.detach(), o, lse, False, 0.125))


@pytest.mark.parametrize("deterministic", [False, True], ids=["fused", "three-kernels"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])       # D128 on sm_90: the lse_kernel / kernels_for variants
def test_jax_custom_vjp_on_gpu_matches_float64(jax, d, causal, deterministic):
    """The custom_vjp on the GPU, grouped-query, against float64: its backward the fused kernel in the torch
    op's form where that is picked (sm_90: S128 divides every pick's tiles), or the three kernels."""
    import dsl
    if not dsl.jax.ffi_available():
        pytest.fail("the JAX FFI handler was not built on the GPU machine (dsl.jax.ffi_available() is False)")
    jnp = jax.numpy
    assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()} on the GPU machine"
    rng = np.random.default_rng(5)
    q, k, v, w = (rng.standard_normal((1, 1 if x in "kv" else 2, 128, d)).astype(np.float32) for x in "qkvw")
    qb, kb, vb = (jnp.asarray(x, dtype=jnp.bfloat16) for x in (q, k, v))
    assert (A.fused.pick_form(d, 128, A.fwd.on_warpgroup_mma(), causal) is not None) == A.fwd.on_warpgroup_mma()
    attention = A.jax_attention(causal=causal, deterministic=deterministic)
    grads = jax.grad(lambda *x: jnp.sum(attention(*x) * w), argnums=(0, 1, 2))(qb, kb, vb)
    rounded = [np.asarray(x.astype(jnp.float32), np.float64) for x in (qb, kb, vb)]
    from test_attention_op_cpu import numpy_attention_grads
    _, want = numpy_attention_grads(*rounded, w.astype(np.float64), causal)
    for got, ref in zip(grads, want):
        got = np.asarray(got.astype(jnp.float32), np.float64)
        assert got.shape == ref.shape and np.abs(got - ref).max() / np.abs(ref).max() < 2e-2
