"""`python -m dsl compile FILE.py::KERNEL` compiles tile kernels like SIMT kernels: partitions are
`dtype[...]/<tile shape>`, constants `=<literal>`, `%8` states rows of a multiple of 8; the PTX is the
one `kernel.ptx(...)` gives for arrays with those facts, and usage mistakes are clear exit-2 errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interop_tests.dsl_codegen.codegen_kit import require_ptxas

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 20 s of a full run on 2 cores: a subprocess a test

ROOT = Path(__file__).resolve().parents[2]
KERNELS = '''
from dsl import simt, tile, f32, TypeVar

E = TypeVar("E")

@tile.kernel
def add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))

@tile.kernel
def gemm(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], bk: tile.Constant[int]):
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)

@simt.kernel
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
'''


@pytest.fixture()
def src(tmp_path):
    p = tmp_path / "tk.py"
    p.write_text(KERNELS)
    return p


def run_cli(*args, cache):
    env = dict(os.environ, KB_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dsl", "compile", *args], capture_output=True, text=True, env=env,
                          cwd=str(ROOT))


def test_a_tile_kernel_compiles_to_the_ptx_its_ptx_method_gives(src, tmp_path):
    require_ptxas()
    r = run_cli(f"{src}::add", "--arch", "sm_80", "--sig", "f32[::1]@16%8,f32[:]@16,f32[::1]@16/1024",
                cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert ".entry add(" in r.stdout and ".target sm_80" in r.stdout
    assert "// ptxas sm_80 add:" in r.stderr and "tile_shape=(1024,)" in r.stderr
    sys.path.insert(0, str(src.parent))
    try:
        import tk
        a = np.zeros(1000, np.float32)          # C-contiguous, NumPy's 16-byte alignment, 1000 % 8 == 0
        strided = np.zeros(2002, np.float32)[::2]    # any layout, aligned start, 1001 elements
        out = np.zeros(1001, np.float32)        # the partition's facts: C, aligned, 1001 % 8 != 0
        from dsl import tile
        assert a.ctypes.data % 16 == 0 and out.ctypes.data % 16 == 0 and strided.ctypes.data % 16 == 0
        assert r.stdout == tk.add.ptx(a, strided, tile.partition(out, (1024,)), arch="sm_80")
    finally:
        sys.path.remove(str(src.parent))
        sys.modules.pop("tk", None)


def test_an_aligned_gemm_signature_reaches_the_sm90a_tensor_core_path(src, tmp_path):
    require_ptxas()
    out = tmp_path / "g.ptx"
    r = run_cli(f"{src}::gemm", "--arch", "sm_90", "--sig", "f16[:,::1]@16%8,f16[:,::1]@16%8,f32[:,::1]@16/128x128,=64",
                "-o", str(out), "--no-cache", cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    assert ".target sm_90a" in ptx and "wgmma.mma_async" in ptx
    assert "// kernel gemm for sm_90a" in r.stderr and "// ptxas sm_90a gemm:" in r.stderr
    assert "ConstParamType(value=64)" in r.stderr and "cache: none" in r.stderr


@pytest.mark.parametrize("target,sig,message", [
    ("add", None, "parameter 'a' (array) needs --sig"),
    ("add", "f32[:],f32[:],f32[:]", "parameter 'out' is a tile.Partition (dtype[...]/tile shape), got 'f32[:]'"),
    ("add", "f32[:],f32[:]/8,f32[:]/8", "parameter 'b' is a tile.Array (dtype[...]), got 'f32[:]/8'"),
    ("add", "f32[:],f32[:],f32[:]/100", "the tile shape needs 1 powers of two, got 'f32[:]/100'"),
    ("gemm", "f16[:,:],f32[:,:],f32[:,:]/64x64,=32", "parameter 'b': expected f16, got 'f32[:,:]'"),
    ("gemm", "f16[:,:],f16[:,:],f32[:,:]/64x64,32", "'32' is not a dtype; a tile.Constant is written =32"),
    ("gemm", "f16[:,:],f16[:,:],f32[:,:]/64x64,=[1", "a constant is `=` and a hashable Python literal"),
    ("gemm", "f16[:],f16[:,:],f32[:,:]/64x64,=32", "parameter 'a' is 2-D, got 'f16[:]'"),
    ("copy", "f32[:],f32[:]/128", "constants, partitions and %8 are for tile kernels"),
])
def test_tile_signature_mistakes_are_usage_errors(src, tmp_path, target, sig, message):
    args = [f"{src}::{target}"] + (["--sig", sig] if sig is not None else [])
    r = run_cli(*args, cache=tmp_path / "c")
    assert r.returncode == 2 and message in r.stderr and r.stderr.startswith("error: "), r.stderr
    assert r.stdout == ""


def test_something_that_is_no_kernel_is_named(src, tmp_path):
    r = run_cli(f"{src}::E", cache=tmp_path / "c")
    assert r.returncode == 2 and "'E' in" in r.stderr and "is not a @simt.kernel or @tile.kernel" in r.stderr
