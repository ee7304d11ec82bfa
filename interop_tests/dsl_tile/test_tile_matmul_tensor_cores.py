"""tile.matmul / tile.mma outside the GEMM main loops on the tensor cores (dsl/tile/lower/matmul/products.py,
the default; KB_TILE_TC_MATMUL=0 selects the portable path): the lowering run on the CPU simulator
(its mma.sync carries CPU semantics) against float64 NumPy, ragged tiles included; flash attention
through it, with the fragment layouts that keep S, P and the row statistics in registers; the switch
changes the PTX (mma.sync, assembled by ptxas for sm_80 and sm_90) and the cache keys. The GPU tests
check the same products on the device, where operands are staged by cp.async, read with ldmatrix and
(in loops) copied one iteration ahead."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import TypeVar

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, tile

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_tc", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

E = TypeVar("E")
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


@tile.kernel(num_warps=4)
def tile_product(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], kk: tile.Constant):
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store(tile.matmul(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n))))


@tile.kernel(num_warps=4)
def tile_product_acc(a: tile.Array[E, 2], b: tile.Array[E, 2], bias: tile.Array[f32, 2],
                     c: tile.Partition[f32, 2], kk: tile.Constant):
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    acc = tile.load(bias, (i, j), (m, n))
    c.store(tile.mma(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n)), acc) * 0.5)


def operands(rng, dtype, m, k, n):
    a = (rng.standard_normal((m, k)) * 2).astype(DTYPES[dtype])
    b = (rng.standard_normal((k, n)) * 2).astype(DTYPES[dtype])
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("tiles", [(32, 32), (64, 16), (16, 64)])
def test_the_tensor_core_lowering_matches_numpy_in_the_simulator(rng, dtype, tiles):
    a, b, ref = operands(rng, dtype, 70, 64, 100)          # ragged: 70 x 100 is no multiple of the tiles
    c = np.full((70, 100), np.nan, np.float32)
    tile_product.simulate_lowered(a, b, tile.partition(c, tiles), 64, tensor_cores=True)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_mma_with_an_accumulator_and_an_epilogue(rng):
    a, b, ref = operands(rng, "bf16", 64, 32, 64)
    bias = rng.standard_normal((64, 64)).astype(np.float32)
    c = np.full((64, 64), np.nan, np.float32)
    tile_product_acc.simulate_lowered(a, b, bias, tile.partition(c, (32, 32)), 32, tensor_cores=True)
    np.testing.assert_allclose(c, (ref + bias) * 0.5, rtol=1e-5, atol=1e-4)


def test_tiles_the_warps_cannot_split_take_the_portable_path(rng, monkeypatch):
    a, b, ref = operands(rng, "bf16", 40, 32, 40)
    c = np.full((40, 40), np.nan, np.float32)
    tile_product.simulate_lowered(a, b, tile.partition(c, (8, 32)), 32, tensor_cores=True)   # 8 rows < 16
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "1")
    ptx = tile_product.ptx(a, b, tile.partition(c, (8, 32)), 32, arch="sm_80")
    assert "mma.sync" not in ptx


@pytest.mark.parametrize("d,seq", [(64, 64), (128, 64), (64, 128)])   # D64 at S128: 128 query rows a block
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_on_the_tensor_cores_in_the_simulator(rng, d, seq, causal):
    heads = 2
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    FA.flash_fwd.simulate_lowered(*FA.launch_args(q, k, v, out, seq, causal), tensor_cores=True)
    ref = FA.reference(q, k, v, seq, causal)
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=1e-2)


def _ptxas(ptx: str, arch: str, tmp_path: Path) -> subprocess.CompletedProcess:
    from bridge import toolkit
    tool = toolkit.locate("ptxas").path
    if tool is None:
        pytest.skip("ptxas not found (the PTX itself was checked)")
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    return subprocess.run([str(tool), f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow
def test_the_switch_turns_the_products_into_mma_sync_that_ptxas_assembles(arch, monkeypatch, tmp_path):
    seq, d = 128, 64
    q = np.zeros((2 * seq, d), ml_dtypes.bfloat16)
    # the mma.sync tiles (128 query rows on 4 warps) on either machine: sm_90 keeps them on mma.sync
    # while the lowering switch wgmma_slices is off (on, they are two m64 wgmma slices a warpgroup)
    monkeypatch.setenv("KB_TILE_WGMMA_SLICES", "0")
    args = FA.launch_args(q, q, q, np.zeros((2 * seq, d), np.float32), seq, True, tensor_cores=True, wgmma=False)
    portable = FA.launch_args(q, q, q, np.zeros((2 * seq, d), np.float32), seq, True, tensor_cores=False)
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "0")
    default = tile.kernel(FA.flash_fwd.pyfunc).compile(portable, arch)   # a fresh kernel object
    assert "mma.sync" not in default.ptx
    monkeypatch.delenv("KB_TILE_TC_MATMUL")                              # the default: tensor cores
    ck = tile.kernel(FA.flash_fwd.pyfunc).compile(args, arch)
    assert ck.ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") > 0
    assert ck.metadata.get("key") != default.metadata.get("key")       # its own disk-cache entry
    r = _ptxas(ck.ptx, ck.metadata["arch"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_kernel_object_recompiles_when_the_switch_flips(monkeypatch):
    a = np.zeros((64, 32), ml_dtypes.bfloat16)
    b = np.zeros((32, 64), ml_dtypes.bfloat16)
    part = tile.partition(np.zeros((64, 64), np.float32), (32, 32))
    k = tile.kernel(num_warps=4)(tile_product.pyfunc)
    assert "mma.sync" in k.ptx(a, b, part, 32, arch="sm_80")             # the default
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "0")
    assert "mma.sync" not in k.ptx(a, b, part, 32, arch="sm_80")
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "1")
    assert "mma.sync" in k.ptx(a, b, part, 32, arch="sm_80")
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "0")
    assert "mma.sync" not in k.ptx(a, b, part, 32, arch="sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_flash_attention_on_the_tensor_cores_matches_torch_sdpa(d, causal, dtype, monkeypatch):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "1")
    kern = tile.kernel(FA.flash_fwd.pyfunc)           # a fresh dispatcher: specialised with the switch on
    batch, heads, seq = 2, 3, 192
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
               for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    args = FA.launch_args(*(x.reshape(-1, d) for x in (q, k, v)), out, seq, causal)
    kern(*args)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err
    assert "mma.sync" in kern.compile(args, "sm_80").ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_gpu_tensor_core_products_match_numpy(rng, dtype, monkeypatch):
    import bridge
    monkeypatch.setenv("KB_TILE_TC_MATMUL", "1")
    a, b, ref = operands(rng, dtype, 70, 64, 100)
    kern = tile.kernel(num_warps=4)(tile_product.pyfunc)
    out = bridge.full((70, 100), -7.0, "float32")
    kern(bridge.from_host(a), bridge.from_host(b), tile.partition(out, (32, 32)), 64)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-5, atol=1e-4)


@tile.kernel(num_warps=4)
def rescaled_products(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], steps: tile.Constant):
    i = tile.bid(0)
    m, n = c.tile_shape
    acc = tile.zeros((m, n), f32)
    shift = 0
    for j in range(steps):
        acc = acc + tile.matmul(tile.load(a, (i, 0), (m, 32)), tile.load(b, (j + shift, 0), (32, n)))
        shift = shift + 1              # the next load's row depends on the loop body: not copied ahead
    c.store(acc)


@pytest.mark.slow
def test_flash_attention_keeps_its_loop_in_registers_and_copies_one_iteration_ahead(tmp_path):
    seq, d = 256, 128
    q = np.zeros((2 * seq, d), ml_dtypes.bfloat16)
    args = FA.launch_args(q, q, q, np.zeros((2 * seq, d), np.float32), seq, True, tensor_cores=True)
    ptx = tile.kernel(FA.flash_fwd.pyfunc).compile(args, "sm_80").ptx    # sm_90: wgmma (test_tile_products_wgmma)
    # S, P, the row statistics and the output never round-trip through shared memory
    assert "st.shared" not in ptx
    # K and V: copied before the loop, then each one iteration ahead; each product waits for its own;
    loops = 2   # causal: two loops (examples/flash_attention.py: the key blocks left of the diagonal, then on it)
    assert ptx.count("cp.async.wait_group 1;") == 2 * loops and ptx.count("cp.async.wait_group 0;") == loops
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "shfl.sync.bfly" in ptx                                      # row max / sum: quad shuffles
    r = _ptxas(ptx, "sm_80", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_load_indexed_by_the_loop_body_is_not_copied_ahead(rng):
    a = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32 * 4, 64)).astype(ml_dtypes.bfloat16)
    c = np.full((64, 64), np.nan, np.float32)
    ptx = rescaled_products.ptx(a, b, tile.partition(c, (64, 64)), 2, arch="sm_90")
    assert "cp.async.wait_group 1;" not in ptx and "cp.async.wait_group 0;" in ptx
    rescaled_products.simulate_lowered(a, b, tile.partition(c, (64, 64)), 2, tensor_cores=True)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64[0:32] + a64 @ b64[64:96]                 # j + shift = 0, then 2
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@tile.kernel(num_warps=2)
def invariant_operand(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], steps: tile.Constant):
    i = tile.bid(0)
    m, n = c.tile_shape
    qa = tile.load(a, (i, 0), (m, 128))         # 128 A elements a thread: kept in shared memory
    acc = tile.zeros((m, n), f32)
    for j in range(steps):
        acc = acc + tile.matmul(qa, tile.load(b, (j, 0), (128, n)))
    c.store(acc)


def _invariant_operands(rng):
    a = rng.standard_normal((100, 128)).astype(ml_dtypes.bfloat16)     # 100 rows: a ragged last tile
    b = rng.standard_normal((128 * 3, 64)).astype(ml_dtypes.bfloat16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a, b, sum(a64 @ b64[128 * j:128 * (j + 1)] for j in range(3))


def test_a_large_loop_invariant_operand_waits_in_shared_memory(rng, tmp_path):
    a, b, ref = _invariant_operands(rng)
    c = np.full((100, 64), np.nan, np.float32)
    invariant_operand.simulate_lowered(a, b, tile.partition(c, (64, 64)), 3, tensor_cores=True)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    ptx = invariant_operand.ptx(a, b, tile.partition(c, (64, 64)), 3, arch="sm_90")
    assert "st.shared" not in ptx                    # copied by cp.async once, read by ldmatrix
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") >= 16
    r = _ptxas(ptx, "sm_90", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.gpu
def test_gpu_a_large_loop_invariant_operand_in_shared_memory_matches_numpy(rng):
    import bridge
    a, b, ref = _invariant_operands(rng)
    out = bridge.full((100, 64), -7.0, "float32")
    kern = tile.kernel(num_warps=2)(invariant_operand.pyfunc)
    kern(bridge.from_host(a), bridge.from_host(b), tile.partition(out, (64, 64)), 3)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_products_whose_staging_outgrows_static_shared_memory_stage_in_dynamic_shared_memory(rng):
    """128x256 products whose operands cannot be copied by cp.async (rows not a multiple of 8) stage
    51 KiB, more than the 48 KiB of static shared memory: the staging moves into dynamic shared memory
    (the contract states it) instead of the portable path, and the results stay right; a staging
    beyond what the arch lets a block opt into is still refused by name."""
    import json
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tile_kernels_lib as K
    from dsl.tile.lower import LoweringError
    a = np.zeros((1000, 520), ml_dtypes.bfloat16)
    b = np.zeros((520, 700), ml_dtypes.bfloat16)       # rows not a multiple of 8: no cp.async GEMM loop
    c = np.zeros((1000, 700), np.float32)
    small = K.gemm.compile((a, b, tile.partition(c, (64, 64)), 32), "sm_90")
    assert "mma.sync" in small.ptx and small.dynamic_smem == 0          # fits static: stays there
    ck = K.gemm.compile((a, b, tile.partition(c, (128, 256)), 64), "sm_90")
    assert "mma.sync" in ck.ptx and ck.dynamic_smem > 48 * 1024
    assert json.loads(ck.contract_json)["dynamic_smem"] == {"exact": ck.dynamic_smem}
    with pytest.raises(LoweringError, match="gemm: needs"):
        K.gemm.compile((a, b, tile.partition(c, (128, 256)), 256), "sm_86")     # 192 KiB > sm_86's 99
    a2 = rng.standard_normal((200, 130)).astype(ml_dtypes.bfloat16)
    b2 = rng.standard_normal((130, 300)).astype(ml_dtypes.bfloat16)
    c2 = np.full((200, 300), np.nan, np.float32)
    K.gemm.simulate_lowered(a2, b2, tile.partition(c2, (128, 256)), 64, tensor_cores=True, arch="sm_80")
    np.testing.assert_allclose(c2, a2.astype(np.float64) @ b2.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_flash_attention_with_128_query_rows_at_d128_stages_in_dynamic_shared_memory(rng, tmp_path):
    """The 128 x 64 tile at D128 stages Q, K and V in 68 KiB: views of the dynamic shared memory side by
    side (each at its own offset), K and V still copied one iteration ahead; the lowered kernel matches
    NumPy in the simulator and ptxas assembles it for sm_80 and sm_90."""
    d, bm, bn, seq, heads = 128, 128, 64, 128, 2
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    for causal in (False, True):
        out = np.full((heads * seq, d), np.nan, np.float32)
        args = (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
        for arch in ("sm_80", "sm_90"):
            ck = FA.flash_fwd.compile(args, arch)
            assert ck.dynamic_smem > 48 * 1024 and "mma.sync" in ck.ptx
            assert ck.ptx.count("cp.async.wait_group 1;") == 2 * (2 if causal else 1)    # causal: two loops
            r = _ptxas(ck.ptx, ck.metadata["arch"], tmp_path)
            assert r.returncode == 0, r.stderr[-2000:]
        FA.flash_fwd.simulate_lowered(*args, tensor_cores=True, arch="sm_80")
        np.testing.assert_allclose(out, FA.reference(q, k, v, seq, causal), rtol=2e-2, atol=1e-2)


@tile.kernel(num_warps=4)
def mma_into_bias(a: tile.Array[E, 2], b: tile.Array[E, 2], bias: tile.Array[f32, 2],
                  c: tile.Partition[f32, 2], kk: tile.Constant):
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store(tile.mma(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n)), tile.load(bias, (i, j), (m, n))) * 0.5)


@tile.kernel(num_warps=4)
def bias_plus_product(a: tile.Array[E, 2], b: tile.Array[E, 2], bias: tile.Array[f32, 2],
                      c: tile.Partition[f32, 2], kk: tile.Constant):
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store((tile.load(bias, (i, j), (m, n)) + tile.matmul(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n)))) * 0.5)


@tile.kernel(num_warps=4)
def product_plus_bias(a: tile.Array[E, 2], b: tile.Array[E, 2], bias: tile.Array[f32, 2],
                      c: tile.Partition[f32, 2], kk: tile.Constant):
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store((tile.matmul(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n))) + tile.load(bias, (i, j), (m, n))) * 0.5)


@tile.kernel
def gemm_by_adds(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], bk: tile.Constant):
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = acc + tile.load(a, (i, k), (bm, bk)) @ tile.load(b, (k, j), (bk, bn))
    c.store(acc)


def _instructions(ptx: str) -> list[str]:
    """The PTX instructions in order, by their opcode (kernel, parameter and symbol names, source
    files and lines aside)."""
    out = []
    for line in ptx.splitlines():
        t = line.strip()
        if t and not t.startswith(("//", ".", "$", "{", "}", ")", "(")) and not t.endswith(":"):
            out.append(t.split()[0] if not t.startswith("@") else t.split()[1])
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow
def test_adding_an_f32_tile_to_a_product_accumulates_into_it_like_mma(rng, arch):
    """`acc + a @ b` in either order lowers exactly as `tile.mma(a, b, acc)`: the accumulators start
    from acc (no second set of registers for the product), and the results match."""
    a, b, product = operands(rng, "bf16", 64, 32, 64)
    bias = rng.standard_normal((64, 64)).astype(np.float32)
    args = (a, b, bias, tile.partition(np.zeros((64, 64), np.float32), (64, 64)), 32)
    ptx = mma_into_bias.compile(args, arch).ptx
    want = _instructions(ptx)
    # sm_90: 64 rows on 4 warps are one warpgroup's m64 wgmma (test_tile_products_wgmma.py)
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" if arch == "sm_80" else \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"
    assert ptx.count(mma) > 0
    for kern in (bias_plus_product, product_plus_bias):
        assert _instructions(kern.compile(args, arch).ptx) == want
        c = np.full((64, 64), np.nan, np.float32)
        kern.simulate_lowered(a, b, bias, tile.partition(c, (64, 64)), 32, tensor_cores=True, arch=arch)
        ref = (product + bias) * 0.5
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_k_loop_written_with_adds_is_the_gemm_loop():
    """acc = acc + a @ b over k is the GEMM main loop (TMA + wgmma on sm_90), the same kernel as mma."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tile_kernels_lib as K
    a = np.zeros((300, 256), ml_dtypes.bfloat16)
    b = np.zeros((256, 264), ml_dtypes.bfloat16)
    args = (a, b, tile.partition(np.zeros((300, 264), np.float32), (128, 128)), 64)
    ptx = gemm_by_adds.compile(args, "sm_90").ptx
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert _instructions(ptx) == _instructions(K.gemm.compile(args, "sm_90").ptx)


@pytest.mark.parametrize("d,bm,bn", [(128, 128, 32), (64, 128, 64), (128, 64, 64)])
@pytest.mark.slow
def test_flash_attention_tiles_of_32_query_rows_a_warp_do_not_spill(d, bm, bn, tmp_path):
    """acc * alpha + p @ v accumulating into the rescaled acc keeps flash attention's registers in
    bounds: at 128 query rows on 4 warps, D128 spilled 352 bytes and D64 8 bytes before (ptxas, sm_90)."""
    import os
    import re
    seq = 256
    q = np.zeros((2 * seq, d), ml_dtypes.bfloat16)
    args = (q, q, q, tile.partition(np.zeros((2 * seq, d), np.float32), (bm, d)), seq, 0.125, bn, True, 1)
    ck = FA.flash_fwd.compile(args, "sm_90")
    assert ck.threads == 128 and ("mma.sync" in ck.ptx or "wgmma.mma_async" in ck.ptx)
    target = "sm_90a" if ".target sm_90a" in ck.ptx else "sm_90"        # 64 rows on 4 warps: wgmma
    src = tmp_path / "fa.ptx"
    src.write_text(ck.ptx)
    from bridge import toolkit
    tool = toolkit.locate("ptxas").path
    if tool is None:
        pytest.skip("ptxas not found")
    r = subprocess.run([str(tool), "-v", f"-arch={target}", str(src), "-o", os.path.join(tmp_path, "fa.cubin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(re.search(r"(\d+) bytes spill stores", r.stdout + r.stderr).group(1)) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("kern", [bias_plus_product, product_plus_bias], ids=["bias+product", "product+bias"])
def test_gpu_a_product_accumulating_into_an_added_tile_matches_numpy(rng, kern):
    """`bias + a @ b` on the device: the mma accumulators start from the bias tile; ragged edges; the
    output starts poisoned."""
    import bridge
    a, b, product = operands(rng, "bf16", 70, 64, 100)
    bias = rng.standard_normal((70, 100)).astype(np.float32)
    out = bridge.full((70, 100), -7.0, "float32")
    kern(bridge.from_host(a), bridge.from_host(b), bridge.from_host(bias), tile.partition(out, (32, 32)), 64)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), (product + bias) * 0.5, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_flash_attention_staged_in_dynamic_shared_memory_matches_torch_sdpa(causal):
    """128 query rows at D128 (Q, K, V staged in 68 KiB of dynamic shared memory) on the device."""
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    d, bm, bn, seq = 128, 128, 64, 256
    g = torch.Generator(device="cuda").manual_seed(3 + causal)
    q, k, v = (torch.randn(2, 3, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((2 * 3 * seq, d), 12345.0, device="cuda")
    args = (*(x.reshape(-1, d) for x in (q, k, v)), tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
    FA.flash_fwd(*args)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert (out.reshape(ref.shape).double() - ref).abs().max().item() < 2e-2
    import bridge
    assert FA.flash_fwd.compile(args, bridge.current_device().arch).dynamic_smem > 48 * 1024
