"""The AOT C++ launcher launches with cuLaunchKernel, which cannot make a grid co-resident: exporting a
cooperative kernel (one that may call simt.grid.sync()) is refused with AotError naming the kernel, and
nothing is written; a pdl=True kernel (its wait needs no launch attribute) still exports."""
from __future__ import annotations

import pytest

from dsl.aot import AotError, compile_module

MODULE = '''
from dsl import f32, simt


@simt.kernel(block=128, cooperative=True)
def two_phase(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    simt.grid.sync()
    out[i] = a[i]
'''

PDL = '''
from dsl import f32, simt


@simt.kernel(block=128, pdl=True)
def step(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0
'''


def test_cooperative_kernel_is_not_exported(tmp_path):
    src = tmp_path / "coop_kernels.py"
    src.write_text(MODULE)
    out = tmp_path / "out"
    with pytest.raises(AotError, match=r"two_phase: cooperative=True kernels cannot be exported"):
        compile_module(src, "sm_90", out)
    assert not out.exists() or not any(out.iterdir())


def test_pdl_kernel_still_exports(tmp_path):
    src = tmp_path / "pdl_kernels.py"
    src.write_text(PDL)
    paths = compile_module(src, "sm_90", tmp_path / "out")
    ptx = next(p for p in paths.values() if str(p).endswith(".ptx")).read_text()
    assert "griddepcontrol.wait" in ptx
