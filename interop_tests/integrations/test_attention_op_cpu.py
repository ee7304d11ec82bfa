"""examples/attention_op.py on the CPU simulator: the SDPA drop-in's output and gradients against torch
autograd of SDPA in float64, the torch ops under torch.library.opcheck and torch.compile(fullgraph=True),
typed refusals of what the kernels do not cover (before any kernel runs), and the JAX custom_vjp's
gradients against a float64 NumPy formula written here."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from bridge.errors import DTypeError, ShapeRelationError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import attention_op as A  # noqa: E402

# f32 inputs run the simulator's products in tf32 (10-bit mantissa): errors near 1e-3 of the largest value
TOL = 5e-3


def relative(a, b) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max())


def inputs(torch, shape, seed, grad=True):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).requires_grad_(grad) for _ in range(3)]


def test_eager_calls_skip_torch_library_and_give_the_ops_results_bit_for_bit(torch):
    """Eager mode on plain tensors: the implementations called directly (an autograd.Function for training,
    no torch.library dispatch); the same kernels as the registered ops, so the same bits, gradients too."""
    q, k, v = inputs(torch, (1, 2, 64, 64), seed=41)
    w = torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(5))
    assert A.eager_path((q, k, v))
    out = A.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert type(out.grad_fn).__name__ == "EagerAttentionBackward"
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    ops = A.define_torch_ops()
    o_op, _ = ops.forward(q, k, v, True, 64 ** -0.5)
    assert "EagerAttention" not in type(o_op.grad_fn).__name__
    assert torch.equal(out, o_op)
    for ours, theirs in zip(grads, torch.autograd.grad((o_op * w).sum(), (q, k, v))):
        assert torch.equal(ours, theirs)
    with torch.no_grad():
        assert torch.equal(A.scaled_dot_product_attention(q, k, v, is_causal=True),
                           ops.infer(q, k, v, True, 64 ** -0.5))
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=True)
    for ours, theirs in zip(grads, torch.autograd.grad((ref * w.double()).sum(), x64)):
        assert relative(ours.double(), theirs) < TOL


def test_the_eager_path_leaves_fake_vmapped_compiled_and_moded_calls_to_the_ops(torch, monkeypatch):
    """What torch.library's dispatch exists for stays on it: FakeTensors, vmap's wrappers, a torch function
    or dispatch mode, tracing for torch.compile."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    q, k, v = inputs(torch, (1, 2, 64, 64), seed=42, grad=False)
    assert A.eager_path((q, k, v))
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(x) for x in (q, k, v))
        assert not A.eager_path((fq, fk, fv))
        assert A.scaled_dot_product_attention(fq, fk, fv).shape == q.shape      # the fake implementation
    seen = []
    torch.vmap(lambda x: seen.append(A.eager_path((x, x, x))) or x)(q)
    assert seen == [False]

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class PassingFunctions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    for mode in (Passing(), PassingFunctions()):
        with mode:
            assert not A.eager_path((q, k, v))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not A.eager_path((q, k, v))


def test_the_eager_backward_refuses_a_second_derivative(torch):
    """As the op's backward (an op without a gradient of its own): create_graph's second pass raises."""
    q, k, v = inputs(torch, (1, 2, 64, 64), seed=43)
    out = A.scaled_dot_product_attention(q, k, v)
    (gq,) = torch.autograd.grad(out.sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_matches_sdpa_forward_and_backward_in_float64(torch, d, causal):
    F = torch.nn.functional
    q, k, v = inputs(torch, (1, 2, 64, d), seed=d + causal)
    w = torch.randn(1, 2, 64, d, generator=torch.Generator().manual_seed(7))    # a non-uniform upstream gradient
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal)
    (out * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*x64, is_causal=causal)
    (ref * w.double()).sum().backward()
    assert out.dtype == q.dtype and out.shape == q.shape
    assert relative(out.double(), ref) < TOL
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert relative(ours.double(), theirs.grad) < TOL


@pytest.mark.parametrize("dtype,tol", [("float32", TOL), ("bfloat16", 2e-2)])
def test_drop_in_without_gradients_runs_the_inference_op_in_the_inputs_dtype(torch, monkeypatch, dtype, tol):
    """No gradient wanted (inputs that need none, or torch.no_grad): ::infer, O written in the inputs'
    dtype by flash_fwd, no log-sum-exp forward; with gradients the training forward as before."""
    ran = []
    real = A.fwd.infer_launch
    monkeypatch.setattr(A.fwd, "infer_launch", lambda *a, **kw: ran.append("infer") or real(*a, **kw))
    real_lse = A.fwd.lse_launch
    monkeypatch.setattr(A.fwd, "lse_launch", lambda *a, **kw: ran.append("lse") or real_lse(*a, **kw))
    q, k, v = (x.to(getattr(torch, dtype)) for x in inputs(torch, (1, 2, 128, 64), seed=21, grad=False))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    out = A.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert ran == ["infer"] and out.dtype == q.dtype and out.shape == q.shape
    assert relative(out.double(), ref) < tol
    q.requires_grad_()
    with torch.no_grad():
        assert relative(A.scaled_dot_product_attention(q, k, v, is_causal=True).double(), ref) < tol
    assert ran == ["infer", "infer"]
    A.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert ran == ["infer", "infer", "lse"]


def test_training_path_keeps_the_inputs_dtype_from_forward_to_gradients(torch, monkeypatch):
    """bf16 inputs with gradients: the training forward writes O in bf16 (what the backward reads), the
    three-kernel backward (the simulator's) stores dQ, dK and dV in bf16 itself; all match float64 autograd."""
    stored = {}
    real = A.bwd.launch_args
    monkeypatch.setattr(A.bwd, "launch_args", lambda *a, **kw: stored.update(
        o=str(a[3].dtype), dq=str(a[7].dtype), dk=str(a[8].dtype), dv=str(a[9].dtype)) or real(*a, **kw))
    q, k, v = (x.detach().to(torch.bfloat16).requires_grad_() for x in inputs(torch, (1, 2, 64, 64), seed=31))
    w = torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(8))
    out = A.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out.float() * w).sum().backward()
    assert stored == {"o": "bfloat16", "dq": "bfloat16", "dk": "bfloat16", "dv": "bfloat16"}
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=True)
    (ref * w.double()).sum().backward()
    assert out.dtype == torch.bfloat16 and relative(out.double(), ref) < 2e-2
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert ours.dtype == torch.bfloat16 and relative(ours.double(), theirs.grad) < 2e-2


def test_the_fused_backward_is_picked_only_where_it_is_measured_faster(torch):
    fastest = A.fused.FASTEST[128]
    assert A.fused.pick_form(128, 256, wgmma=True) == fastest
    assert A.fused.pick_form(128, 320, wgmma=True) is None        # its 128-row key blocks do not divide 320
    causal128 = A.fused.FASTEST_CAUSAL[128]                        # D128 causal: heads in turn, no warp vectors
    assert causal128 != fastest and A.fused.pick_form(128, 256, wgmma=True, causal=True) == causal128
    assert A.fused.pick_form(64, 256, wgmma=True) == A.fused.FASTEST[64]    # D64: 8 warps, 128 key rows too
    assert A.fused.pick_form(64, 256, wgmma=True, causal=True) == A.fused.FASTEST[64]   # D64 causal: the same form
    assert A.fused.pick_form(64, 320, wgmma=True) is None         # 128-row key blocks do not divide 320
    assert A.fused.pick_form(64, 192, wgmma=True) is None         # D64: 128 query rows a step too
    assert A.fused.pick_form(64, 192, wgmma=True, causal=True) is None
    assert set(A.fused.FASTEST_CAUSAL) == {128}                    # causal's own pick at D128 only
    assert A.fused.pick_form(256, 256, wgmma=True) is None        # D256: the two kernels
    assert A.fused.pick_form(128, 256, wgmma=False) is None       # no warpgroup MMA: the two kernels
    q = torch.zeros((1, 1, 256, 128))
    assert A.backward_form(q, 256) is None                         # CPU tensors: the simulator's two kernels


@pytest.mark.parametrize("causal", [False, True])
def test_the_ops_fused_backward_matches_sdpa_in_float64(torch, monkeypatch, causal):
    """The op's backward as it runs on sm_90 at D128 (the fused kernel in its FASTEST form, 128 key rows
    a block on 8 warps, dQ added atomically), here on the simulator: grouped-query, against float64."""
    monkeypatch.setattr(A, "_on_warpgroup_mma", lambda t: True)
    launched, real = [], A.fused.launch_args
    monkeypatch.setattr(A.fused, "launch_args", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    F = torch.nn.functional
    g = torch.Generator().manual_seed(21 + causal)
    q, k, v = (torch.randn((1, h, 128, 128), generator=g).requires_grad_() for h in (2, 1, 1))
    assert A.backward_form(q, 128, causal) == (A.fused.FASTEST_CAUSAL[128] if causal else A.fused.FASTEST[128])
    w = torch.randn(q.shape, generator=g)
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    (out * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=True)
    (ref * w.double()).sum().backward()
    assert [kw["tiles"] for kw in launched] == [A.fused.WIDE]
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert ours.shape == theirs.shape and relative(ours.double(), theirs.grad) < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_the_ops_staged_backward_converts_every_dq_row_and_matches_sdpa_in_float64(torch, monkeypatch, causal):
    """The op's fused backward cut in two stages (here one head of three in the rest: TAIL_HEADS 1, so even
    full attention's unsplit CPU launch is cut), each stage's dQ rows converted by run_converting, which on CPU
    tensors runs both in order; against float64."""
    monkeypatch.setattr(A, "_on_warpgroup_mma", lambda t: True)
    monkeypatch.setattr(A.fused, "TAIL_HEADS", 1)
    staged, real = [], A.fused.staged_launch_args
    monkeypatch.setattr(A.fused, "staged_launch_args", lambda *a, **kw: staged.append(real(*a, **kw)) or staged[-1])
    g = torch.Generator().manual_seed(41 + causal)
    q, k, v = (torch.randn((1, 3, 128, 64), generator=g).requires_grad_() for _ in range(3))
    w = torch.randn(q.shape, generator=g)
    (A.scaled_dot_product_attention(q, k, v, is_causal=causal) * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    (torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal) * w.double()).sum().backward()
    assert [(st.done, len(st.rest)) for st in staged] == [(256, 1)]
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert relative(ours.double(), theirs.grad) < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_the_ops_d64_backward_takes_the_form_measured_fastest_for_causal_or_not(torch, monkeypatch, causal):
    """D64 on sm_90 (here the simulator): the 128-query-row step whose steps load the next step's lse and
    Delta rows, with lazy waits and early loads, each step's dQ added in the next, eight heads' key blocks in
    turns (FASTEST[64], causal or not: prefetch=2, heads_in_turn=8); each against float64 autograd."""
    monkeypatch.setattr(A, "_on_warpgroup_mma", lambda t: True)
    launched, real = [], A.fused.launch_args
    monkeypatch.setattr(A.fused, "launch_args", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    g = torch.Generator().manual_seed(31 + causal)
    q, k, v = (torch.randn((1, 1, 256, 64), generator=g).requires_grad_() for _ in range(3))
    w = torch.randn(q.shape, generator=g)
    (A.scaled_dot_product_attention(q, k, v, is_causal=causal) * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    (torch.nn.functional.scaled_dot_product_attention(*x64, is_causal=causal) * w.double()).sum().backward()
    assert launched == [{**A.fused.form_options(A.fused.FASTEST[64]), "group": 1}]
    assert launched[0]["tiles"] == A.fused.SQUARE and launched[0]["prefetch"] == 2
    assert launched[0]["heads_in_turn"] == 8
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert relative(ours.double(), theirs.grad) < TOL


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True])
def test_drop_in_grouped_query_attention_matches_sdpa_enable_gqa_in_float64(torch, kv_heads, causal):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(20 + kv_heads + causal)
    q, k, v = (torch.randn((2, 4, 64, 64) if x == "q" else (2, kv_heads, 64, 64), generator=g).requires_grad_()
               for x in "qkv")
    w = torch.randn(2, 4, 64, 64, generator=g)
    out = A.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    (out * w).sum().backward()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=True)
    (ref * w.double()).sum().backward()
    assert out.shape == q.shape and relative(out.double(), ref) < TOL
    for ours, theirs in zip((q.grad, k.grad, v.grad), x64):
        assert ours.shape == theirs.shape
        assert relative(ours.double(), theirs.grad) < TOL


def test_grouped_torch_ops_pass_opcheck(torch):
    ops = A.define_torch_ops()
    g = torch.Generator().manual_seed(9)
    q = torch.randn(1, 4, 64, 64, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, 64, 64, generator=g, requires_grad=True) for _ in range(2))
    torch.library.opcheck(ops.forward, (q, k, v, False, 0.125))
    o, lse = ops.forward(q.detach(), k.detach(), v.detach(), False, 0.125)
    dout = torch.randn(1, 4, 64, 64, generator=g)
    torch.library.opcheck(ops.backward, (dout, q.detach(), k.detach(), v.detach(), o, lse, False, 0.125))
    dq, dk, dv = ops.backward(dout, q.detach(), k.detach(), v.detach(), o, lse, False, 0.125)
    assert dq.shape == q.shape and dk.shape == dv.shape == k.shape


def test_scale_argument_is_honoured(torch):
    F = torch.nn.functional
    q, k, v = inputs(torch, (1, 1, 64, 64), seed=3, grad=False)
    out = A.scaled_dot_product_attention(q, k, v, scale=0.3)
    ref = F.scaled_dot_product_attention(*(x.double() for x in (q, k, v)), scale=0.3)
    assert relative(out.double(), ref) < TOL
    default = F.scaled_dot_product_attention(*(x.double() for x in (q, k, v)))
    assert relative(out.double(), default) > 10 * TOL          # a different scale gives a different answer


def test_torch_ops_pass_opcheck(torch):
    ops = A.define_torch_ops()
    q, k, v = inputs(torch, (1, 1, 64, 64), seed=4)
    torch.library.opcheck(ops.forward, (q, k, v, True, 0.125))
    torch.library.opcheck(ops.infer, (q.detach(), k.detach(), v.detach(), True, 0.125))
    o, lse = ops.forward(q.detach(), k.detach(), v.detach(), True, 0.125)
    dout = torch.randn_like(q.detach())
    torch.library.opcheck(ops.backward, (dout, q.detach(), k.detach(), v.detach(), o, lse, True, 0.125))


def test_torch_compile_fullgraph_traces_forward_and_backward(torch):
    q, k, v = inputs(torch, (1, 2, 64, 64), seed=5)

    def loss(q, k, v):
        return A.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")   # no graph break, autograd traced
    got = compiled(q, k, v)
    got.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    want = loss(q, k, v)
    want.backward()
    assert relative(got.detach(), want.detach()) < 1e-6
    for a, x in zip(grads, (q, k, v)):
        assert relative(a, x.grad) < 1e-6


def test_fullgraph_compile_as_the_first_call_in_a_fresh_process(torch):
    """The ops exist once the module is imported: Dynamo never has to trace their registration (it
    refuses to, so a first call inside torch.compile(fullgraph=True) used to fail)."""
    import subprocess
    import textwrap
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(A.__file__).parent)!r})
        import torch
        import attention_op as A
        g = torch.Generator().manual_seed(9)
        q, k, v = (torch.randn((1, 2, 64, 64), generator=g) for _ in range(3))
        f = torch.compile(lambda q, k, v: A.scaled_dot_product_attention(q, k, v).sum(), fullgraph=True,
                          backend="eager")
        got = float(f(q, k, v))
        want = float(torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double()).sum())
        print(abs(got - want) <= 1e-3 * max(1.0, abs(want)))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "True", run.stdout


def _refused(torch, monkeypatch, error, match, call):
    """`call()` raises `error` naming the argument, and no kernel ran (every launch path is poisoned)."""
    def boom(*a, **k):
        raise AssertionError("a kernel ran although the call should have been refused")
    monkeypatch.setattr(A, "_run", boom)
    with pytest.raises(error, match=match):
        call()


def test_uncovered_arguments_are_refused_before_any_kernel_runs(torch, monkeypatch):
    q, k, v = inputs(torch, (1, 2, 64, 64), seed=6, grad=False)
    sdpa = A.scaled_dot_product_attention
    cases = [
        (A.UnsupportedAttentionError, "attn_mask", lambda: sdpa(q, k, v, attn_mask=torch.ones(64, 64, dtype=torch.bool))),
        (A.UnsupportedAttentionError, "dropout_p", lambda: sdpa(q, k, v, dropout_p=0.1)),
        (ShapeRelationError, "needs enable_gqa=True", lambda: sdpa(q, k[:, :1], v[:, :1])),
        (ShapeRelationError, "key: expected shape .*heads dividing 2", lambda: sdpa(q, torch.randn(1, 3, 64, 64),
                                                                                    torch.randn(1, 3, 64, 64),
                                                                                    enable_gqa=True)),
        (ShapeRelationError, "value: expected shape", lambda: sdpa(q, k[:, :1], v, enable_gqa=True)),
        (A.UnsupportedAttentionError, "head dim 96", lambda: sdpa(*(torch.randn(1, 2, 64, 96) for _ in range(3)))),
        (A.UnsupportedAttentionError, "sequence length 100", lambda: sdpa(*(torch.randn(1, 2, 100, 64) for _ in range(3)))),
        (ShapeRelationError, "key: expected shape", lambda: sdpa(q, k[:, :, :32], v)),
        (ShapeRelationError, "query: expected", lambda: sdpa(q[0], k[0], v[0])),
        (DTypeError, "value: expected query's dtype", lambda: sdpa(q, k, v.double())),
    ]
    for error, match, call in cases:
        _refused(torch, monkeypatch, error, match, call)
    err = pytest.raises(A.UnsupportedAttentionError, sdpa, q, k, v, dropout_p=0.5).value
    assert isinstance(err, ValueError) and err.arg_name == "dropout_p"


def numpy_attention_grads(q, k, v, g, causal):
    """Float64 O and (dQ, dK, dV) of softmax(Q K^T / sqrt(d)) V for (B, H, S, D) arrays and upstream g;
    k and v with H_kv heads each serve H / H_kv query heads (their gradients summed over the group)."""
    d, group = q.shape[-1], q.shape[1] // k.shape[1]
    if group > 1:
        o, (dq, dk, dv) = numpy_attention_grads(q, np.repeat(k, group, 1), np.repeat(v, group, 1), g, causal)
        b, hk, s = k.shape[:3]
        return o, (dq, dk.reshape(b, hk, group, s, d).sum(2), dv.reshape(b, hk, group, s, d).sum(2))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return p @ v, (ds @ k / np.sqrt(d), np.swapaxes(ds, -1, -2) @ q / np.sqrt(d), np.swapaxes(p, -1, -2) @ g)


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True])
def test_jax_custom_vjp_gradients_match_float64(cpu_jax, causal, kv_heads):
    jnp = cpu_jax.numpy
    rng = np.random.default_rng(11 + causal)
    q, k, v, w = (rng.standard_normal((1, kv_heads if x in "kv" else 2, 64, 64)).astype(np.float32) for x in "qkvw")
    attention = A.jax_attention(causal)
    out = np.asarray(attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)))
    grads = cpu_jax.grad(lambda *x: jnp.sum(attention(*x) * w), argnums=(0, 1, 2))(q, k, v)
    o64, want = numpy_attention_grads(*(x.astype(np.float64) for x in (q, k, v, w)), causal)
    assert np.abs(out - o64).max() / np.abs(o64).max() < TOL
    for got, ref in zip(grads, want):
        assert np.abs(np.asarray(got) - ref).max() / np.abs(ref).max() < TOL


def _recording_kernel_calls(monkeypatch) -> list[str]:
    """The names of the kernels jax_attention wraps with dsl.jax.kernel_call, in order."""
    import dsl
    names, real = [], dsl.jax.kernel_call
    monkeypatch.setattr(dsl.jax, "kernel_call", lambda kernel, **kw: names.append(kernel.name) or real(kernel, **kw))
    return names


@pytest.mark.parametrize("causal", [False, True])
def test_jax_backward_is_the_torch_ops_fused_kernel_where_that_is_picked(cpu_jax, monkeypatch, causal):
    """With warpgroup MMA (sm_90; here the simulator) the custom_vjp's backward runs the fused kernel in the
    torch op's form at D128 (FASTEST, FASTEST_CAUSAL: dQ added into the preprocess's zeroed buffer, passed
    through by mutates=), grouped-query, against float64."""
    monkeypatch.setattr(A.fwd, "on_warpgroup_mma", lambda *a, **k: True)
    names = _recording_kernel_calls(monkeypatch)
    jnp = cpu_jax.numpy
    rng = np.random.default_rng(31 + causal)
    q, k, v, w = (rng.standard_normal((1, 1 if x in "kv" else 2, 128, 128)).astype(np.float32) for x in "qkvw")
    attention = A.jax_attention(causal, deterministic=False)
    grads = cpu_jax.grad(lambda *x: jnp.sum(attention(*x) * w), argnums=(0, 1, 2))(q, k, v)
    assert names[-2:] == ["attn_bwd_preprocess_zero", "flash_bwd_fused"], names
    _, want = numpy_attention_grads(*(x.astype(np.float64) for x in (q, k, v, w)), causal)
    for got, ref in zip(grads, want):
        assert np.abs(np.asarray(got) - ref).max() / np.abs(ref).max() < TOL


def test_jax_backward_keeps_the_three_kernels_when_determinism_is_asked(cpu_jax, monkeypatch):
    """deterministic=True, or XLA_FLAGS asking XLA's ops for determinism, keeps the three kernels (no atomics:
    bit for bit repeatable) where the fused one would be picked."""
    monkeypatch.setattr(A.fwd, "on_warpgroup_mma", lambda *a, **k: True)
    jnp = cpu_jax.numpy
    q = np.random.default_rng(5).standard_normal((1, 1, 128, 64)).astype(np.float32)
    for kwargs, flags in (({"deterministic": True}, ""), ({}, "--xla_gpu_exclude_nondeterministic_ops=true"),
                          ({}, "--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true")):
        monkeypatch.setenv("XLA_FLAGS", flags)
        names = _recording_kernel_calls(monkeypatch)
        grads = cpu_jax.grad(lambda x: jnp.sum(A.jax_attention(False, **kwargs)(x, x, x)))(q)
        assert np.isfinite(np.asarray(grads)).all()
        assert "flash_bwd_fused" not in names and "attn_bwd_preprocess" in names, names
