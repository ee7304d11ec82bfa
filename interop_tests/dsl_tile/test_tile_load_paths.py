"""How the tile lowering's vector loads reach global memory: the switch nc_loads (default on) sends loads
of arrays a kernel never writes through the read-only path (ld.global.nc), or with it off through plain
ld.global as Triton emits them; the switch load_hint (default "none") adds cache qualifiers (an L2
prefetch size, L1::no_allocate) to every vector load, for memory-bound streams at the roofline
(benchmarks/triton_tutorials.py times tutorial 01 under each). Neither changes a value."""
from __future__ import annotations

import numpy as np
import pytest
from ptxas_kit import ptxas_verbose

from dsl import tile
from dsl.options import OptionError
from dsl.tile.switches import LOAD_HINTS
from interop_tests.dsl_tile.tutorial_kit import tutorial

HINTED = [h for h in LOAD_HINTS if h != "none"]


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


@pytest.mark.parametrize("nc", [True, False])
@pytest.mark.parametrize("hint", HINTED)
def test_a_load_hint_qualifies_every_vector_load_and_no_store(tmp_path, hint, nc):
    """Tutorial 01 under load_hint: its four 16-byte loads carry the qualifiers, after .nc where the
    read-only path takes them, its stores none; ptxas assembles the PTX for sm_80 and sm_90, and for
    sm_75, where the loads go without them."""
    t01 = tutorial("01_vector_add")
    x = np.zeros(1 << 20, np.float32)
    args = t01.launch_args(x, x, x.copy())
    kern = tile.kernel(t01.add_kernel.pyfunc, lowering={"load_hint": hint, "nc_loads": nc})
    for arch in ("sm_80", "sm_90"):
        ptx = kern.compile(args, arch).ptx
        want = f"ld.global{'.nc' if nc else ''}.{hint}.v4.f32"
        assert ptx.count(want) == 4 and ptx.count("@p ld.global") == 4, (arch, want)
        assert ptx.count("st.global.v4.f32 ") == 2 and "st.global." + hint not in ptx
        ptxas_verbose(ptx, arch, tmp_path)
    below = kern.compile(args, "sm_75").ptx              # ptxas takes an L2 prefetch size from sm_80 on
    assert "::" not in "".join(line for line in below.splitlines() if "@p ld.global" in line)
    ptxas_verbose(below, "sm_75", tmp_path)


def test_a_load_hint_reaches_packed_16_bit_loads_and_changes_no_value(rng):
    """Tutorial 05's f16 layer norm (8 halves a load, as packed words) under the 256-byte prefetch hint:
    the hint on each of its vector loads, and the simulator's result the default's, against float64."""
    t05 = tutorial("05_layer_norm")
    m, n = 37, 300
    x = rng.standard_normal((m, n)).astype(np.float16)
    w, b = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    outs = {}
    for hint in ("none", "L2::256B"):
        kern = tile.kernel(t05.layer_norm_fwd.pyfunc, lowering={"load_hint": hint})
        y, mean, rstd = (np.full(s, np.nan, dt) for s, dt in (((m, n), np.float16), (m, np.float32),
                                                              (m, np.float32)))
        args = t05.launch_args(x, y, w, b, mean, rstd)
        ptx = kern.compile(args, "sm_90").ptx
        loads = [line for line in ptx.splitlines() if "@p ld.global" in line]
        assert loads and all((".L2::256B." in line) == (hint != "none") for line in loads), hint
        kern.simulate(*args)
        outs[hint] = y
    xf = x.astype(np.float64)
    ref = (xf - xf.mean(1, keepdims=True)) / np.sqrt(xf.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(outs["none"].astype(np.float64), ref, rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(outs["L2::256B"], outs["none"])


def test_a_load_hint_is_part_of_the_compile_key_and_an_unknown_one_is_refused():
    from dsl.tile.switches import check_lowering, switches_key
    assert switches_key(check_lowering({"load_hint": "L2::256B"})) != switches_key(check_lowering({}))
    assert switches_key(check_lowering({"load_hint": "none"})) == switches_key(check_lowering({}))
    with pytest.raises(OptionError, match=r"load_hint must be one of 'none', 'L2::128B', 'L2::256B'"):
        check_lowering({"load_hint": "L2::512B"})


@pytest.mark.gpu
@pytest.mark.parametrize("hint", HINTED)
def test_tutorial_01_under_each_load_hint_adds_exactly_on_the_gpu(hint, rng):
    """On the device: x + y under each hint, n not a multiple of the block, the output poisoned first."""
    import bridge
    t01 = tutorial("01_vector_add")
    n = (1 << 20) + 77
    x, y = rng.random(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = bridge.from_host(np.full(n, np.nan, np.float32))
    kern = tile.kernel(t01.add_kernel.pyfunc, lowering={"load_hint": hint})
    kern(*t01.launch_args(bridge.from_host(x), bridge.from_host(y), out))
    ref = x.astype(np.float64) + y
    got = out.to_host().astype(np.float64)
    assert np.all(np.abs(got - ref) <= 2.0 ** -24 * np.abs(ref))
