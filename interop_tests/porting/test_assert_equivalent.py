"""bridge.testing.assert_equivalent on the CPU: DSL kernels on the simulator against NumPy references
and against each other (SIMT vs tile), planted bugs found and reported so they replay, and kernels
whose contracts describe different jobs refused with a typed error."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge import testing as T
from bridge.contract import ArgSpec, LaunchContract
from bridge.fatbin import embedded_contracts
from dsl import f32, i32, simt, tile
from interop_tests.dsl_tile import tile_kernels_lib as tiles
from interop_tests.kernels_zoo import ZOO_BY_NAME
from interop_tests.porting.cpp_ports import PORTS

TOL = {"block_reduce_sum": {"rtol": 1e-4, "atol": 1e-3}, "legacy_softmax": {"rtol": 1e-5, "atol": 1e-7}}
# the ports whose contracts derive no grid launch as the C++ application does (both are grid-stride)
GRIDS = {"block_reduce_sum": lambda s: (max(1, -(-s["x"][0] // 1024)),), "legacy_softmax": lambda s: (max(1, s["x"][0]),)}
BUG_AT = 417


@simt.kernel(block=(256, 1, 1))
def vecadd_planted(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i] + (f32(1) if i == BUG_AT else f32(0))      # one wrong element


@tile.kernel
def add_planted(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    v = tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape)
    out.store(tile.where(t * 256 + tile.arange(256) == BUG_AT, v * 2.0, v))


def cpp_contract(name: str) -> _native.Contract:
    return _native.Contract(embedded_contracts(bridge.cpp_kernels.path(name).read_bytes())[name])


def vecadd_ref(a, b, out):
    out[...] = a + b


@pytest.mark.parametrize("name", sorted(PORTS))
def test_dsl_ports_of_the_cpp_kernels_match_numpy_on_the_simulator(name):
    port, ref = PORTS[name]
    report = T.assert_equivalent(ref, port, trials=3, seed=100, size=(1500, 333), grid=GRIDS.get(name),
                                 **TOL.get(name, {}))
    assert len(report.launches) == 5                  # 3 trials + the all-ones and empty edge cases
    assert report.full_coverage                       # every element of every write-only output written
    assert report.compared == {"saxpy": ("y",), "transpose": ("out",), "block_reduce_sum": ("out",),
                               "legacy_softmax": ("y",)}[name]


@pytest.mark.parametrize("name", sorted(PORTS))
def test_dsl_ports_are_compatible_with_the_cpp_contracts(name):
    T.check_compatible(cpp_contract(name), PORTS[name][0])
    T.check_compatible(PORTS[name][0], cpp_contract(name))


def test_planted_one_element_bug_reports_argument_index_values_seed_and_sizes():
    with pytest.raises(T.EquivalenceError) as info:
        T.assert_equivalent(ZOO_BY_NAME["vecadd"].kernel, vecadd_planted, trials=3, seed=77)
    e = info.value
    assert e.argument == "out" and e.index == (BUG_AT,) and e.seed == 77
    assert float(e.actual) == float(e.expected) + 1.0 or abs(float(e.actual) - float(e.expected) - 1) < 1e-6
    text = str(e)
    assert "candidate vecadd_planted (@simt.kernel) differs from the reference vecadd (@simt.kernel) in argument 'out' (#2)" in text
    assert f"1 of {e.sizes['out'][0]} element(s) differ (exact); first at index ({BUG_AT},)" in text
    assert "seed=77" in text and f"out={e.sizes['out']}" in text
    assert "replay: bridge.testing.arguments(<vecadd>, size=1000, seed=77" in text
    # the report replays: the same launch shows the same wrong element
    args = T.arguments(ZOO_BY_NAME["vecadd"].kernel, size=1000, seed=e.seed)
    vecadd_planted.simulate(*args, grid=args.grid, block=args.block)
    assert float(args["out"][BUG_AT]) == float(e.actual)


def test_simt_kernel_and_its_tile_rewrite_agree_and_a_tile_bug_is_found():
    report = T.assert_equivalent(ZOO_BY_NAME["vecadd"].kernel, tiles.add, trials=2, seed=5,
                                 options={"tile_shapes": {"out": (256,)}})
    assert "candidate add (@tile.kernel) matches reference vecadd (@simt.kernel) on 4 launch(es)" in str(report)
    with pytest.raises(T.EquivalenceError, match=rf"first at index \({BUG_AT},\)") as info:
        T.assert_equivalent(tiles.add, add_planted, trials=1, seed=5, options={"tile_shapes": {"out": (256,)}})
    assert info.value.argument == "out"


def test_exact_by_default_ulps_and_rtol_on_request():
    @simt.kernel(block=(128, 1, 1), requires=["len(x) == len(out)"])
    def one_ulp_off(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = x[i] * f32(1.0000001)          # x * (1 + 2**-23): one or two ulps above x

    def same(x, out):
        out[...] = x
    with pytest.raises(T.EquivalenceError, match=r"\(exact\)"):
        T.assert_equivalent(same, one_ulp_off, trials=1, seed=1)
    T.assert_equivalent(same, one_ulp_off, trials=2, seed=1, ulps=2)
    T.assert_equivalent(same, one_ulp_off, trials=2, seed=1, rtol=2.5e-7)
    with pytest.raises(T.EquivalenceError, match=r"\(ulps=1\)"):
        T.assert_equivalent(same, one_ulp_off, trials=1, seed=1, ulps=1)


def test_ulp_distance_counts_representable_floats_across_zero():
    from bridge.testing._compare import close
    x = np.array([1.0, -3.5, 0.0, 1e-45], np.float32)
    up1 = np.nextafter(x, np.float32(np.inf))
    up2 = np.nextafter(up1, np.float32(np.inf))
    assert close(x, up1, None, None, 1).all() and not close(x, up1, None, None, 0).any()
    assert not close(x, up2, None, None, 1).any() and close(x, up2, None, None, 2).all()
    assert close(np.float32([0.0]), np.float32([-0.0]), None, None, None).all()        # +0 == -0
    tiny = np.float32([1e-45])
    assert close(tiny, -tiny, None, None, 2).all() and not close(tiny, -tiny, None, None, 1).all()
    nan = np.float32([np.nan])
    assert close(nan, nan, None, None, None).all() and not close(nan, np.float32([1]), 1.0, 1.0, 10).any()


def _k(args, requires=(), **kw):
    return LaunchContract("k", args, block=128, requires=requires, grid_from=kw.pop("grid_from", None), **kw)


A = ArgSpec.array


@pytest.mark.parametrize("ref, cand, message", [
    (_k([A("x", "f32"), A("y", "f32", access="write")]), _k([A("x", "f32"), A("y", "f64", access="write")]),
     r"argument 'y' \(reference #1, candidate #1\): reference dtype f32, candidate f64"),
    (_k([A("x", "f32"), A("y", "f32", access="write")]), _k([A("x", "f32", access="readwrite"), A("y", "f32", access="write")]),
     r"argument 'x' .*: written by the candidate only \(reference access read, candidate readwrite\)"),
    (_k([A("x", "f32"), A("y", "f32", access="write")]), _k([A("x", "f32"), A("y", "f32", 2, access="write")]),
     r"argument 'y' .*: reference is 1-d, candidate 2-d"),
    (_k([A("x", "f32"), A("y", "f32", access="write")]), _k([A("x", "f32"), A("y", "f32", access="write"), A("z", "f32")]),
     r"argument 'z' \(#2\): the candidate has this f32 array, the reference has none"),
    (_k([A("x", "f32"), A("y", "f32", access="write"), ArgSpec.scalar("s", "f32")]),
     _k([A("x", "f32"), A("y", "f32", access="write")]),
     r"argument 's' \(#2\): the reference has this f32 scalar, the candidate has none"),
])
def test_incompatible_argument_lists_are_refused(ref, cand, message):
    with pytest.raises(T.IncompatibleContractsError, match=message) as info:
        T.check_compatible(ref, cand)
    assert info.value.differences


def test_relations_that_disagree_are_refused_both_ways():
    ref = _k([A("x", "f32"), A("y", "f32", access="write"), ArgSpec.scalar("n", "i32")],
             ["len(x) == n", "len(y) == n"])
    stricter = _k([A("x", "f32"), A("y", "f32", access="write")], ["len(x) == len(y)", "len(x) % 4 == 0"])
    with pytest.raises(T.IncompatibleContractsError,
                       match=r"candidate contract of k refuses a launch the reference contract of k accepts .*len\(x\) % 4 == 0"):
        T.check_compatible(ref, stricter)
    wider = _k([A("x", "f32"), A("y", "f32", access="write")], ["len(y) >= len(x)"])
    with pytest.raises(T.IncompatibleContractsError,
                       match=r"reference contract of k refuses a launch the candidate contract of k accepts"):
        T.check_compatible(ref, wider)
    loose = _k([A("x", "f32"), A("y", "f32", access="write"), ArgSpec.scalar("n", "i32")])
    with pytest.raises(T.IncompatibleContractsError,
                       match=r"has the integer argument 'n' \(#2\) that the .* lacks, and none of its relations determines it"):
        T.check_compatible(wider, loose)
    T.check_compatible(ref, _k([A("x", "f32"), A("y", "f32", access="write")], ["len(x) == len(y)"]))


def test_python_reference_may_return_outputs_and_a_wrong_count_is_a_type_error():
    k = ZOO_BY_NAME["vecadd"].kernel
    T.assert_equivalent(lambda a, b, out: a + b, k, trials=1, seed=2)
    T.assert_equivalent(lambda a, b, out: {"out": a + b}, k, trials=1, seed=2)
    with pytest.raises(TypeError, match=r"returned 2 value\(s\) but the kernel writes 1 argument\(s\) \(out\)"):
        T.assert_equivalent(lambda a, b, out: (a, b), k, trials=1, seed=2)


def test_a_failing_side_is_reported_with_its_seed_and_a_fault_names_the_kernel():
    def broken(a, b, out):
        raise ZeroDivisionError("boom")
    with pytest.raises(T.EquivalenceError, match=r"reference broken \(Python function\) failed with ZeroDivisionError: boom\n  launch 1 .*seed=9"):
        T.assert_equivalent(broken, ZOO_BY_NAME["vecadd"].kernel, trials=1, seed=9)

    @simt.kernel(block=(64, 1, 1))
    def reads_past(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = a[i + 1]
    with pytest.raises(T.EquivalenceError, match=r"candidate reads_past .* failed with KernelFault: reads_past: index \d+ out of bounds for array 'a'"):
        T.assert_equivalent(lambda a, out: None, reads_past, trials=1, seed=9, edges=False)


class _OverrunKernel:
    """A kernel-like object (duck-typed: a contract hook and a simulate method) that writes one
    element past the end of its output, as a C++ kernel with an off-by-one bound would."""
    __name__ = "overrun"

    def launch_contract(self, dtypes=None):
        return LaunchContract("overrun", [A("x", "f32", layout="C"), A("y", "f32", layout="C", access="write")],
                              block=64, requires=["len(x) == len(y)"], grid_from="y")

    def simulate(self, x, y, grid=None, block=None):
        n = len(y)
        y[...] = x
        np.lib.stride_tricks.as_strided(y, shape=(n + 1,))[n] = 7.0


def test_a_write_past_the_end_of_an_output_is_caught_in_the_guard_zone():
    with pytest.raises(T.EquivalenceError, match=r"candidate overrun .* wrote outside argument 'y': element \d+ of its base allocation \(layout C\) changed"):
        T.assert_equivalent(lambda x, y: x, _OverrunKernel(), trials=1, seed=3)


def test_bad_calls_are_typed_errors():
    k = ZOO_BY_NAME["vecadd"].kernel
    with pytest.raises(ValueError, match=r"device=True, but both sides run on the host"):
        T.assert_equivalent(vecadd_ref, T.simulated(k), device=True, trials=1)
    if not bridge.gpu_available():
        with pytest.raises(bridge.NoDeviceError,
                           match=r"assert_equivalent needs a GPU \(device=True was given\), but none is usable"):
            T.assert_equivalent(vecadd_ref, k, device=True, trials=1)
    with pytest.raises(TypeError, match=r"at least one side must be a kernel with a launch contract"):
        T.assert_equivalent(vecadd_ref, vecadd_ref)
    with pytest.raises(TypeError, match=r"is a contract, not something that runs"):
        T.assert_equivalent(cpp_contract("saxpy"), PORTS["saxpy"][0])
    with pytest.raises(ValueError, match=r"trials: expected an int >= 1, got 0"):
        T.assert_equivalent(vecadd_ref, k, trials=0)
    with pytest.raises(ValueError, match=r"library: expected bridge, cupy or torch \(device arrays\), got 'numpy'"):
        T.assert_equivalent(vecadd_ref, k, library="numpy")
    with pytest.raises(TypeError, match=r"candidate: expected a kernel .* got int"):
        T.assert_equivalent(vecadd_ref, 3)


def test_kernels_without_a_derivable_grid_take_the_given_grid():
    @simt.kernel(block=(128, 1, 1))
    def hist(data: simt.Array[i32], h: simt.DisjointSlice[i32]):
        i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        if i < len(data):
            with simt.unsafe():
                simt.atomic.add(h, data[i], 1)

    def ref(data, h):
        h[...] += np.bincount(data, minlength=len(h)).astype(np.int32)

    bins = {"data": lambda rng, shape, dt: rng.integers(0, 37, shape).astype(dt)}
    grid = lambda s: (-(-s["data"][0] // 128),)      # noqa: E731 - threads over data, not over h
    T.assert_equivalent(ref, T.configured(hist, grid=grid), trials=2, seed=4, values=bins,
                        shapes={"h": (37,)}, edges=False)
    with pytest.raises(T.EquivalenceError, match=r"argument 'h'"):    # one block covers 128 of ~1000 items
        T.assert_equivalent(ref, T.configured(hist, grid=(1,)), trials=1, seed=4, values=bins,
                            shapes={"h": (37,)}, edges=False)


@simt.kernel(block=(64, 1, 1), shared_mem=("max", 1024), requires=["len(x) == len(out)"])
def via_dynamic_smem(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    with simt.unsafe():
        buf = simt.shared.dynamic(f32)
        t = simt.threadIdx.x
        if i < len(x):
            buf[t] = x[i]
        simt.sync_threads()
        if i < len(out):
            out[i] = buf[t]


def test_configured_passes_dynamic_shared_memory():
    copy = lambda x, out: x      # noqa: E731
    T.assert_equivalent(copy, T.configured(via_dynamic_smem, shared_mem=256), trials=1, seed=6)
    with pytest.raises(T.EquivalenceError, match=r"failed with KernelFault: via_dynamic_smem: index 0 out of bounds for array 'buf' with extent 0"):
        T.assert_equivalent(copy, via_dynamic_smem, trials=1, seed=6, edges=False)   # 0 bytes: buf is empty
