"""Triton's tutorials 01-06 in the tile DSL (examples/triton_tutorials/, issue 28 item 5): each kernel
computes what NumPy float64 computes on the CPU simulator and on the lowered kernel's simulator (sizes
never multiples of the block), compiles to PTX that ptxas assembles for sm_80 and sm_90 without
spills (the GEMM on its tensor-core loop), and each example prints PASS last, on the simulator here and
on the GPU in the gpu tests. The references are written here, not taken from the examples; the
dropout generator is checked against a pure-Python reading of its documented definition. 05's
backward has its own file (test_triton_tutorial_05_backward.py), against each row's explicit Jacobian."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge
from dsl.backend.ptxas import assemble, find_ptxas

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "examples" / "triton_tutorials"
STEMS = ["01_vector_add", "02_fused_softmax", "03_matmul", "04_dropout", "06_fused_attention"]
RUNNERS = ["simulate", "simulate_lowered"]


def _load(stem: str):
    spec = importlib.util.spec_from_file_location(f"triton_tutorial_{stem}", FOLDER / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ADD, SOFTMAX, MATMUL, DROPOUT = (_load(s) for s in STEMS[:4])
LN = _load("05_layer_norm")         # its chunked kernel's tests: interop_tests/dsl_tile/test_tile_chunk_stores.py
ATTN = _load(STEMS[4])


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------ 01 vector add
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("n,block", [(1000, 256), (4097, 1024), (5, 1024)])
def test_vector_add_writes_every_element_with_n_not_a_multiple_of_the_block(runner, n, block, rng):
    x, y = rng.random(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    getattr(ADD.add_kernel, runner)(*ADD.launch_args(x, y, out, block))
    np.testing.assert_array_equal(out, x + y)        # an f32 add is the exact sum rounded once, as NumPy's


def test_vector_add_refuses_arrays_of_other_lengths_naming_them():
    a = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="x, y, output: expected one length"):
        ADD.launch_args(a, a[:9], a.copy())
    with pytest.raises(ValueError, match="block: expected a power of two"):
        ADD.launch_args(a, a, a.copy(), 100)


# ------------------------------------------------------------------------------ 02 fused softmax
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,cols,how,kernel", [
    (7, 781, {}, "softmax_kernel"),
    (10, 100, {"rows_per_block": 4}, "softmax_kernel"),          # 10 rows: the last block's tile is cut
    (5, 1500, {"max_whole_row": 512, "chunk": 256}, "softmax_online_kernel"),
    (3, 77, {"max_whole_row": 64, "chunk": 16}, "softmax_online_kernel"),
    (4, 700, {"num_warps": 2}, "softmax_kernel"),                 # 16 elements a thread on 64 threads
    (3, 300, {"num_warps": 1}, "softmax_kernel"),                 # one warp: no shared-memory stage
])
def test_softmax_of_rows_of_any_length_matches_numpy(runner, rows, cols, how, kernel, rng):
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    k, args = SOFTMAX.launch_args(x, y, **how)
    assert k.name == kernel
    getattr(k, runner)(*args)
    np.testing.assert_allclose(y, np_softmax(x), rtol=2e-5, atol=1e-9)


def test_softmax_takes_the_whole_row_tile_up_to_the_limit_and_the_online_kernel_beyond():
    z = np.zeros
    assert SOFTMAX.launch_args(z((2, 16384), np.float32), z((2, 16384), np.float32))[0].name == "softmax_kernel"
    k, args = SOFTMAX.launch_args(z((2, 16385), np.float32), z((2, 16385), np.float32))
    assert k.name == "softmax_online_kernel" and args[1].tile_shape == (1, 32768) and args[2] == SOFTMAX.CHUNK
    with pytest.raises(ValueError, match="rows_per_block: expected a power of two"):
        SOFTMAX.launch_args(z((2, 8), np.float32), z((2, 8), np.float32), rows_per_block=3)
    with pytest.raises(ValueError, match=r"y: expected shape \(2, 8\)"):
        SOFTMAX.launch_args(z((2, 8), np.float32), z((2, 9), np.float32))
    with pytest.raises(ValueError, match="num_warps: expected 1 to 32 warps, got 64"):
        SOFTMAX.launch_args(z((2, 8), np.float32), z((2, 8), np.float32), num_warps=64)


# ------------------------------------------------------------------------------ 05 layer norm, whole rows
def np_layer_norm(x, w, b, eps=1e-5):
    xd = x.astype(np.float64)
    mu = xd.sum(1) / x.shape[1]
    var = ((xd - mu[:, None]) ** 2).sum(1) / x.shape[1]
    rs = 1.0 / np.sqrt(var + eps)
    return (xd - mu[:, None]) * rs[:, None] * w.astype(np.float64) + b.astype(np.float64), mu, rs


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,n,dtype,warps,tol", [
    (5, 1000, np.float32, None, 1e-4),       # the default: 16 elements a thread on 2 warps
    (3, 300, np.float16, 4, 1e-2),           # f16 in and out, f32 statistics, 4 warps
    (4, 33, np.float32, 1, 1e-4),            # one warp: no shared-memory stage in the reductions
    (2, 2049, np.float32, 8, 1e-4),          # one past a power of two: the row's tile is 4096 wide
])
def test_whole_row_layer_norm_matches_numpy(runner, rows, n, dtype, warps, tol, rng):
    x = (rng.standard_normal((rows, n)) * 2 + 0.5).astype(dtype)
    w, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    y = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    k, args = LN.pick(x, y, w, b, mean, rstd, num_warps=warps)
    assert k.name == "layer_norm_row" and k.num_warps == (warps or 2)      # 1024 wide: 2 warps by default
    getattr(k, runner)(*args)
    for got, want in zip((y, mean, rstd), np_layer_norm(x, w, b)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_layer_norm_holds_rows_up_to_the_limit_and_chunks_longer_ones():
    z = np.zeros

    def picked(n, **how):
        return LN.pick(z((2, n), np.float16), z((2, n), np.float16), z(n, np.float16), z(n, np.float16),
                       z(2, np.float32), z(2, np.float32), **how)
    k, args = picked(LN.MAX_WHOLE_ROW)
    assert k.name == "layer_norm_row" and args[1].tile_shape == (1, LN.MAX_WHOLE_ROW) and len(args) == 7
    assert picked(1024)[0].num_warps == 2 and picked(8192)[0].num_warps == 16
    k, args = picked(LN.MAX_WHOLE_ROW + 1)
    assert k.name == "layer_norm_fwd" and args[-1] == LN.MAX_BLOCK
    assert picked(1000, max_whole_row=512, block=256)[1][-1] == 256
    with pytest.raises(ValueError, match="num_warps: expected 1 to 32 warps, got 0"):
        picked(100, num_warps=0)


# 05's backward: interop_tests/examples/test_triton_tutorial_05_backward.py


# ------------------------------------------------------------------------------ 03 matmul
def np_matmul(a, b, leaky):
    c = a.astype(np.float64) @ b.astype(np.float64)
    return np.where(c >= 0, c, 0.01 * c) if leaky else c


def assert_matmul_close(c, a, b, leaky):
    """f16 C: rounded once (2^-11 relatively) after an f32 accumulation of exact f16 products."""
    ref = np_matmul(a, b, leaky)
    bound = 2.0 ** -10 * np.abs(ref) + 1e-5 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c.astype(np.float64) - ref) <= bound)


@pytest.mark.parametrize("runner,opts,shape,tile_shape,bk", [
    ("simulate", {}, (96, 80, 72), (32, 32), 16),
    ("simulate_lowered", {}, (96, 80, 72), (32, 32), 16),
    ("simulate_lowered", {"tensor_cores": True, "arch": "sm_80"}, (160, 144, 96), (64, 64), 32),
    ("simulate_lowered", {"tensor_cores": True, "arch": "sm_90"}, (200, 264, 136), (128, 128), 64),
])
@pytest.mark.parametrize("leaky", [True, False])
def test_matmul_with_leaky_relu_epilogue_matches_numpy_on_every_path(runner, opts, shape, tile_shape, bk, leaky, rng):
    m, n, k = shape                                    # none a multiple of its tile: edges masked and padded
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float16)
    getattr(MATMUL.matmul_kernel, runner)(*MATMUL.launch_args(a, b, c, tile_shape, bk, leaky), **opts)
    assert_matmul_close(c, a, b, leaky)


@pytest.mark.parametrize("arch,present,absent", [
    ("sm_90", ["wgmma.mma_async", "cp.async.bulk.tensor"], ["mma.sync"]),
    ("sm_80", ["mma.sync", "cp.async", "ldmatrix"], ["wgmma"]),
])
def test_matmul_runs_on_the_tensor_core_gemm_loop(arch, present, absent):
    z = np.zeros((512, 512), np.float16)
    ptx = MATMUL.matmul_kernel.ptx(*MATMUL.launch_args(z, z, z.copy()), arch=arch)
    assert all(p in ptx for p in present), [p for p in present if p not in ptx]
    assert not any(a in ptx for a in absent)


# ------------------------------------------------------------------------------ 04 dropout
def python_random(i: int, seed: int) -> float:
    """The generator as 04_dropout.py's docstring defines it, in Python integers."""
    m = 0xFFFFFFFF

    def mix(h: int) -> int:
        h = ((h ^ (h >> 16)) * 0x21F0AAAD) & m
        h = ((h ^ (h >> 15)) * 0x735A2D97) & m
        return h ^ (h >> 15)
    h = mix(i ^ seed)
    h = mix((h + seed * 0x9E3779B9 + 0x7F4A7C15) & m)
    return (h >> 8) / 2.0 ** 24


def dropout(x, p, seed, block=1024, runner="simulate"):
    out = np.full_like(x, np.nan)
    getattr(DROPOUT.seeded_dropout, runner)(*DROPOUT.launch_args(x, out, p, seed, block))
    return out


def nonzero_inputs(rng, n):
    x = rng.standard_normal(n, dtype=np.float32)
    x[x == 0] = 1.0
    return x


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("p,seed", [(0.5, 0), (0.2, 123), (0.9, 0xFFFFFFFF)])
def test_dropout_keeps_exactly_the_elements_the_generator_draws_above_p(runner, p, seed, rng):
    x = nonzero_inputs(rng, 3001)
    out = dropout(x, p, seed, 256, runner)
    keep = np.array([python_random(i, seed) > np.float32(p) for i in range(len(x))])
    np.testing.assert_array_equal(out != 0, keep)
    np.testing.assert_allclose(out[keep], x[keep].astype(np.float64) / (1 - np.float64(np.float32(p))), rtol=1e-6)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keep_rate_is_one_minus_p_within_five_sigma(p, rng):
    n = 200_003
    kept = dropout(nonzero_inputs(rng, n), p, 7) != 0
    assert abs(kept.mean() - (1 - p)) <= 5 * np.sqrt(p * (1 - p) / n), kept.mean()
    both = (kept[1:] & kept[:-1]).mean()                      # neighbours: independent, not correlated
    assert abs(both - (1 - p) ** 2) <= 10 * np.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / n), both


def test_dropout_is_deterministic_per_seed_whatever_the_block_and_runner(rng):
    x = nonzero_inputs(rng, 10_007)
    first = dropout(x, 0.5, 42, 1024)
    for block, runner in ((256, "simulate"), (4096, "simulate"), (1024, "simulate_lowered")):
        np.testing.assert_array_equal(dropout(x, 0.5, 42, block, runner), first)   # bit for bit
    other = dropout(x, 0.5, 43, 1024)
    agree = ((other != 0) == (first != 0)).mean()              # independent masks agree on half
    assert abs(agree - 0.5) <= 5 * np.sqrt(0.25 / len(x)), agree


@pytest.mark.parametrize("p,seed,needle", [(1.0, 0, "p: expected a probability in [0, 1)"),
                                           (-0.1, 0, "p: expected a probability"),
                                           (0.5, 2 ** 32, "seed: expected an unsigned 32-bit integer"),
                                           (0.5, -1, "seed: expected an unsigned 32-bit integer")])
def test_dropout_refuses_a_bad_p_or_seed_naming_it(p, seed, needle):
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=re.escape(needle)):
        DROPOUT.launch_args(x, x.copy(), p, seed)


# ------------------------------------------------------------------------------ PTX + ptxas
def assemble_cases() -> dict:
    z = np.zeros
    v = z(5000, np.float32)
    s = z((4, 781), np.float32)
    h = z((512, 512), np.float16)
    return {"01 add_kernel": (ADD.add_kernel, ADD.launch_args(v, v, v.copy())),
            "02 softmax_kernel": SOFTMAX.launch_args(s, s.copy()),
            "02 softmax_kernel 16384": SOFTMAX.launch_args(z((4, 16384), np.float32), z((4, 16384), np.float32)),
            "02 softmax_online_kernel": SOFTMAX.launch_args(s, s.copy(), max_whole_row=256),
            "02 softmax_kernel 4096 4 warps": SOFTMAX.launch_args(z((4, 4096), np.float32), z((4, 4096), np.float32),
                                                                num_warps=4),
            "03 matmul_kernel": (MATMUL.matmul_kernel, MATMUL.launch_args(h, h, h.copy())),
            "04 seeded_dropout": (DROPOUT.seeded_dropout, DROPOUT.launch_args(v, v.copy(), 0.5, 1)),
            "05 layer_norm_row 1024 f16": layer_norm_case(1024, np.float16),
            "05 layer_norm_row 8192 f16 8 warps": layer_norm_case(8192, np.float16, num_warps=8),
            "05 layer_norm_row 16384 f32": layer_norm_case(16384, np.float32),
            "05 layer_norm_bwd_dx_rows 1024 f16": layer_norm_bwd_kernels(1024)[0],
            "05 layer_norm_bwd_dx_rows 8192 f16": layer_norm_bwd_kernels(8192)[0],
            "05 layer_norm_bwd_dx_rows 8192 f16 8 warps": layer_norm_bwd_kernels(8192, num_warps=8)[0],
            "05 layer_norm_bwd_dx_ahead 1024 f16": layer_norm_bwd_kernels(1024, ahead=True)[0],
            "05 layer_norm_bwd_dwdb 1024 f16": layer_norm_bwd_kernels(1024)[1],
            "05 layer_norm_bwd_dwdb 8192 f16": layer_norm_bwd_kernels(8192)[1],
            "06 attn_fwd D128": (ATTN.attn_fwd, ATTN.launch_args(*(z((1024, 128), np.float16),) * 4, 512, False)),
            "06 attn_fwd D64 128x64": (ATTN.attn_fwd, ATTN.launch_args(*(z((1024, 64), np.float16),) * 4, 1024,
                                                                         False, 128, 64))}


def layer_norm_bwd_kernels(n: int, **how) -> tuple:
    z = np.zeros
    h = [z((4, n), np.float16) for _ in range(3)]
    return LN.backward_args(h[0], h[1], z(n, np.float16), z(4, np.float32), z(4, np.float32), h[2],
                            z(n, np.float16), z(n, np.float16), z(LN.partials_shape(4, n), np.float32), **how)


def layer_norm_case(n: int, dtype, **how) -> tuple:
    z = np.zeros
    return LN.pick(z((4, n), dtype), z((4, n), dtype), z(n, dtype), z(n, dtype), z(4, np.float32),
                   z(4, np.float32), **how)


@pytest.mark.slow
@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(assemble_cases()))
def test_tutorial_kernels_assemble_without_spills(name, arch):
    kernel, args = assemble_cases()[name]
    ptx = kernel.compile(args, arch).ptx
    target = re.search(r"^\.target\s+(\w+)", ptx, re.M).group(1)     # sm_90a for the wgmma GEMM
    usage, _ = assemble(ptx, target)
    assert usage and usage[0].spill_stores == 0 and usage[0].stack_frame == 0, usage


# ------------------------------------------------------------------------------ 06 fused attention
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_written_as_the_tutorial_matches_float64(d, causal, rng):
    n_ctx = 128
    q, k, v = (rng.standard_normal((2 * n_ctx, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * n_ctx, d), np.nan, np.float16)         # O in the inputs' dtype, as the tutorial's
    ATTN.attn_fwd.simulate(*ATTN.launch_args(q, k, v, out, n_ctx, causal))
    np.testing.assert_allclose(out.astype(np.float64), ATTN.reference(q, k, v, n_ctx, causal), rtol=2e-2,
                               atol=2e-3)


@pytest.mark.parametrize("arch, product", [("sm_80", "mma.sync"), ("sm_90", "wgmma.mma_async")])
def test_fused_attention_with_named_loads_and_a_helper_runs_on_the_tensor_cores(arch, product):
    """The tutorial's style (loads named before their products, the inner loop a @tile.func) keeps the
    products on the tensor cores with cp.async-fed K/V, as examples/flash_attention.py: no slow path."""
    from dsl.perf import from_metadata
    x = np.ones((2 * 1024, 128), np.float16)
    out = np.zeros((2 * 1024, 128), np.float16)
    for causal in (False, True):
        ck = ATTN.attn_fwd.compile(ATTN.launch_args(x, x, x, out, 1024, causal), arch)
        assert ck.ptx.count(product) > 0 and "cp.async.cg" in ck.ptx
        assert from_metadata(ck.metadata) == []


LOWERINGS_06 = [(64, 64, None, {"loop_pipeline": "tma"}), (64, 64, None, {"loop_pipeline": "tma", "wgmma_a": "shared"}),
                (64, 64, None, {"loop_pipeline": "tma", "product_overlap": True}),
                (128, 128, 8, {"loop_pipeline": "tma"}), (128, 64, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24"}),
                (128, 128, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24"}),
                (128, 128, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24", "fp_fusion": True})]


@pytest.mark.slow
@pytest.mark.parametrize("bm, bn, warps, lowering", LOWERINGS_06, ids=["tma", "tma-q-shared", "tma-overlap", "tma-128x128", "ws-128x64", "ws-128x128",
                                                        "ws-128x128-fp-fusion"])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_under_the_ladders_lowerings_matches_float64_in_the_lowered_simulator(bm, bn, warps, lowering,
                                                                                           causal, rng):
    """The tutorial kernel under each lowering benchmarks/triton_tutorials.py times it with (fixed per
    kernel), through the CPU semantics of its sm_90 PTX: TMA rings, a producer warpgroup, setmaxnreg,
    Q read by the tensor cores from shared memory."""
    from dsl import tile
    n_ctx, d = 256, 128
    q, k, v = (rng.standard_normal((2 * n_ctx, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * n_ctx, d), np.nan, np.float16)
    kern = tile.kernel(ATTN.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)
    kern.simulate_lowered(*ATTN.launch_args(q, k, v, out, n_ctx, causal, bm, bn), tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out.astype(np.float64), ATTN.reference(q, k, v, n_ctx, causal), rtol=2e-2, atol=2e-3)


# ------------------------------------------------------------------------------ the examples as a user runs them
def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_example_prints_pass_last_on_the_simulator(stem):
    p = run(str(FOLDER / f"{stem}.py"), "--simulate")
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines[-1] == "PASS", (p.stdout + p.stderr)[-4000:]
    assert "ran on the CPU simulator" in lines[-2]


@pytest.mark.gpu
@pytest.mark.nosanitize     # scripts/gpu_check.py runs examples under memcheck itself
@pytest.mark.parametrize("stem", STEMS)
def test_example_prints_pass_last_on_the_gpu(stem):
    p = run(str(FOLDER / f"{stem}.py"))
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines[-1] == "PASS", (p.stdout + p.stderr)[-4000:]
    assert lines[-2] == "ran on the GPU"


@pytest.mark.slow
def test_benchmark_lists_every_case_and_imports_triton_only_when_it_runs():
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import triton_tutorials as t; "
            "print(','.join(t.CASES)); print('triton' in sys.modules)")
    p = run("-c", code)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split() == ["01,02,03,04,05,05bwd,06", "False"]
    helped = run("benchmarks/triton_tutorials.py", "--help")
    assert helped.returncode == 0 and "05bwd layer norm backward" in helped.stdout
    assert "06 fused attention forward" in helped.stdout and "SDPA, flash backend" in helped.stdout


@pytest.mark.slow
@pytest.mark.skipif(bridge.gpu_available(), reason="checks the no-GPU behaviour; a GPU is present")
def test_benchmark_without_gpu_writes_a_json_note(tmp_path):
    out = tmp_path / "r.json"
    p = run("benchmarks/triton_tutorials.py", "--json", str(out), "--quick")
    assert p.returncode == 0 and "no GPU" in p.stdout, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["bars"] == [] and data["rows"] == []
    assert any(n.startswith("no GPU") for n in data["notes"]), data["notes"]


def _benchmark_attention_rows() -> list:
    """(head dim, row) of every tutorial-06 row benchmarks/triton_tutorials.py times (ATTN_OURS)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("triton_tutorials_rows", ROOT / "benchmarks" / "triton_tutorials.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return [(d, row) for d, rows in mod.ATTN_OURS.items() for row in rows]


@pytest.mark.slow
@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("d,row", _benchmark_attention_rows(), ids=lambda v: str(v) if isinstance(v, int) else
                         "-".join([f"{v[0]}x{v[1]}", f"w{v[2]}"] + [f"{k}={x}" for k, x in (v[3] or {}).items()]))
def test_every_benchmarked_attention_row_assembles_for_sm_90a_without_spills(d, row):
    """The rows the GPU benchmark compiles (on a machine whose time is scarce) compile and assemble here
    first, causal (both of the kernel's loops), at the benchmark's sequence length."""
    from dsl import tile
    bm, bn, warps, lowering = row
    q = np.zeros((4096, d), np.float16)
    kernel = ATTN.attn_fwd if warps is None and lowering is None else \
        tile.kernel(ATTN.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)
    ck = kernel.compile(ATTN.launch_args(q, q, q, q.copy(), 4096, True, bm, bn), "sm_90")
    usage, _ = assemble(ck.ptx, ck.metadata["arch"])
    assert usage[0].spill_stores == 0 and usage[0].stack_frame == 0, usage
