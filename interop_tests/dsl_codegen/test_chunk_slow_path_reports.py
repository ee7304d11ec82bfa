"""A kernel that takes a slow path says so: the compile records each with its source line and reason,
logs it on `kernelbridge.perf` (once, at compile time), `.inspect()` lists it, and
`python -m dsl compile --explain FILE::KERNEL` prints it (issue 28: no silent performance cliff)."""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl.backend.inspect import slow_paths_of
from dsl.backend.ptxas import find_ptxas
from dsl.cli import main
from dsl.compiler import compile_kernel
from dsl.perf import SLOW_PATH_KINDS, SlowPath, local_memory, ptx_local_bytes
from interop_tests.dsl_codegen import chunk_kernels as C

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed: inspect() needs it")
FILE = C.__file__
ROOT = Path(__file__).resolve().parents[2]


def bf16_arrays(n: int = 1000):
    return np.zeros(n, ml_dtypes.bfloat16), np.zeros(n, ml_dtypes.bfloat16)


def test_explain_names_the_line_and_the_reason_and_prints_no_ptx(capsys):
    assert main(["compile", "--explain", "--no-cache", f"{FILE}::gelu_unrelated"]) == 0
    out = capsys.readouterr().out
    assert ".version" not in out                       # the explanation replaces the PTX on stdout
    load, store = C.marker_line("unrelated_load"), C.marker_line("unrelated_store")
    assert f"{FILE}:{load}: [unrelated-length] chunk loop loads of x: len(x) is not known to equal len(out)" in out
    assert 'add requires=["len(x) == len(out)"] to the kernel' in out
    assert f"{FILE}:{store}: [in-order] chunk loop stores of out: x's run-time bounds check" in out
    assert out.splitlines()[0] == "kernel gelu_unrelated for sm_90: 2 slow paths"


def test_explain_says_so_when_there_is_no_slow_path(capsys):
    assert main(["compile", "--explain", "--no-cache", f"{FILE}::gelu_bf16"]) == 0
    assert capsys.readouterr().out.startswith("kernel gelu_chunk for sm_90: no slow path found")


def test_explain_reports_a_strided_signature_and_still_writes_the_ptx_with_o(capsys, tmp_path):
    out_file = tmp_path / "k.ptx"
    assert main(["compile", "--explain", "--no-cache", "--sig", "f32[:],f32[::1]@16", "-o", str(out_file),
                 f"{FILE}::gelu_residual"]) == 0
    out = capsys.readouterr().out
    assert "[strided] chunk loop loads of x: x may be strided" in out
    assert out_file.read_text().startswith("//") and ".visible .entry gelu_residual" in out_file.read_text()


@pytest.mark.slow
def test_python_m_dsl_compile_explain_runs_end_to_end():
    r = subprocess.run([sys.executable, "-m", "dsl", "compile", "--explain", "--no-cache",
                        f"{FILE}::relu_some_paths"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    line = C.marker_line("some_paths_store")
    assert f"{FILE}:{line}: [in-order] chunk loop stores of out: out[k] is written only on some paths" in r.stdout


@needs_ptxas
def test_inspect_lists_the_slow_paths_with_their_lines():
    info = C.gelu_inplace.inspect(np.zeros(1000, np.float32), np.zeros(1000, np.float32), arch="sm_90")
    line = C.marker_line("inplace_store")
    assert SlowPath("overlap", "chunk loop stores of out: out may overlap another array (inplace=): its "
                    "accesses stay in order", line, FILE) in info.slow_paths
    text = str(info)
    assert "  slow paths: 2" in text and f"    {FILE}:{line}: [overlap]" in text


@needs_ptxas
def test_inspect_of_a_fast_kernel_has_no_slow_path():
    info = C.gelu_bf16.inspect(*bf16_arrays(), arch="sm_80")
    assert info.slow_paths == () and "slow paths" not in str(info)


def test_a_compile_logs_each_slow_path_once_on_kernelbridge_perf(caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KB_CACHE", raising=False)
    k = C.relu_some_paths
    sig = k.signature(np.zeros(64, np.float32), np.zeros(64, np.float32))
    with caplog.at_level(logging.INFO, logger="kernelbridge.perf"):
        first = compile_kernel(k.pyfunc, sig, k.options, "sm_90")
        records = [r for r in caplog.records if r.name == "kernelbridge.perf"]
        assert len(records) == 1
        r = records[0]
        assert (r.kb_kind, r.kb_line, r.kb_file, r.kb_kernel) == ("in-order", C.marker_line("some_paths_store"),
                                                                  FILE, "relu_some_paths")
        assert "relu_some_paths" in r.getMessage() and "written only on some paths" in r.getMessage()
        caplog.clear()
        hit = compile_kernel(k.pyfunc, sig, k.options, "sm_90")      # the disk cache: no compile, no record
        assert hit.metadata["cache"] == "disk"
        assert not [r for r in caplog.records if r.name == "kernelbridge.perf"]
    assert hit.metadata["slow_paths"] == first.metadata["slow_paths"]   # ... but the records are kept


def test_local_memory_in_the_ptx_is_a_slow_path_of_the_kernel_line():
    ptx = ".visible .entry k()\n{\n\t.local .align 8 .b8 \t__local_depot0[48];\n\t.reg .b64 %SP;\n}\n"
    assert ptx_local_bytes(ptx) == 48 and ptx_local_bytes(".visible .entry k()\n{\n}\n") == 0
    (p,) = local_memory(ptx, "k.py", 7)
    assert (p.kind, p.line, p.file) == ("local-memory", 7, "k.py") and "48 bytes in local memory" in p.reason


def test_ptxas_spills_are_a_slow_path_at_the_kernel_line():
    meta = {"kernel_loc": ["k.py", 3], "slow_paths": [{"kind": "strided", "reason": "r", "line": 9, "file": "k.py"}]}
    paths = slow_paths_of(meta, {"registers": 255, "spill_stores": 16, "spill_loads": 8})
    assert [(p.kind, p.line) for p in paths] == [("strided", 9), ("spills", 3)]
    assert "16 bytes of spill stores, 8 bytes of spill loads (255 registers)" in paths[1].reason
    assert slow_paths_of({}, {"spill_stores": 0, "spill_loads": 0}) == []


def test_a_slow_path_kind_must_be_a_documented_one():
    with pytest.raises(ValueError, match="kind: expected one of unrelated-length, strided"):
        SlowPath("slow", "why", 1, "k.py")


def test_every_slow_path_kind_is_listed_in_the_docs():
    docs = (ROOT / "docs" / "dsl.md").read_text()
    missing = [k for k in SLOW_PATH_KINDS if f"`{k}`" not in docs]
    assert not missing, f"docs/dsl.md does not list: {missing}"


TILE_KINDS = ("fma-product", "mma-sync-product", "sync-staging", "tile-scalar", "local-memory", "spills", "ring-fallback")


def test_every_kind_a_tile_kernel_reports_has_a_row_in_the_tile_docs():
    docs = (ROOT / "docs" / "tile.md").read_text()
    assert set(TILE_KINDS) <= set(SLOW_PATH_KINDS)
    missing = [k for k in TILE_KINDS if f"| `{k}` |" not in docs]
    assert not missing, f"docs/tile.md's slow-path table does not list: {missing}"
