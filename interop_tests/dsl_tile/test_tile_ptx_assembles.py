"""Every issue kernel compiles through tile IR → SIMT IR → llvmlite → PTX and assembles with ptxas
for sm_80 and sm_90; the PTX shows the intended lowering (warp shuffles for row reductions, barriers
around shared-memory staging, read-only global loads, an exact block size)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 64 s of a full run on 2 cores: ptxas on every kernel

z = np.zeros


def cases():
    f32 = np.float32
    return {
        "add": (K.add, (z(10, f32), z(10, f32), tile.partition(z(10, f32), (1024,)))),
        "saxpy": (K.saxpy, (2.0, z(10, f32), z(10, f32), tile.partition(z(10, f32), (1024,)))),
        "softmax": (K.softmax, (z((4, 100), f32), tile.partition(z((4, 100), f32), (1, 128)))),
        "softmax_16k": (K.softmax, (z((4, 100), f32), tile.partition(z((4, 100), f32), (1, 16384)))),
        "layernorm": (K.layernorm, (z((4, 100), f32), z(100, f32), z(100, f32), 1e-5,
                                    tile.partition(z((4, 100), f32), (2, 128)))),
        "block_sum": (K.block_sum, (z(10, f32), tile.partition(z(1, f32), (1,)), 4096)),
        "transpose": (K.transpose, (z((4, 100), f32), tile.partition(z((100, 4), f32), (32, 32)))),
        "gemm_f16": (K.gemm, (z((4, 4), np.float16), z((4, 4), np.float16),
                              tile.partition(z((4, 4), f32), (64, 64)), 32)),
        "gemm_bf16": (K.gemm, (z((4, 4), ml_dtypes.bfloat16), z((4, 4), ml_dtypes.bfloat16),
                               tile.partition(z((4, 4), f32), (64, 64)), 32)),
        "gemm_tf32": (K.gemm, (z((4, 4), f32), z((4, 4), f32), tile.partition(z((4, 4), f32), (64, 64)), 16)),
        "gemm_nt_bf16": (K.gemm_nt, (z((4, 4), ml_dtypes.bfloat16), z((4, 4), ml_dtypes.bfloat16),
                                     tile.partition(z((4, 4), f32), (64, 64)), 32)),
        "gemm_nt_tf32": (K.gemm_nt, (z((4, 4), f32), z((4, 4), f32), tile.partition(z((4, 4), f32), (64, 64)), 16)),
        "gemm_split_k": (K.gemm_split_k, (z((256, 512), ml_dtypes.bfloat16), z((512, 256), ml_dtypes.bfloat16),
                                          tile.partition(z((512, 256), f32), (128, 256)), 64)),
        "sum_splits": (K.sum_splits, (z((512, 256), f32), 2, tile.partition(z((256, 256), f32), (16, 256)))),
        "gemm_cast_bf16": (K.gemm_cast, (z((256, 512), ml_dtypes.bfloat16), z((512, 256), ml_dtypes.bfloat16),
                                          tile.partition(z((256, 256), ml_dtypes.bfloat16), (128, 256)), 64)),
        "gemm_bias_relu": (K.gemm_bias_relu, (z((4, 4), np.float16), z((4, 4), np.float16), z(4, f32),
                                              tile.partition(z((4, 4), f32), (64, 64)), 32)),
    }


CASES = cases()


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_assembles(name, arch):
    kernel, args = CASES[name]
    ck = kernel.compile(args, arch)
    assert f".entry {ck.name}" in ck.ptx
    assert f".reqntid {ck.threads}, 1, 1" in ck.ptx
    usage, _ = assemble(ck.ptx, arch + ("a" if ".target sm_90a" in ck.ptx else ""))   # wgmma needs sm_90a
    assert usage and usage[0].spill_stores == 0, usage


def test_row_softmax_uses_warp_shuffles_and_one_barrier_stage():
    kernel, args = CASES["softmax_16k"]
    ptx = kernel.ptx(*args, arch="sm_90")
    assert "shfl.sync.bfly" in ptx
    assert "bar.sync" in ptx
    assert "ld.global.nc" in ptx


def test_transpose_stages_through_shared_memory():
    kernel, args = CASES["transpose"]
    ptx = kernel.ptx(*args, arch="sm_80")
    assert ".shared" in ptx and "bar.sync" in ptx and "st.shared" in ptx


def test_contract_names_arguments_access_and_block():
    kernel, args = CASES["layernorm"]
    c = json.loads(kernel.compile(args, "sm_90").contract_json)
    assert c["kernel"] == "layernorm"
    assert [a["name"] for a in c["args"]] == ["x", "w", "b", "eps", "out"]
    assert c["args"][-1]["access"] == "write" and c["args"][0]["access"] == "read"
    assert c["args"][3] == {"name": "eps", "kind": "scalar", "dtype": "f32"}
    assert c["block"]["exact"][0] >= 32


def test_partition_contract_derives_the_grid_block_and_shared_memory():
    kernel, args = CASES["add"]
    ck = kernel.compile(args, "sm_90")
    c = json.loads(ck.contract_json)
    assert c["grid_from"] == {"arg": "out", "tile": [1024]}        # one block per tile
    assert c["block"] == {"exact": [ck.threads, 1, 1]}
    kernel, args = CASES["gemm_f16"]
    ck = kernel.compile(args, "sm_90")
    c = json.loads(ck.contract_json)
    assert c["grid_from"]["tile"] == list(args[2].tile_shape)      # 2-D tiles: flattened into grid.x
    assert c.get("dynamic_smem", {"exact": 0}) == {"exact": ck.dynamic_smem}


def test_contract_validator_derives_the_tile_grid_like_the_gpu_launch():
    from dsl.sim.validator import host_launcher
    a, b = z((130, 64), np.float16), z((64, 70), np.float16)
    part, k = tile.partition(z((130, 70), np.float32), (64, 64)), 32
    ck = K.gemm.compile((a, b, part, k), "sm_90")
    assert part.num_tiles == 6
    grid, block, smem, skip = host_launcher(ck.contract_json, "gemm").validate_only((a, b, part.array))
    assert grid == (part.num_tiles, 1, 1) and block == (ck.threads, 1, 1) and not skip
    assert smem == ck.dynamic_smem


def test_contiguous_arguments_specialise_addressing():
    a = np.zeros(10, np.float32)
    strided = np.zeros(20, np.float32)[::2]
    out = tile.partition(np.zeros(10, np.float32), (1024,))
    c1 = json.loads(K.add.compile((a, a, out), "sm_90").contract_json)
    c2 = json.loads(K.add.compile((strided, a, out), "sm_90").contract_json)
    assert c1["args"][0]["layout"] == "C" and c2["args"][0]["layout"] == "any"


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("tshape", [(128, 128), (64, 64), (128, 256)])
def test_aligned_gemm_uses_tensor_cores(arch, dtype, tshape):
    a = np.zeros((256, 256), dtype)           # rows of 256 elements: 16-byte aligned, divisible by 8
    args = (a, a, tile.partition(z((256, 256), np.float32), tshape), 32)
    ck = K.gemm.compile(args, arch)
    name = "bf16" if dtype is ml_dtypes.bfloat16 else "f16"
    c = json.loads(ck.contract_json)
    if arch == "sm_90" and tshape[0] == 128:      # two warpgroups of 64 rows: Hopper wgmma fed by TMA
        assert f"wgmma.mma_async.sync.aligned.m64n{tshape[1]}k16.f32.{name}.{name}" in ck.ptx
        assert "wgmma.wait_group.sync.aligned 1;" in ck.ptx and ".target sm_90a" in ck.ptx
        copies = ck.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")
        per_stage = 1 + tshape[1] // 64              # one A box, BN/64 B boxes (prologue stages + loop)
        assert copies >= 2 * per_stage and copies % per_stage == 0
        assert "mbarrier.try_wait.parity.shared::cta.b64" in ck.ptx and "cp.async.cg" not in ck.ptx
        assert ck.ptx.count(".param .align 64 .b8 gemm_param_") == 2     # the two __grid_constant__ maps
        assert c["tensor_maps"] == [{"arg": "a", "box": [128, 32], "swizzle": 64},
                                    {"arg": "b", "box": [32, 64], "swizzle": 128}]
    else:
        assert "cp.async.cg.shared.global" in ck.ptx and "cp.async.wait_group" in ck.ptx
        assert "tensor_maps" not in c
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{name}.{name}.f32" in ck.ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ck.ptx
    assert c["args"][0]["align"] == 16 and c["args"][0]["layout"] == "C"
    # c: the epilogue's paired stores rely on its rows too (dsl/tile/lower/store.py)
    assert c["requires"] == ["a.shape[1] % 8 == 0", "b.shape[1] % 8 == 0", "c.shape[1] % 8 == 0"]
    stages = (tshape[0] * 32 + 32 * tshape[1]) * 2        # operand bytes per pipeline stage
    assert c["dynamic_smem"]["exact"] >= 2 * stages + 1024 and c["dynamic_smem"]["exact"] == ck.dynamic_smem
    usage = ptxas_usage(ck.ptx, "sm_90a" if ".target sm_90a" in ck.ptx else arch)
    assert usage["spill"] == 0 and usage["smem"] <= 48 * 1024


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("tshape", [(128, 128), (64, 64)])
def test_aligned_f32_gemm_uses_tf32_tensor_cores(arch, tshape):
    a = np.zeros((256, 256), np.float32)
    ck = K.gemm.compile((a, a, tile.partition(z((256, 256), np.float32), tshape), 32), arch)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ck.ptx
    assert "cvt.rna.tf32.f32" in ck.ptx and "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ck.ptx
    assert "cp.async.cg.shared.global" in ck.ptx and "wgmma" not in ck.ptx
    stages = (tshape[0] * 32 + 32 * tshape[1]) * 4        # f32 operand bytes per pipeline stage
    assert json.loads(ck.contract_json)["dynamic_smem"]["exact"] >= 2 * stages + 1024
    assert ptxas_usage(ck.ptx, arch)["spill"] == 0


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("dtype,bk", [(np.float16, 32), (ml_dtypes.bfloat16, 64), (np.float32, 32), (np.float32, 16)],
                         ids=["f16", "bf16", "tf32-bk32", "tf32-bk16"])
@pytest.mark.parametrize("tshape", [(128, 128), (128, 256)])
def test_a_k_major_b_feeds_wgmma_through_one_tma_box_on_sm90(dtype, bk, tshape):
    """B stored N x K (`tile.transpose(tile.load(bt, (j, k), (BN, BK)))`): on sm_90 one TMA box
    [BN, BK] per stage, swizzled like A, read by wgmma as a K-major operand: imm-trans-b 0 for
    16-bit types, and tf32 wgmma (K-major only) for f32 operands."""
    a = np.zeros((256, 256), dtype)
    ck = K.gemm_nt.compile((a, a, tile.partition(z((256, 256), np.float32), tshape), bk), "sm_90")
    es = np.dtype(dtype).itemsize
    swizzle = bk * es                                   # one 64- or 128-byte swizzle row per tile row
    c = json.loads(ck.contract_json)
    assert c["tensor_maps"] == [{"arg": "a", "box": [128, bk], "swizzle": swizzle},
                                {"arg": "bt", "box": [tshape[1], bk], "swizzle": swizzle}]
    wg = [line for line in ck.ptx.splitlines() if "wgmma.mma_async" in line]
    if dtype == np.float32:
        assert wg and all(f"m64n{tshape[1]}k8.f32.tf32.tf32" in w and w.rstrip().endswith("p, 1, 1; }") for w in wg)
    else:
        name = "f16" if dtype == np.float16 else "bf16"
        assert wg and all(f"m64n{tshape[1]}k16.f32.{name}.{name}" in w and "p, 1, 1, 0, 0; }" in w for w in wg)
    per_stage = bk * es // 32                            # one wgmma per 32 bytes of K per stage
    assert len(wg) >= per_stage and len(wg) % per_stage == 0   # (LLVM may peel the first iteration)
    copies = ck.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")
    assert copies >= 2 * 2 and copies % 2 == 0           # one A box and one B box per stage
    assert c["requires"] == ["a.shape[1] % 8 == 0", "bt.shape[1] % 8 == 0", "c.shape[1] % 8 == 0"]
    usage = ptxas_usage(ck.ptx, "sm_90a")
    assert usage["spill"] == 0


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "tf32"])
def test_a_k_major_b_is_read_with_plain_ldmatrix_on_sm80(dtype):
    a = np.zeros((256, 256), dtype)
    ck = K.gemm_nt.compile((a, a, tile.partition(z((256, 256), np.float32), (128, 128)), 32), "sm_80")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ck.ptx and ".trans" not in ck.ptx
    assert "ld.shared.b32" not in ck.ptx and "wgmma" not in ck.ptx and "cp.async.cg.shared.global" in ck.ptx
    assert ("m16n8k8.row.col.f32.tf32" if dtype == np.float32 else "m16n8k16.row.col.f32.f16") in ck.ptx
    assert ptxas_usage(ck.ptx, "sm_80")["spill"] == 0


def test_row_major_f32_operands_stay_on_mma_sync_on_sm90():
    """tf32 wgmma reads B K-major only: a row-major f32 B keeps the mma.sync loop."""
    a = np.zeros((256, 256), np.float32)
    ck = K.gemm.compile((a, a, tile.partition(z((256, 256), np.float32), (128, 128)), 32), "sm_90")
    assert "wgmma" not in ck.ptx and "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ck.ptx


def ptxas_usage(ptx: str, arch: str) -> dict:
    """ptxas -v for any target, including arch-specific ones (sm_90a) the shared helper maps away."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([find_ptxas(), f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    log = proc.stdout + proc.stderr
    return {"spill": int(re.search(r"(\d+) bytes spill stores", log).group(1)),
            "smem": int(re.search(r"(\d+) bytes smem", log).group(1)) if "bytes smem" in log else 0}


def test_an_unaligned_gemm_operand_is_never_assumed_aligned():
    odd = np.zeros((256, 250), np.float16)    # last extent not a multiple of 8
    odd32 = np.zeros((256, 250), np.float32)
    # f32 (no tensor-core tile.matmul outside the GEMM loop): the portable FMA path, relying on nothing
    # about a (b and c, aligned with whole 16-byte rows, are read and written 16 bytes a run)
    ck = K.gemm.compile((odd32, np.zeros((250, 256), np.float32), tile.partition(z((256, 256), np.float32), (64, 64)),
                         32), "sm_90")
    assert "mma.sync" not in ck.ptx and "fma.rn.f32" in ck.ptx
    contract = json.loads(ck.contract_json)
    assert contract["args"][0]["align"] == 4 and contract["requires"] == ["b.shape[1] % 8 == 0", "c.shape[1] % 8 == 0"]
    # f16: no cp.async GEMM loop; each product runs on the tensor cores, the odd operand staged through
    # registers (the contract states nothing about it), the aligned one copied by cp.async (stated)
    ck = K.gemm.compile((odd, np.zeros((250, 256), np.float16), tile.partition(z((256, 256), np.float32), (64, 64)),
                         32), "sm_90")
    contract = json.loads(ck.contract_json)
    assert "wgmma.mma_async" in ck.ptx          # sm_90: 64 rows on 4 warps, one warpgroup's m64 wgmma
    assert contract["args"][0]["align"] == 2 and all(not r.startswith("a.") for r in contract["requires"])
    assert contract["requires"] == ["b.shape[1] % 8 == 0", "c.shape[1] % 8 == 0"] and contract["args"][1]["align"] == 16
