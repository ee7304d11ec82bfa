"""Line tables cost nothing at run time: for every zoo kernel and every tile case, the machine code
ptxas makes from the PTX with line tables is the code it makes from the PTX without them (every
`.text.<kernel>` section of the two cubins byte-identical: instructions and their encodings), on sm_80
and sm_90 (sm_90a where the lowering takes wgmma). One test disassembles a pair as well (cuobjdump
-sass, or nvdisasm), so the section reading is checked against NVIDIA's own tool. Runs where ptxas is
installed (`pip install 'kernelbridge[tools]'`); skipped with the reason otherwise."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dsl.backend.ptxas import find_ptxas
from dsl.backend.toolkit import find_tool
from interop_tests.kernels_zoo import ZOO
from interop_tests.lineinfo.lineinfo_kit import (cubin_text_sections, has_debug_trace, ptx_target,
                                                 ptxas_cubin, tile_cases, tile_ptx, zoo_ptx)

_CUOBJDUMP, _NVDISASM = find_tool("cuobjdump"), find_tool("nvdisasm")
pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (CUDA toolkit missing)")
needs_disassembler = pytest.mark.skipif(
    _CUOBJDUMP is None and _NVDISASM is None,
    reason="neither cuobjdump nor nvdisasm is installed (pip install nvidia-cuda-cuobjdump)")


def _cubin(ptx: str, tmp: Path, name: str) -> Path:
    cubin = tmp / f"{name}.cubin"
    ptxas_cubin(ptx, ptx_target(ptx), cubin)     # sm_90a stays sm_90a
    return cubin


def _code(ptx: str, tmp: Path, name: str) -> dict[str, bytes]:
    code = cubin_text_sections(_cubin(ptx, tmp, name).read_bytes())
    assert code and all(code.values()), f"no machine code in the cubin: {sorted(code)}"
    return code


def _sass(ptx: str, tmp: Path, name: str) -> str:
    cubin = _cubin(ptx, tmp, name)
    cmd = [_CUOBJDUMP, "-sass", str(cubin)] if _CUOBJDUMP else [_NVDISASM, "-c", str(cubin)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.count("/*0000*/") >= 1, f"no SASS instructions in the disassembly:\n{text[:2000]}"
    return text


def _assert_same_sass(on: str, off: str, tmp: Path) -> None:
    assert has_debug_trace(on) and not has_debug_trace(off)
    assert ptx_target(on) == ptx_target(off)
    assert _code(on, tmp, "lineinfo") == _code(off, tmp, "plain")


@needs_disassembler
@pytest.mark.slow
def test_the_section_comparison_sees_what_the_disassembler_sees(tmp_path):
    """The code sections are what cuobjdump disassembles: equal sections, equal SASS text; a kernel
    with different code has different sections and different SASS."""
    case = next(c for c in ZOO if c.name == "stencil5")
    other = next(c for c in ZOO if c.name == "saxpy")
    on, off = zoo_ptx(case, "sm_90", True), zoo_ptx(case, "sm_90", False)
    assert _code(on, tmp_path, "a") == _code(off, tmp_path, "b")
    assert _sass(on, tmp_path, "a") == _sass(off, tmp_path, "b")
    different = zoo_ptx(other, "sm_90", False)
    assert _code(different, tmp_path, "c") != _code(off, tmp_path, "b")
    assert _sass(different, tmp_path, "c") != _sass(off, tmp_path, "b")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_sass_is_unchanged_by_line_tables(case, arch, tmp_path):
    _assert_same_sass(zoo_ptx(case, arch, True), zoo_ptx(case, arch, False), tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(tile_cases()))
@pytest.mark.slow
def test_tile_sass_is_unchanged_by_line_tables(name, arch, tmp_path):
    _assert_same_sass(tile_ptx(name, arch, True), tile_ptx(name, arch, False), tmp_path)
