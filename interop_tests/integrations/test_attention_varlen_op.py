"""examples/attention_varlen_op.py: the varlen_attn drop-in's output and gradients against torch autograd of
SDPA in float64, one sequence at a time (CPU simulator; on the GPU in bf16, and against torch's own
varlen_attn where this torch has it), the ops under torch.library.opcheck and torch.compile(fullgraph=True),
the JAX custom_vjp on the same kernels, and typed refusals of what the kernels do not cover, before any
kernel runs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from bridge.errors import DTypeError, ShapeRelationError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import attention_varlen_op as V  # noqa: E402

TOL = 5e-3          # f32 inputs: tf32 products in the simulator


def packed(torch, lengths, heads, kv_heads, d, device="cpu", dtype=None, seed=0):
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)
    g = torch.Generator(device=device).manual_seed(seed)
    total = int(sum(lengths))
    q, k, v = (torch.randn((total, n, d), generator=g, device=device, dtype=dtype or torch.float32).requires_grad_()
               for n in (heads, kv_heads, kv_heads))
    return cu, q, k, v


def per_sequence64(torch, q, k, v, w, cu, causal):
    """Float64 O and (dQ, dK, dV) of sum(O * w), SDPA one sequence at a time (enable_gqa for fewer heads)."""
    F = torch.nn.functional
    outs = [torch.zeros(x.shape, dtype=torch.float64, device=x.device) for x in (q, q, k, v)]
    for a, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if e == a:
            continue
        x64 = [x.detach()[a:e].double().transpose(0, 1).requires_grad_() for x in (q, k, v)]
        ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
        (ref * w[a:e].double().transpose(0, 1)).sum().backward()
        for whole, part in zip(outs, [ref.detach()] + [x.grad for x in x64]):
            whole[a:e] = part.transpose(0, 1)
    return outs


def relative(a, b) -> float:
    return float((a.detach().double() - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_matches_sdpa_per_sequence_in_float64(torch, kv_heads, causal):
    cu, q, k, v = packed(torch, [37, 1, 0, 90, 64], 4, kv_heads, 64, seed=kv_heads + causal)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(3))
    out = V.varlen_attn(q, k, v, cu, cu, 90, 90, window_size=(-1, 0) if causal else (-1, -1),
                        enable_gqa=kv_heads != 4)
    (out * w).sum().backward()
    want = per_sequence64(torch, q, k, v, w, cu, causal)
    assert out.dtype == q.dtype and out.shape == q.shape
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (out, q.grad, k.grad, v.grad), want):
        assert got.shape == ref.shape, name
        assert relative(got, ref) < TOL, name


def test_bf16_training_keeps_the_inputs_dtype_from_output_to_gradients(torch, monkeypatch):
    """O stored in bf16 by the forward and read so by the backward, dQ, dK and dV stored in bf16 by its kernels
    (no conversions after); all four match float64 per sequence within bf16's bounds."""
    stored = {}
    real = V.vl.backward_launch_args
    monkeypatch.setattr(V.vl, "backward_launch_args", lambda *a, **kw: stored.update(
        o=str(a[3].dtype), dq=str(a[9].dtype), dk=str(a[10].dtype), dv=str(a[11].dtype)) or real(*a, **kw))
    cu, q, k, v = packed(torch, [37, 90], 2, 1, 64, dtype=torch.bfloat16, seed=5)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))
    out = V.varlen_attn(q, k, v, cu, cu, 90, 90, window_size=(-1, 0), enable_gqa=True)
    (out.float() * w).sum().backward()
    assert stored == {"o": "bfloat16", "dq": "bfloat16", "dk": "bfloat16", "dv": "bfloat16"}
    want = per_sequence64(torch, q, k, v, w, cu, True)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (out, q.grad, k.grad, v.grad), want):
        assert got.dtype == torch.bfloat16, name
        assert relative(got, ref) < 2e-2, name


def test_cu_seq_k_equal_to_cu_seq_q_is_accepted_and_none_means_the_same(torch):
    cu, q, k, v = packed(torch, [20, 44], 2, 2, 64, seed=1)
    a = V.varlen_attn(q, k, v, cu, cu.clone(), 44, 44)
    b = V.varlen_attn(q, k, v, cu, None, 44, 44)
    assert torch.equal(a, b)


def test_ops_pass_opcheck(torch):
    ops = V.define_torch_ops()
    cu, q, k, v = packed(torch, [30, 50], 4, 2, 64, seed=2)
    q, k, v = (x.detach() for x in (q, k, v))
    torch.library.opcheck(ops.varlen_forward, (q, k, v, cu, True, 0.125))
    o, lse = ops.varlen_forward(q, k, v, cu, True, 0.125)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))
    torch.library.opcheck(ops.varlen_backward, (dout, q, k, v, o, lse, cu, True, 0.125))
    dq, dk, dv = ops.varlen_backward(dout, q, k, v, o, lse, cu, True, 0.125)
    assert dq.shape == q.shape and dk.shape == dv.shape == k.shape


def test_torch_compile_fullgraph_traces_forward_and_backward(torch):
    cu, q, k, v = packed(torch, [40, 24], 2, 2, 64, seed=5)

    def loss(q, k, v):
        return V.varlen_attn(q, k, v, cu, cu, 40, 40, window_size=(-1, 0)).square().sum()

    got = torch.compile(loss, fullgraph=True, backend="aot_eager")(q, k, v)
    got.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    want = loss(q, k, v)
    want.backward()
    assert relative(got, want.detach().double()) < 1e-6
    for a, x in zip(grads, (q, k, v)):
        assert relative(a, x.grad.double()) < 1e-6


def test_uncovered_arguments_are_refused_before_any_kernel_runs(torch, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a kernel ran although the call should have been refused")
    monkeypatch.setattr(V.op, "_run", boom)
    cu, q, k, v = packed(torch, [30, 34], 4, 2, 64, seed=6)
    f = V.varlen_attn
    i32 = torch.int32
    cases = [
        (V.UnsupportedAttentionError, "window_size", lambda: f(q, k, v, cu, cu, 34, 34, window_size=(8, 0), enable_gqa=True)),
        (V.UnsupportedAttentionError, "return_aux", lambda: f(q, k, v, cu, cu, 34, 34, return_aux=object(), enable_gqa=True)),
        (V.UnsupportedAttentionError, "seqused_k", lambda: f(q, k, v, cu, cu, 34, 34, seqused_k=cu[1:], enable_gqa=True)),
        (V.UnsupportedAttentionError, "block_table", lambda: f(q, k, v, cu, cu, 34, 34, block_table=cu, enable_gqa=True)),
        (V.UnsupportedAttentionError, "cu_seq_k: expected the queries' offsets",
         lambda: f(q, k, v, cu, torch.tensor([0, 20, 64], dtype=i32), 34, 34, enable_gqa=True)),
        (ShapeRelationError, "needs enable_gqa=True", lambda: f(q, k, v, cu, cu, 34, 34)),
        (ShapeRelationError, "value: expected shape", lambda: f(q, k, v[:, :1], cu, cu, 34, 34, enable_gqa=True)),
        (ShapeRelationError, "query: expected", lambda: f(q[0], k, v, cu, cu, 34, 34, enable_gqa=True)),
        (DTypeError, "key: expected query's dtype", lambda: f(q, k.double(), v, cu, cu, 34, 34, enable_gqa=True)),
        (V.UnsupportedAttentionError, "head dim 96",
         lambda: f(*(torch.randn(64, 2, 96) for _ in range(3)), cu, cu, 34, 34)),
        (ShapeRelationError, "cu_seqlens: expected offsets rising from 0 to the 64",
         lambda: f(q, k, v, torch.tensor([0, 40, 30, 64], dtype=i32), None, 40, 40, enable_gqa=True)),
        (ShapeRelationError, "cu_seqlens: expected offsets rising from 0 to the 64",
         lambda: f(q, k, v, torch.tensor([0, 30, 60], dtype=i32), None, 40, 40, enable_gqa=True)),
        (DTypeError, "cu_seqlens: expected int32", lambda: f(q, k, v, cu.long(), None, 34, 34, enable_gqa=True)),
    ]
    for error, match, call in cases:
        with pytest.raises(error, match=match):
            call()


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_drop_in_matches_sdpa_per_sequence_and_torch_varlen_attn(torch, causal):
    """bf16 on the H200: ours against float64 autograd one sequence at a time (bound 1e-2, as the
    fixed-length op's), and, where this torch has it, against torch's own varlen_attn (FlashAttention)."""
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    cu, q, k, v = packed(torch, [300, 1, 1000, 64, 517], 8, 2, 128, device="cuda", dtype=torch.bfloat16, seed=7)
    w = torch.randn(q.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(8))
    window = (-1, 0) if causal else (-1, -1)
    out = V.varlen_attn(q, k, v, cu, cu, 1000, 1000, window_size=window, enable_gqa=True)
    (out.float() * w).sum().backward()
    want = per_sequence64(torch, q, k, v, w, cu, causal)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (out, q.grad, k.grad, v.grad), want):
        assert relative(got, ref) < 1e-2, name
    try:                                # torch's own varlen_attn, where this torch has it with these arguments
        from torch.nn.attention.varlen import varlen_attn
        theirs = varlen_attn(q.detach(), k.detach(), v.detach(), cu, cu, 1000, 1000, window_size=window,
                             enable_gqa=True)
    except (ImportError, TypeError):
        return                          # an older torch: the float64 reference above is the check
    assert relative(out, theirs.double()) < 2e-2


def test_bad_offsets_under_torch_compile_are_refused_when_the_op_runs(torch, monkeypatch):
    """Tracing cannot read the offsets' values; the op reads them before any launch and refuses."""
    def boom(*a, **k):
        raise AssertionError("a kernel ran although the call should have been refused")
    _, q, k, v = packed(torch, [30, 34], 2, 2, 64, seed=9)
    bad = torch.tensor([0, 40, 30, 64], dtype=torch.int32)
    f = torch.compile(lambda q, k, v: V.varlen_attn(q, k, v, bad, None, 40, 40), fullgraph=True, backend="aot_eager")
    monkeypatch.setattr(V.op, "_run", boom)
    with pytest.raises(ShapeRelationError, match="cu_seqlens: expected offsets rising from 0 to the 64"):
        f(q.detach(), k.detach(), v.detach())


@pytest.mark.parametrize("causal", [False, True])
def test_jax_custom_vjp_matches_sdpa_per_sequence_in_float64(torch, cpu_jax, causal):
    """The same kernels under jax.custom_vjp (jitted, CPU simulator): O and the gradients of sum(O * w)."""
    jnp = cpu_jax.numpy
    cu, q, k, v = packed(torch, [37, 1, 90], 4, 2, 64, seed=11 + causal)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(12))
    attention = V.jax_varlen_attention(causal)
    qj, kj, vj, wj = (jnp.asarray(x.detach().numpy()) for x in (q, k, v, w))
    cuj = jnp.asarray(cu.numpy())
    out = attention(qj, kj, vj, cuj)
    grads = cpu_jax.grad(lambda a, b, c: jnp.sum(attention(a, b, c, cuj) * wj), argnums=(0, 1, 2))(qj, kj, vj)
    want = per_sequence64(torch, q, k, v, w, cu, causal)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (out, *grads), want):
        assert got.shape == tuple(ref.shape), name
        assert relative(torch.from_numpy(np.array(got)), ref) < TOL, name


@pytest.mark.gpu
def test_gpu_forward_replays_in_a_cuda_graph_with_new_lengths(torch):
    """Nothing reads the device offsets on the host, so the op captures into a CUDA graph; replaying it
    after new inputs AND new offsets (same total) computes the new batch."""
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    cu, q, k, v = packed(torch, [100, 28], 2, 2, 64, device="cuda", dtype=torch.bfloat16, seed=13)
    q, k, v = (x.detach() for x in (q, k, v))
    V.varlen_attn(q, k, v, cu, cu, 100, 100)               # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = V.varlen_attn(q, k, v, cu, cu, 100, 100)
    for x in (q, k, v):
        x.copy_(torch.randn_like(x))
    cu.copy_(torch.tensor([0, 50, 60, 128], dtype=torch.int32, device="cuda")[[0, 1, 3]])   # lengths 50, 78
    graph.replay()
    torch.cuda.synchronize()
    w = torch.zeros(q.shape, device="cuda")
    want = per_sequence64(torch, q, k, v, w, cu, False)[0]
    assert relative(out, want) < 1e-2


def _nested(torch, values, cu):
    return torch.nested.nested_tensor_from_jagged(values, cu.long()).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_drop_in_takes_jagged_nested_tensors_and_matches_float64(torch, causal):
    """attention_op.scaled_dot_product_attention with (B, H, j, D) jagged nested tensors runs the varlen
    kernels: a nested result of the same offsets, and gradients into the values, against float64 SDPA
    one sequence at a time. Causal too, which torch's own nested SDPA refuses."""
    import attention_op as A
    cu, q, k, v = packed(torch, [37, 1, 90], 4, 2, 64, seed=21 + causal)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(22))
    out = A.scaled_dot_product_attention(*(_nested(torch, x, cu) for x in (q, k, v)), is_causal=causal,
                                         enable_gqa=True)
    assert out.is_nested and out.shape[:2] == (3, 4) and out.dtype == q.dtype
    values = out.transpose(1, 2).values()
    (values * w).sum().backward()
    want = per_sequence64(torch, q, k, v, w, cu, causal)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (values, q.grad, k.grad, v.grad), want):
        assert relative(got, ref) < TOL, name


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")   # the strided one made on purpose
def test_nested_inputs_the_kernels_do_not_cover_are_refused_before_any_kernel_runs(torch, monkeypatch):
    import attention_op as A

    def boom(*a, **k):
        raise AssertionError("a kernel ran although the call should have been refused")
    monkeypatch.setattr(V.op, "_run", boom)
    cu, q, k, v = packed(torch, [30, 34], 2, 2, 64, seed=23)
    nq, nk, nv = (_nested(torch, x.detach(), cu) for x in (q, k, v))
    other = _nested(torch, k.detach(), torch.tensor([0, 20, 64], dtype=torch.int32))
    strided = torch.nested.nested_tensor([torch.randn(2, 30, 64), torch.randn(2, 34, 64)])
    dense = torch.randn(2, 2, 32, 64)
    cases = [(other, nv, "key: expected the query's offsets"),
             (dense, nv, "key: expected a jagged nested tensor"),
             (strided, nv, "key: expected a jagged nested tensor")]
    for key, value, match in cases:
        with pytest.raises(V.UnsupportedAttentionError, match=match):
            A.scaled_dot_product_attention(nq, key, value)
    with pytest.raises(V.UnsupportedAttentionError, match="attn_mask"):
        A.scaled_dot_product_attention(nq, nk, nv, attn_mask=torch.ones(1, dtype=torch.bool))


@pytest.mark.gpu
def test_gpu_nested_drop_in_matches_torch_nested_sdpa(torch):
    """bf16 jagged nested tensors on the H200: ours against torch's own nested SDPA (non-causal, which
    it supports) on the same inputs."""
    import attention_op as A
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    cu, q, k, v = packed(torch, [300, 1, 700, 64], 8, 8, 128, device="cuda", dtype=torch.bfloat16, seed=24)
    nested = [_nested(torch, x.detach(), cu) for x in (q, k, v)]
    ours = A.scaled_dot_product_attention(*nested).transpose(1, 2).values()
    theirs = torch.nn.functional.scaled_dot_product_attention(*nested).transpose(1, 2).values()
    assert relative(ours, theirs.double()) < 2e-2


@pytest.mark.gpu
def test_gpu_jax_custom_vjp_matches_sdpa_per_sequence_in_float64(torch, jax):
    """jax_varlen_attention on the GPU (the XLA FFI handler), bf16: O and the gradients of sum(O * w)
    against float64 SDPA one sequence at a time (on the same rounded inputs, on the CPU)."""
    import dsl
    if not dsl.jax.ffi_available():
        pytest.fail("the JAX FFI handler was not built on the GPU machine (dsl.jax.ffi_available() is False)")
    assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()} on the GPU machine"
    jnp = jax.numpy
    cu, q, k, v = packed(torch, [100, 1, 157], 4, 2, 128, seed=31)
    w = torch.randn(q.shape, generator=torch.Generator().manual_seed(32))
    qj, kj, vj = (jnp.asarray(x.detach().numpy(), dtype=jnp.bfloat16) for x in (q, k, v))
    wj, cuj = jnp.asarray(w.numpy()), jnp.asarray(cu.numpy())
    attention = V.jax_varlen_attention(causal=True)
    out = attention(qj, kj, vj, cuj)
    grads = jax.grad(lambda a, b, c: jnp.sum(attention(a, b, c, cuj) * wj), argnums=(0, 1, 2))(qj, kj, vj)
    rounded = [torch.from_numpy(np.array(x.astype(jnp.float32))).requires_grad_() for x in (qj, kj, vj)]
    want = per_sequence64(torch, *rounded, w, cu, True)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (out, *grads), want):
        assert relative(torch.from_numpy(np.array(got.astype(jnp.float32))), ref) < 2e-2, name
