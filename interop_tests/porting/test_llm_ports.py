"""The DSL ports of cpp/kernels/llm/ (examples/llm_kernels/): each compiles to PTX that ptxas accepts
for sm_80 and sm_90, matches the NumPy float64 references of llm_kit on the simulator at sizes that
are not block multiples (rows not a multiple of the warps a block, channels not a multiple of 32,
lengths not a multiple of the chunk), has a contract `check_compatible` accepts against its C++
kernel's, and writes its outputs without `unsafe` wherever a thread, warp or block owns them (only
shared-memory scratch and atomics need it). On the GPU (marked gpu) every port runs beside its C++
kernel through `bridge.testing.assert_equivalent` with full coverage of every written output, and a
launch with a wrong dtype is refused with the poisoned output left unchanged."""
from __future__ import annotations

import ast
import inspect
import math
import re

import ml_dtypes
import numpy as np
import pytest

import bridge
import bridge.testing
import examples.llm_kernels as P
from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.port import NoCompilerError, load_cpp_contract
from examples.llm_kernels import global_norm
from interop_tests.cpp import llm_kit

BF16 = ml_dtypes.bfloat16
SOURCES = llm_kit.SOURCES
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")


def _ln(rng, n, c):
    x = (rng.standard_normal((n, c)) * 2.0 + 0.5).astype(np.float32)
    return x, rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)


def _close(got, ref, rtol, atol=0.0):
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), ref, rtol=rtol, atol=atol, equal_nan=True)


def sample_args(name: str, rng) -> tuple:
    """A small launch of port `name` (sizes off every block multiple), outputs poisoned with NaN."""
    n, c, nan = 37, 100, np.nan
    x, w, b = _ln(rng, n, c)
    if name == "layernorm_forward":
        return np.full((n, c), nan, np.float32), np.full(n, nan, np.float32), np.full(n, nan, np.float32), x, w, b
    if name == "layernorm_backward":
        _, mean, rstd = llm_kit.layernorm_forward(x, w, b)
        return (rng.standard_normal((n, c)).astype(np.float32), np.zeros(c, np.float32), np.zeros(c, np.float32),
                rng.standard_normal((n, c)).astype(np.float32), x, w, mean.astype(np.float32), rstd.astype(np.float32))
    if name.startswith("gelu") or name == "residual_forward":
        dt = BF16 if name.endswith("bf16") else np.float32
        k = 8 * 67 + 5
        ins = [(rng.standard_normal(k) * 2.5).astype(dt) for _ in range(2 if "backward" in name or "res" in name else 1)]
        return (np.full(k, nan, dt), *ins)
    if name in ("encoder_forward", "encoder_backward"):
        B, T, C, V, max_t = 3, 17, 37, 11, 20
        ids = rng.integers(0, V, (B, T)).astype(np.int32)
        ids[0, 0], ids[-1, -1], ids[1, :] = -1, V, ids[0, 1]   # invalid tokens, a repeated one
        if name == "encoder_forward":
            return (np.full((B, T, C), 7.0, np.float32), ids, rng.standard_normal((V, C)).astype(np.float32),
                    rng.standard_normal((max_t, C)).astype(np.float32))
        return (rng.standard_normal((V, C)).astype(np.float32), rng.standard_normal((max_t, C)).astype(np.float32),
                rng.standard_normal((B, T, C)).astype(np.float32), ids)
    if name.startswith("crossentropy"):
        N, V, Vp = 5, 1100, 1111
        logits = (rng.standard_normal((N, Vp)) * 4).astype(np.float32)
        logits[::2] += np.float32(300.0)                # exp(300) overflows f32: the max must be shifted out
        logits[:, V:] = np.float32(1e4)                 # padding columns: ignored
        targets = rng.integers(0, V, N).astype(np.int32)
        targets[1] = V                                  # outside [0, V): NaN
        if name == "crossentropy_forward":
            return np.full(N, 7.0, np.float32), logits, targets, np.int32(V)
        return (np.full((N, Vp), 7.0, np.float32), logits, rng.uniform(0.1, 2.0, N).astype(np.float32), targets,
                np.int32(V))
    if name == "adamw_update":
        k = 1000
        hp = [np.float32(v) for v in (3e-4, 0.9, 0.95, 1e-8, 0.1, 0.5)]
        return (rng.standard_normal(k).astype(np.float32), (rng.standard_normal(k) * 0.1).astype(np.float32),
                rng.uniform(0.0, 0.05, k).astype(np.float32), rng.standard_normal(k).astype(np.float32), *hp, np.int32(3))
    if name == "global_norm_squared":
        values = rng.standard_normal(3 * global_norm.TILE + 77).astype(np.float32)
        return np.array([1.5], np.float32), tile.partition(values, (global_norm.TILE,))
    raise KeyError(name)


def reference(name: str, args: tuple) -> list:
    """Expected outputs (float64) of port `name` on fresh `args`, from llm_kit."""
    a = [np.asarray(v) if isinstance(v, np.ndarray) else v for v in args]
    if name == "layernorm_forward":
        return list(llm_kit.layernorm_forward(a[3], a[4], a[5]))
    if name == "layernorm_backward":
        d, dw, db = llm_kit.layernorm_backward(a[3], a[4], a[5], a[6], a[7])
        return [a[0] + d, a[1] + dw, a[2] + db]
    if name == "gelu_forward_bf16" or name == "gelu_forward_f32":
        return [llm_kit.gelu(a[1])]
    if name.startswith("gelu_backward"):
        return [llm_kit.gelu_grad(a[1]) * llm_kit.f64(a[2])]
    if name == "residual_forward":
        return [(a[1].astype(np.float64) + a[2]).astype(np.float32)]
    if name == "encoder_forward":
        return [llm_kit.encoder_forward(a[1], a[2], a[3]).astype(np.float32)]   # one f32 rounding
    if name == "encoder_backward":
        dwte, dwpe = llm_kit.encoder_backward(a[2], a[3], a[0].shape[0], a[1].shape[0])
        return [a[0] + dwte, a[1] + dwpe]
    if name == "crossentropy_forward":
        return [llm_kit.crossentropy_forward(a[1], a[2], int(a[3]))]
    if name == "crossentropy_backward":
        return [llm_kit.crossentropy_backward(a[1], a[2], a[3], int(a[4]))]
    if name == "adamw_update":
        hp = dict(zip(("lr", "beta1", "beta2", "eps", "weight_decay", "grad_scale"), map(float, a[4:10])))
        return list(llm_kit.adamw(a[0], a[1], a[2], a[3], t=int(a[10]), **hp))
    if name == "global_norm_squared":
        return [a[0] + np.sum(llm_kit.f64(args[1].array) ** 2)]
    raise KeyError(name)


# (rtol, atol) per port; default (1e-5, 1e-6). bf16: one rounding (2^-8) plus f32 math; gelu' cancels near -3.
TOL = {"gelu_forward_f32": (1e-5, 2e-6), "gelu_backward_f32": (1e-5, 2e-6), "gelu_forward_bf16": (2.0**-7, 2e-6),
       "gelu_backward_bf16": (2.0**-7, 2e-6), "residual_forward": (0, 0), "encoder_forward": (0, 0), "layernorm_backward": (1e-4, 1e-5), "encoder_backward": (1e-6, 1e-6),
       "crossentropy_forward": (1e-5, 1e-5), "crossentropy_backward": (1e-4, 1e-7), "global_norm_squared": (1e-6, 0)}


@pytest.mark.parametrize("name", list(P.KERNELS))
def test_port_matches_the_float64_reference_on_the_simulator(name):
    args = sample_args(name, np.random.default_rng(28))
    expected = reference(name, tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
    P.port(name).simulate(*args)
    outputs = [a for a in args if isinstance(a, np.ndarray)][:len(expected)]
    rtol, atol = TOL.get(name, (1e-5, 1e-6))
    for got, ref in zip(outputs, expected):
        _close(got, ref, rtol, atol)


@pytest.mark.parametrize("name", list(P.KERNELS))
def test_port_contract_is_compatible_with_the_cpp_contract(name):
    try:
        cpp = load_cpp_contract(SOURCES / f"{P.KERNELS[name]}.cu", name)
    except NoCompilerError as e:
        pytest.skip(str(e))
    options = {"tile_shapes": {"values": (global_norm.TILE,)}} if name == "global_norm_squared" else None
    bridge.testing.check_compatible(cpp, P.port(name), options=options)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", list(P.KERNELS))
def test_port_ptx_assembles(name, arch):
    ptx = P.port(name).ptx(*sample_args(name, np.random.default_rng(1)), arch=arch)
    assemble(ptx, arch)                                   # raises on any ptxas error


@pytest.mark.parametrize("name, op", [("gelu_forward_bf16", "ld.global.nc.v4.b32"),
                                      ("gelu_forward_bf16", "st.global.v4.b32"),
                                      ("gelu_backward_bf16", "ld.global.nc.v4.b32"),
                                      ("gelu_backward_bf16", "st.global.v4.b32"),
                                      ("residual_forward", "ld.global.nc.v4.b32"),
                                      ("residual_forward", "st.global.v4.b32")])
def test_packed128_ports_keep_16_byte_accesses(name, op):
    n = 4096                                              # aligned, C-contiguous: the fast path's arrays
    dt = BF16 if name.endswith("bf16") else np.float32
    arrays = [np.zeros(n, dt) for _ in inspect.signature(P.port(name).pyfunc).parameters]
    assert re.search(re.escape(op), P.port(name).ptx(*arrays, arch="sm_90")), f"{name}: no {op} in its PTX"


# ---- unsafe: only shared-memory scratch and atomics ------------------------------------------------------------
UNSAFE = {"layernorm_forward": 0, "layernorm_backward": 3, "gelu_forward_bf16": 0, "gelu_backward_bf16": 0,
          "gelu_forward_f32": 0, "gelu_backward_f32": 0, "residual_forward": 0, "encoder_forward": 0,
          "encoder_backward": 1, "crossentropy_forward": 3, "crossentropy_backward": 3, "adamw_update": 0,
          "global_norm_squared": 0}
ROW_OUTPUTS = {"layernorm_forward": ("out", "mean", "rstd"), "layernorm_backward": ("dinp",),
               "crossentropy_forward": ("losses",), "crossentropy_backward": ("dlogits",)}


def _stores_inside_unsafe(fn: ast.FunctionDef) -> set[str]:
    """Names of arrays stored (`a[...] = ...`, `a[...] += ...`) inside `with simt.unsafe():` in `fn`."""
    out: set[str] = set()
    for w in ast.walk(fn):
        if isinstance(w, ast.With) and any(ast.unparse(i.context_expr) == "simt.unsafe()" for i in w.items):
            for node in ast.walk(w):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AugAssign) else []
                out |= {t.value.id for t in targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)}
    return out


@pytest.mark.parametrize("name", list(P.KERNELS))
def test_unsafe_blocks_are_counted_per_port(name):
    assert P.unsafe_blocks(name) == UNSAFE[name]


@pytest.mark.parametrize("name", list(ROW_OUTPUTS))
def test_warp_and_block_row_outputs_are_written_without_unsafe(name):
    fn = next(f for f in ast.walk(ast.parse(inspect.getsource(P.family(name))))
              if isinstance(f, ast.FunctionDef) and f.name == name)
    written = {t.value.id for node in ast.walk(fn) for t in
               (node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else [])
               if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)}
    assert set(ROW_OUTPUTS[name]) <= written                # the outputs are stored in the body ...
    assert not set(ROW_OUTPUTS[name]) & _stores_inside_unsafe(fn)   # ... and none inside `unsafe`
    P.port(name).build(*sample_args(name, np.random.default_rng(2)))   # the ownership proofs hold


def test_a_port_refuses_a_wrong_dtype_on_the_simulator_and_leaves_the_output():
    rng = np.random.default_rng(3)
    out, mean, rstd, x, w, b = sample_args("layernorm_forward", rng)
    poison = np.full_like(out, 12345.0)
    out[...] = poison
    with pytest.raises(bridge.DTypeError) as info:
        P.port("layernorm_forward").simulate(out, mean, rstd, x.astype(np.float64), w, b)
    assert "inp" in str(info.value)
    np.testing.assert_array_equal(out, poison)


def test_a_scalar_bounded_by_an_extent_is_generated_inside_it():
    """crossentropy's `V <= logits.shape[1]`: a 1-D-sized scalar drawn ~size would always exceed a 2-D
    extent (~sqrt(size)); the generator bounds it by the extent drawn first (else: UnsatisfiableContractError)."""
    port = P.port("crossentropy_forward")
    for seed in range(5):
        args = bridge.testing.arguments(port, size=1000, seed=seed)
        assert 0 < args.sizes["V"] <= args.sizes["logits"][1], args.sizes
    fixed = bridge.testing.arguments(port, size=1000, seed=0, scalars={"V": 40})
    assert fixed.sizes["logits"][1] >= 40, fixed.sizes           # a fixed scalar bounds the extent


# ---- GPU: each port against its C++ kernel ------------------------------------------------------------------
def _tokens(lo: int, hi: int):
    return lambda rng, shape, dt: rng.integers(lo, hi, shape).astype(dt)


def _grid(expr):
    return lambda s: (max(1, math.ceil(expr(s))),)


# name -> assert_equivalent keywords. A C++ kernel without KB_GRID_FROM runs with the port's derived grid
# (the warp- and block-row kernels: one warp / block a row, which the C++ kernels' striding loops cover);
# the encoder's C++ kernels take a 1-D grid over B*T*C (the ports a 3-D one): they get theirs explicitly.
GPU_CASES = {
    "layernorm_forward": dict(rtol=1e-5, atol=1e-5),
    "layernorm_backward": dict(rtol=1e-4, atol=5e-3),          # dweight/dbias: atomics in any order
    "gelu_forward_bf16": dict(ulps=2), "gelu_backward_bf16": dict(ulps=2),
    # the two tanh (nvcc's tanhf, libdevice's) and their cancellation near x = -3 differ by ~1e-6 absolute:
    # the same bound each side meets against float64 (TOL above); 1e-6 failed 1 element in 3000 on the H200
    "gelu_forward_f32": dict(rtol=1e-5, atol=2e-6), "gelu_backward_f32": dict(rtol=1e-5, atol=2e-6),
    "residual_forward": dict(),
    "encoder_forward": dict(values={"inp": _tokens(-1, 12)},
                            cpp_grid=_grid(lambda s: math.prod(s["out"]) / 4 / 128), cpp_block=128),
    "encoder_backward": dict(values={"inp": _tokens(-1, 12)}, rtol=1e-5, atol=1e-4,
                             cpp_grid=_grid(lambda s: math.prod(s["dout"]) / 256), cpp_block=256),
    "crossentropy_forward": dict(rtol=1e-5, atol=1e-5, scalars={"V": 20}, values={"targets": _tokens(-1, 21)}),
    "crossentropy_backward": dict(rtol=1e-4, atol=1e-6, scalars={"V": 20}, values={"targets": _tokens(-1, 21)}),
    "adamw_update": dict(rtol=1e-5, atol=1e-6, scalars=dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8,
                                                            weight_decay=0.1, grad_scale=0.5),
                         values={"v": lambda rng, shape, dt: rng.uniform(0.0, 0.05, shape).astype(dt)}),
    "global_norm_squared": dict(rtol=1e-5, options={"tile_shapes": {"values": (global_norm.TILE,)}}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(P.KERNELS))
def test_port_is_equivalent_to_its_cpp_kernel_with_full_coverage(name):
    kw = dict(GPU_CASES[name])
    cpp = llm_kit.kernel(name)
    if "cpp_grid" in kw:
        cpp = bridge.testing.configured(cpp, grid=kw.pop("cpp_grid"), block=kw.pop("cpp_block"))
    report = bridge.testing.assert_equivalent(cpp, P.port(name), trials=4, size=3000, **kw)
    assert report.full_coverage, str(report)


@pytest.mark.gpu
def test_crossentropy_ports_match_at_a_padded_vocabulary():
    """V well below Vp: the padding columns are written 0 by both, never read into the softmax."""
    for name in ("crossentropy_forward", "crossentropy_backward"):
        kw = {k: v for k, v in GPU_CASES[name].items() if k != "scalars"}
        report = bridge.testing.assert_equivalent(llm_kit.kernel(name), P.port(name), trials=2,
                                                  shapes={"logits": (37, 1030)}, scalars={"V": 1000}, **kw)
        assert report.full_coverage, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["layernorm_forward", "gelu_forward_bf16", "crossentropy_backward",
                                  "encoder_forward", "adamw_update"])
def test_port_refuses_a_wrong_dtype_and_leaves_the_poisoned_output(name):
    rng = np.random.default_rng(5)
    args = list(sample_args(name, rng))
    bad = {"layernorm_forward": 3, "gelu_forward_bf16": 1, "crossentropy_backward": 1, "encoder_forward": 1,
           "adamw_update": 3}[name]
    wrong = np.int64 if args[bad].dtype == np.int32 else np.float64
    args[bad] = args[bad].astype(wrong)
    poison = np.full_like(args[0], 12345.0)
    dev = [bridge.from_host(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args]
    dev[0] = bridge.from_host(poison)
    with pytest.raises(bridge.DTypeError) as info:
        P.port(name)(*dev)
        bridge.synchronize()
    assert name in str(info.value)
    np.testing.assert_array_equal(dev[0].to_host(), poison)
