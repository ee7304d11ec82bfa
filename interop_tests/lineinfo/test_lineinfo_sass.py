"""Line tables cost nothing at run time: for every zoo kernel and every tile case, the SASS ptxas makes
from the PTX with line tables is the SASS it makes from the PTX without them (cuobjdump -sass, or
nvdisasm, text identical: instructions and their encodings), on sm_80 and sm_90 (sm_90a where the
lowering takes wgmma). Runs where ptxas and a disassembler are installed (`pip install
'kernelbridge[tools]'` brings both); skipped with the reason otherwise."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dsl.backend.ptxas import find_ptxas
from dsl.backend.toolkit import find_tool
from interop_tests.kernels_zoo import ZOO
from interop_tests.lineinfo.lineinfo_kit import (has_debug_trace, ptx_target, ptxas_cubin, tile_cases,
                                                 tile_ptx, zoo_ptx)

_CUOBJDUMP, _NVDISASM = find_tool("cuobjdump"), find_tool("nvdisasm")
pytestmark = [
    pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (CUDA toolkit missing)"),
    pytest.mark.skipif(_CUOBJDUMP is None and _NVDISASM is None,
                       reason="neither cuobjdump nor nvdisasm is installed (pip install nvidia-cuda-cuobjdump)"),
]


def _sass(ptx: str, tmp: Path, name: str) -> str:
    arch = ptx_target(ptx)                       # sm_90a stays sm_90a
    cubin = tmp / f"{name}.cubin"
    ptxas_cubin(ptx, arch, cubin)
    cmd = [_CUOBJDUMP, "-sass", str(cubin)] if _CUOBJDUMP else [_NVDISASM, "-c", str(cubin)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.count("/*0000*/") >= 1, f"no SASS instructions in the disassembly:\n{text[:2000]}"
    return text


def _assert_same_sass(on: str, off: str, tmp: Path) -> None:
    assert has_debug_trace(on) and not has_debug_trace(off)
    assert ptx_target(on) == ptx_target(off)
    assert _sass(on, tmp, "lineinfo") == _sass(off, tmp, "plain")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_sass_is_unchanged_by_line_tables(case, arch, tmp_path):
    _assert_same_sass(zoo_ptx(case, arch, True), zoo_ptx(case, arch, False), tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(tile_cases()))
def test_tile_sass_is_unchanged_by_line_tables(name, arch, tmp_path):
    _assert_same_sass(tile_ptx(name, arch, True), tile_ptx(name, arch, False), tmp_path)
