"""Every refused launch raises its typed error naming the argument, and touches no buffer.

One real kernel (vecadd, hand-written PTX) under a strict contract: a 16-byte aligned C-contiguous
input `a`, any-layout `b`, a 16-byte aligned C-contiguous output `out`, an i32 `n`, three relations,
launch bounds 512, min_cc 70. Each case changes one thing; all device buffers are poisoned/recorded
before and compared after a device synchronisation.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import bridge
from bridge.errors import (AlignmentError, AliasingError, ArgumentCountError, ArgumentKindError, BlockSizeError,
                           ComputeCapabilityError, DeviceMismatchError, DTypeError, GridSizeError, LayoutError,
                           MissingContractError, NdimError, ReadOnlyError, ScalarRangeError, ShapeRelationError,
                           SharedMemoryError)

from runtime_helpers import arr, rt_ptx, scalar, vecadd_contract

pytestmark = pytest.mark.gpu
N = 1000 + 37
cp = pytest.importorskip("cupy")


class ReadOnlyView:
    """A CAI v3 view of a CuPy array flagged read-only."""

    def __init__(self, a):
        cai = dict(a.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], True)
        self.__cuda_array_interface__ = cai
        self.base = a


def contract_with(**over) -> str:
    return vecadd_contract(**over)


def u32_contract() -> str:
    c = json.loads(vecadd_contract())
    c["args"][3] = scalar("n", "u32")
    return json.dumps(c)


def matrix_contract() -> str:
    c = json.loads(vecadd_contract())
    c["args"][0] = arr("a", ndim=2, layout="C")
    c["requires"] = ["a.size == len(out)", "len(b) == len(out)", "n == len(out)"]
    return json.dumps(c)


@pytest.fixture(scope="module")
def kernels():
    ptx = rt_ptx()

    def load(contract: str, kernel: str = "vecadd"):
        c = json.loads(contract)
        c["kernel"] = kernel
        return bridge.load_module(ptx, contracts={kernel: json.dumps(c)}).get_kernel(kernel)

    return {
        "strict": load(vecadd_contract()),
        "exact128": load(contract_with(block={"exact": [128, 1, 1]})),
        "cc100": load(contract_with(min_cc=100)),
        "smem_max": load(contract_with(dynamic_smem={"max": 1024})),
        "smem_exact": load(contract_with(dynamic_smem={"exact": 512})),
        "smem_huge": load(contract_with(dynamic_smem={"max": 1 << 30})),
        "u32": load(u32_contract()),
        "matrix": load(matrix_contract()),
        "lb256": load(contract_with(block={"max_threads": 1024}), "vecadd_lb256"),
        "raw": bridge.load_module(ptx, name="raw").vecadd,
    }


@pytest.fixture
def env(rng):
    a = cp.asarray((rng.standard_normal(N) * 10).astype(np.float32))
    b = cp.asarray((rng.standard_normal(N) * 10).astype(np.float32))
    out = cp.full(N, -7.0, cp.float32)
    big = cp.asarray((rng.standard_normal(N + 8) * 10).astype(np.float32))
    return {"a": a, "b": b, "out": out, "big": big}


def _torch():
    return pytest.importorskip("torch")


# (id, kernel, build(env) -> (args, kwargs), error class, names that must appear in the message)
CASES = [
    ("a_float64", "strict", lambda e: ((e["a"].astype(cp.float64), e["b"], e["out"], N), {}), DTypeError, ["vecadd", "'a'", "float64"]),
    ("b_int32", "strict", lambda e: ((e["a"], e["b"].astype(cp.int32), e["out"], N), {}), DTypeError, ["'b'", "int32"]),
    ("out_float16", "strict", lambda e: ((e["a"], e["b"], e["out"].astype(cp.float16), N), {}), DTypeError, ["'out'", "float16"]),
    ("a_2d", "strict", lambda e: ((e["a"].reshape(1, N), e["b"], e["out"], N), {}), NdimError, ["'a'", "(1, 1037)"]),
    ("out_2d", "strict", lambda e: ((e["a"], e["b"], e["out"].reshape(N, 1), N), {}), NdimError, ["'out'"]),
    ("a_host_numpy", "strict", lambda e: ((cp.asnumpy(e["a"]), e["b"], e["out"], N), {}), DeviceMismatchError, ["'a'", "host"]),
    ("out_host_numpy", "strict", lambda e: ((e["a"], e["b"], np.zeros(N, np.float32), N), {}), DeviceMismatchError, ["'out'"]),
    ("out_readonly", "strict", lambda e: ((e["a"], e["b"], ReadOnlyView(e["out"]), N), {}), ReadOnlyError, ["'out'", "read-only"]),
    ("out_is_a", "strict", lambda e: ((e["a"], e["b"], e["a"], N), {}), AliasingError, ["'out'", "'a'"]),
    ("out_overlaps_b", "strict", lambda e: ((e["a"], e["big"][4:N + 4], e["big"][0:N], N), {}), AliasingError, ["'out'", "'b'"]),
    ("block_over_bounds", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"block": 1024}), BlockSizeError, ["512", "1024"]),
    ("block_over_device", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"block": (2048, 1, 1)}), BlockSizeError, ["2048"]),
    ("block_zero", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"block": (0, 1, 1)}), BlockSizeError, ["block"]),
    ("block_3d_over", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"block": (16, 16, 4)}), BlockSizeError, ["block"]),
    ("block_not_exact", "exact128", lambda e: ((e["a"], e["b"], e["out"], N), {"block": 256}), BlockSizeError, ["(128, 1, 1)", "(256, 1, 1)"]),
    ("block_over_func_attr", "lb256", lambda e: ((e["a"], e["b"], e["out"], N), {"block": 512}), BlockSizeError, ["vecadd_lb256", "256"]),
    ("grid_x_over", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"grid": (2**31, 1, 1), "block": 64}), GridSizeError, ["grid"]),
    ("grid_y_over", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"grid": (1, 70000, 1), "block": 64}), GridSizeError, ["65535"]),
    ("grid_zero", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"grid": (0, 1, 1), "block": 64}), GridSizeError, ["grid"]),
    ("smem_not_declared", "strict", lambda e: ((e["a"], e["b"], e["out"], N), {"shared_mem": 16}), SharedMemoryError, ["exactly 0"]),
    ("smem_over_contract", "smem_max", lambda e: ((e["a"], e["b"], e["out"], N), {"shared_mem": 2048}), SharedMemoryError, ["1024"]),
    ("smem_not_exact", "smem_exact", lambda e: ((e["a"], e["b"], e["out"], N), {"shared_mem": 256}), SharedMemoryError, ["512"]),
    ("smem_over_device", "smem_huge", lambda e: ((e["a"], e["b"], e["out"], N), {"shared_mem": 1 << 20}), SharedMemoryError, ["shared memory"]),
    ("min_cc", "cc100", lambda e: ((e["a"], e["b"], e["out"], N), {}), ComputeCapabilityError, ["sm_100"]),
    ("len_a_ne_out", "strict", lambda e: ((e["a"][:N - 1], e["b"], e["out"], N), {}), ShapeRelationError, ["len(a) == len(out)"]),
    ("len_b_ne_out", "strict", lambda e: ((e["a"], e["b"][:N - 2], e["out"], N), {}), ShapeRelationError, ["len(b) == len(out)"]),
    ("n_ne_len", "strict", lambda e: ((e["a"], e["b"], e["out"], N + 1), {}), ShapeRelationError, ["n == len(out)"]),
    ("n_too_big", "strict", lambda e: ((e["a"], e["b"], e["out"], 2**40), {}), ScalarRangeError, ["'n'", "2147483647"]),
    ("n_negative_u32", "u32", lambda e: ((e["a"], e["b"], e["out"], -1), {}), ScalarRangeError, ["'n'", "uint32"]),
    ("n_float", "strict", lambda e: ((e["a"], e["b"], e["out"], 1037.0), {}), DTypeError, ["'n'", "float"]),
    ("n_numpy_float", "strict", lambda e: ((e["a"], e["b"], e["out"], np.float64(N)), {}), DTypeError, ["'n'"]),
    ("too_few_args", "strict", lambda e: ((e["a"], e["b"], e["out"]), {}), ArgumentCountError, ["4 arguments", "got 3"]),
    ("too_many_args", "strict", lambda e: ((e["a"], e["b"], e["out"], N, N), {}), ArgumentCountError, ["got 5"]),
    ("array_for_scalar", "strict", lambda e: ((e["a"], e["b"], e["out"], e["b"]), {}), ArgumentKindError, ["'n'"]),
    ("scalar_for_array", "strict", lambda e: ((3.0, e["b"], e["out"], N), {}), ArgumentKindError, ["'a'"]),
    ("none_for_array", "strict", lambda e: ((e["a"], None, e["out"], N), {}), ArgumentKindError, ["'b'"]),
    ("string_for_array", "strict", lambda e: ((e["a"], e["b"], "out", N), {}), ArgumentKindError, ["'out'", "str"]),
    ("a_fortran_order", "matrix", lambda e: ((cp.asfortranarray(e["a"][:1036].reshape(28, 37)), e["b"][:1036], e["out"][:1036], 1036), {}), LayoutError, ["'a'"]),
    ("a_strided", "strict", lambda e: ((cp.repeat(e["a"], 2)[::2], e["b"], e["out"], N), {}), LayoutError, ["'a'", "strides"]),
    ("a_misaligned", "strict", lambda e: ((e["big"][1:N + 1], e["b"], e["out"], N), {}), AlignmentError, ["'a'", "16"]),
    ("out_misaligned", "strict", lambda e: ((e["a"], e["b"], e["big"][2:N + 2], N), {}), AlignmentError, ["'out'", "16"]),
    ("out_negative_strides", "strict", lambda e: ((e["a"], e["b"], e["out"][::-1], N), {}), LayoutError, ["'out'"]),
    ("torch_wrong_dtype", "strict", lambda e: ((_torch().zeros(N, dtype=_torch().float64, device="cuda"), e["b"], e["out"], N), {}), DTypeError, ["'a'", "float64"]),
    ("torch_2d_out", "matrix", lambda e: ((e["a"][:1036].reshape(28, 37), e["b"][:1036], _torch().zeros(37, 28, device="cuda").T, 1036), {}), NdimError, ["'out'"]),
    ("torch_host_tensor", "strict", lambda e: ((_torch().zeros(N), e["b"], e["out"], N), {}), DeviceMismatchError, ["'a'"]),
    ("no_contract", "raw", lambda e: ((e["a"], e["b"], e["out"], N), {}), MissingContractError, ["vecadd", "unsafe_launch"]),
]


def _device_buffers(args, env):
    bufs = [v for v in env.values()]
    for a in args:
        if isinstance(a, cp.ndarray) and not any(a is b for b in bufs):
            bufs.append(a)
        elif type(a).__module__.startswith("torch") and getattr(a, "is_cuda", False):
            bufs.append(cp.asarray(a))
    return bufs


def test_matrix_has_at_least_forty_distinct_cases():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_launch_touches_nothing(case, kernels, env):
    _, which, build, exc, names = case
    args, kwargs = build(env)
    bufs = _device_buffers(args, env)
    before = [cp.asnumpy(b).copy() for b in bufs]
    with pytest.raises(exc) as info:
        kernels[which](*args, **kwargs)
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"
    bridge.synchronize()
    for b, snapshot in zip(bufs, before):
        np.testing.assert_array_equal(cp.asnumpy(b), snapshot)
    np.testing.assert_array_equal(cp.asnumpy(env["out"]), np.full(N, -7.0, np.float32))


def test_the_same_arguments_launch_when_valid(kernels, env):
    kernels["strict"](env["a"], env["b"], env["out"], N)
    bridge.synchronize()
    np.testing.assert_allclose(cp.asnumpy(env["out"]), cp.asnumpy(env["a"] + env["b"]), rtol=1e-6)
