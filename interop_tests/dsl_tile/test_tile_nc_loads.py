"""The tile lowering switch nc_loads (dsl/tile/switches.py, default on): vector loads of arrays a kernel
never writes go through the read-only path (ld.global.nc), or with it off through plain ld.global as
Triton emits them, for measuring streaming kernels (benchmarks/triton_tutorials.py, tutorial 01)."""
from __future__ import annotations

import numpy as np

from dsl import tile
from interop_tests.dsl_tile.tutorial_kit import tutorial


def test_nc_loads_off_reads_read_only_arrays_with_plain_vector_loads():
    """The lowering switch nc_loads (default on): tutorial 01's x and y through ld.global.nc, or with
    it off through plain ld.global.v4 as Triton emits them; the stores are the same either way."""
    t01 = tutorial("01_vector_add")
    x = np.zeros(1 << 20, np.float32)
    args = t01.launch_args(x, x, x.copy())
    on = t01.add_kernel.compile(args, "sm_90").ptx
    off = tile.kernel(t01.add_kernel.pyfunc, lowering={"nc_loads": False}).compile(args, "sm_90").ptx
    assert on.count("ld.global.nc.v4.f32") == 4 and "ld.global.v4.f32" not in on
    assert off.count("ld.global.v4.f32") == 4 and ".nc" not in off
    assert on.count("st.global.v4.f32") == off.count("st.global.v4.f32") == 2
