"""The AOT header's launchers follow the derived-grid rule through the contract: a kernel whose
threads range over no written slice (a block sum through atomics, the porting example's histogram)
has no grid_from, so its launcher takes a required `Grid` (no default); kernels with a grid_from
(stored at the ThreadIndex, or named by `grid_from=`) keep `Grid grid = {}`."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PORTING = ROOT / "examples" / "porting" / "dsl_kernels.py"

MODULE = '''
from dsl import f32, i32, simt


@simt.kernel(block=256)
def block_sum(a: simt.Array[f32], total: simt.DisjointSlice[f32]):
    g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if g < len(a):
        with simt.unsafe():
            simt.atomic.add(total, 0, a[g])


@simt.kernel(block=128, grid_from="data")
def hist_named(data: simt.Array[i32], hist: simt.DisjointSlice[i32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(data):
        with simt.unsafe():
            simt.atomic.add(hist, data[i], 1)


@simt.kernel
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
'''


def _header(src: Path, out: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "dsl.aot", str(src), "--arch", "sm_90", "--ptx-only", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return (out / f"{src.stem}_kernels.h").read_text()


def _signature(header: str, name: str) -> str:
    m = re.search(rf"inline ::kb_aot::Status {name}\(([^)]*)\)", header)
    assert m, f"no launcher {name} in the header"
    return m.group(1)


def _contract(header: str, name: str) -> dict:
    m = re.search(rf"^// {name}: contract (.*)$", header, re.M)
    assert m, f"no contract comment for {name}"
    return json.loads(m.group(1))


def test_launchers_without_grid_from_take_a_required_grid(tmp_path):
    src = tmp_path / "grids.py"
    src.write_text(MODULE)
    header = _header(src, tmp_path / "out")
    assert "grid_from" not in _contract(header, "block_sum")
    assert _signature(header, "block_sum").endswith("CUstream stream, ::kb_aot::Grid grid")
    assert _contract(header, "hist_named")["grid_from"] == {"arg": "data", "per_thread": [1, 1, 1]}
    assert _signature(header, "hist_named").endswith("CUstream stream = nullptr, ::kb_aot::Grid grid = {}")
    assert _contract(header, "copy")["grid_from"]["arg"] == "out"
    assert _signature(header, "copy").endswith("CUstream stream = nullptr, ::kb_aot::Grid grid = {}")


def test_the_porting_histogram_launcher_requires_its_grid(tmp_path):
    header = _header(PORTING, tmp_path / "out")
    assert "grid_from" not in _contract(header, "histogram256")
    assert _signature(header, "histogram256").endswith("CUstream stream, ::kb_aot::Grid grid")
    assert _signature(header, "blur3x3").endswith("::kb_aot::Grid grid = {}")
