"""Fast intake paths (cpp/native/intake_fast.cpp): torch tensors read through PyTorch's C shim give
exactly what torch's own attributes say, for every layout; nothing is cached per object (a tensor
changed in place is validated against its new metadata at the next launch); anything unusual and a
disabled fast path fall back to the attribute path with the same results."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import bridge
from bridge import _native

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch==2.13.0 for the CPU build)")

CONTRACT = json.dumps({
    "version": 1, "kernel": "k", "domain": 1, "block": {"exact": [32, 1, 1]},
    "args": [{"name": "a", "kind": "array", "dtype": "f32", "ndim": -1, "access": "read"},
             {"name": "n", "kind": "scalar", "dtype": "i64"}],
    "requires": ["a.size == n"]})


@pytest.fixture(params=[True, False], ids=["fast", "attributes"])
def path(request):
    _native.set_fast_intake(torch=request.param)
    yield request.param
    _native.set_fast_intake(torch=True)


def expected(t):
    """What torch itself says about `t` (not the code under test)."""
    item = t.element_size()
    return (tuple(t.shape), tuple(s * item for s in t.stride()), t.data_ptr())


def layouts():
    base = torch.arange(4 * 6 * 10, dtype=torch.float32).reshape(4, 6, 10)
    return {
        "contiguous": base,
        "permuted": base.permute(2, 0, 1),
        "sliced_with_offset": base[1:, 2:5, ::3],
        "expanded_zero_stride": torch.ones(1, 5).expand(7, 5),
        "zero_dim": torch.tensor(3.0),
        "empty": torch.empty(0, 4),
        "transposed_view": base[0].t(),
        "parameter": torch.nn.Parameter(torch.ones(3, 3)),
    }


@pytest.mark.parametrize("name", sorted(layouts()))
def test_every_layout_reads_as_torch_describes_it(path, name):
    t = layouts()[name]
    a = bridge.asarray(t)
    assert (tuple(a.shape), tuple(a.strides), a.ptr) == expected(t)
    assert a.dtype_name == "float32" and a.device == "cpu" and not a.readonly


@pytest.mark.parametrize("dtype,name", [(torch.float16, "float16"), (torch.bfloat16, "bfloat16"),
                                        (torch.float64, "float64"), (torch.int64, "int64"),
                                        (torch.int8, "int8"), (torch.uint8, "uint8"), (torch.bool, "bool")])
def test_dtypes_map_like_the_attribute_path(path, dtype, name):
    t = torch.zeros(3, 5, dtype=dtype)[:, 1:]
    a = bridge.asarray(t)
    assert a.dtype_name == name and (tuple(a.shape), tuple(a.strides), a.ptr) == expected(t)


def test_the_fast_path_is_on_and_self_checked():
    bridge.asarray(torch.ones(2))
    state, how = _native.fast_intake_status()["torch"]
    assert state == "on" and "self-checked" in how


@pytest.mark.parametrize("change", ["resize_", "as_strided_", "set_", "transpose_", "data_assignment"])
def test_a_tensor_changed_in_place_is_validated_against_its_new_metadata(path, change):
    from dsl.sim.validator import host_launcher
    launcher = host_launcher(CONTRACT, "k")
    t = torch.arange(12, dtype=torch.float32)
    launcher.validate_only((t, 12), grid=1)
    before = expected(t)
    if change == "resize_":
        t.resize_(20)
    elif change == "as_strided_":
        t.as_strided_((3, 2), (4, 1), 1)
    elif change == "set_":
        t.set_(torch.zeros(7))
    elif change == "transpose_":
        t.resize_(3, 4).transpose_(0, 1)
    else:
        t.data = torch.zeros(5)
    assert expected(t) != before
    size = t.numel()
    assert bridge.asarray(t).shape == tuple(t.shape)
    launcher.validate_only((t, size), grid=1)               # the new metadata is what is validated
    if size != 12:
        with pytest.raises(bridge.ShapeRelationError, match=rf"a.size = {size}"):
            launcher.validate_only((t, 12), grid=1)


def test_tensor_subclasses_take_the_attribute_path_with_the_same_result(path):
    class Tagged(torch.Tensor):
        pass
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).as_subclass(Tagged)[:, 1:]
    a = bridge.asarray(t)
    assert (tuple(a.shape), tuple(a.strides), a.ptr) == expected(t)


def test_a_lazy_conjugate_is_still_refused(path):
    t = torch.ones(3, dtype=torch.complex64).conj()
    with pytest.raises(ValueError, match="conjugate bit"):
        bridge.asarray(t)


@pytest.mark.slow
def test_kb_fast_intake_0_turns_the_fast_paths_off():
    code = ("import torch, bridge; from bridge import _native; bridge.asarray(torch.ones(2)); "
            "print(_native.fast_intake_status()['torch'])")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KB_FAST_INTAKE": "0"},
                         capture_output=True, text=True, check=True).stdout
    assert "'off'" in out and "KB_FAST_INTAKE" in out


def test_the_fast_path_reads_a_tensor_faster_than_its_attributes():
    """Not a timing bar (benchmarks/launch_breakdown.py measures that on the GPU): only that the shim is
    really the path taken — 20 000 reads through it take less time than through the attributes."""
    import time
    t = torch.ones(8)

    def run(fast):
        _native.set_fast_intake(torch=fast)
        t0 = time.perf_counter()
        for _ in range(20000):
            _native.intake_view(t)
        return time.perf_counter() - t0
    try:
        fast, slow = min(run(True) for _ in range(3)), min(run(False) for _ in range(3))
    finally:
        _native.set_fast_intake(torch=True)
    assert fast < slow


def test_resolving_the_imported_frameworks_ahead_leaves_no_path_unresolved():
    """bridge.capture() calls resolve_fast_intake() before a capture begins: resolving probes torch /
    CuPy with arrays they allocate, which a capture forbids. In a fresh process with torch imported and
    nothing taken in yet, the torch paths are unresolved before the call and resolved after it."""
    code = ("import torch, json\nfrom bridge import _native\n"
            "before = _native.fast_intake_status()\n_native.resolve_fast_intake()\n"
            "after = _native.fast_intake_status()\n"
            "print(json.dumps([before['torch'][0], before['torch_stream'][0], after['torch'][0], "
            "after['torch_stream'][0]]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before_t, before_s, after_t, after_s = json.loads(out.stdout.strip().splitlines()[-1])
    assert (before_t, before_s) == ("unresolved", "unresolved")
    assert after_t != "unresolved" and after_s != "unresolved"
