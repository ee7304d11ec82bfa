"""The XLA FFI handler's validation and parameter packing, without a GPU (`_jax_ffi.pack` runs the steps
the handler runs before cuLaunchKernel): XLA buffers are validated by the kernel's contract with the
one validator, refusals are the bridge's typed errors, and the parameter bytes follow the launcher's
view ABI (pointer, extents, strides in elements; scalars in their dtype; then the fault record)."""
from __future__ import annotations

import struct

import integration_kernels as K
import numpy as np
import pytest

from bridge import _native
from bridge.errors import (AlignmentError, AliasingError, ArgumentCountError, ContractDefinitionError, DTypeError,
                           NdimError, ScalarRangeError, ShapeRelationError)
from dsl import i32, simt

ffi = pytest.importorskip("dsl.integrations._jax_ffi",
                          reason="the JAX FFI handler was not built (jaxlib not importable when kernelbridge "
                                 "was installed)")


@simt.kernel(block=64, requires=["x.shape == out.shape"])
def shift(x: simt.Array[i32], out: simt.DisjointSlice[i32], k: i32):
    i = simt.thread.index_1d()
    out[i] = x[i] + k


def limits() -> tuple[dict, dict]:
    lim, at = _native.DeviceLimits(), _native.FuncAttrs()
    d = {k: getattr(lim, k) for k in ("cc", "max_threads_per_block", "max_block", "max_grid", "smem_per_block",
                                      "smem_per_block_optin", "sm_count")}
    d["cc"] = 90
    return d, {k: getattr(at, k) for k in ("max_threads_per_block", "static_smem", "num_regs", "max_dynamic_smem")}


def entry(kernel, stand_ins, slots, grid=(0, 0, 0), block=(0, 0, 0)) -> int:
    contract = kernel.compile(*stand_ins, arch="sm_90").contract_json
    lim, attrs = limits()
    return ffi.register(0, 0, 0, contract, lim, attrs, grid, block, -1, slots)


def aligned(n, dtype):
    from dsl.integrations._kernels import standin
    return standin(dtype, (n,))


@pytest.fixture(scope="module")
def shift_entry():
    a = aligned(100, "i32")
    return entry(shift, (a, a.copy(), 1), [("operand", 0), ("result", 0), ("scalar", 7)])


def test_handler_capsule_and_entries_exist(shift_entry):
    assert type(ffi.handler()).__name__ == "PyCapsule"
    assert ffi.entry_count() > shift_entry


def test_parameters_follow_the_view_abi_and_the_grid_is_derived(shift_entry):
    grid, block, smem, skip, data = ffi.pack(shift_entry, [(0x10000, [100], "i32")], [(0x20000, [100], "i32")])
    assert grid == (2, 1, 1) and block == (64, 1, 1) and smem == 0 and not skip
    assert struct.unpack("<QqqQqqi", data) == (0x10000, 100, 1, 0x20000, 100, 1, 7)


def test_two_d_buffers_pack_row_major_strides_in_elements():
    a = np.zeros((4, 6), np.float32)
    e = entry(K.add2d, (a, a, a.copy()), [("operand", 0), ("operand", 1), ("result", 0)])
    grid, block, _, _, data = ffi.pack(e, [(0x1000, [4, 6], "f32"), (0x2000, [4, 6], "f32")],
                                       [(0x3000, [4, 6], "f32")])
    assert block == (16, 16, 1) and grid == (1, 1, 1)
    assert struct.unpack("<" + "Qqqqq" * 3, data) == (0x1000, 4, 6, 6, 1, 0x2000, 4, 6, 6, 1, 0x3000, 4, 6, 6, 1)


def test_empty_buffers_launch_nothing(shift_entry):
    _, _, _, skip, _ = ffi.pack(shift_entry, [(0, [0], "i32")], [(0, [0], "i32")])
    assert skip


def test_wrong_dtype_is_the_bridge_dtype_error(shift_entry):
    with pytest.raises(DTypeError, match=r"shift: argument 'x' \(#0\): expected 1-D C-contiguous int32 array, got "
                                         r"float32 array of shape \(100,\)") as ei:
        ffi.pack(shift_entry, [(0x10000, [100], "f32")], [(0x20000, [100], "i32")])
    assert ei.value.arg == 0 and ei.value.arg_name == "x" and ei.value.kernel == "shift"


def test_relation_violation_is_a_shape_relation_error(shift_entry):
    with pytest.raises(ShapeRelationError, match=r"shift: argument 'out' \(#1\): expected x.shape == out.shape"):
        ffi.pack(shift_entry, [(0x10000, [99], "i32")], [(0x20000, [100], "i32")])


def test_misaligned_buffer_is_refused_for_a_kernel_specialised_on_alignment(shift_entry):
    with pytest.raises(AlignmentError, match=r"shift: argument 'x' \(#0\): expected data pointer aligned to 16 bytes"):
        ffi.pack(shift_entry, [(0x10004, [100], "i32")], [(0x20000, [100], "i32")])


def test_result_overlapping_an_operand_is_an_aliasing_error(shift_entry):
    with pytest.raises(AliasingError, match=r"shift: argument 'out' \(#1\): expected memory disjoint from argument 'x'"):
        ffi.pack(shift_entry, [(0x10000, [100], "i32")], [(0x10100, [100], "i32")])


def test_buffer_of_more_than_eight_dimensions_is_refused(shift_entry):
    with pytest.raises(NdimError, match=r"shift: argument 'x' \(#0\): expected at most 8 dimensions, got an array of 9"):
        ffi.pack(shift_entry, [(0x10000, [1] * 9, "i32")], [(0x20000, [1], "i32")])


def test_missing_buffers_are_an_argument_count_error(shift_entry):
    with pytest.raises(ArgumentCountError, match=r"shift: the XLA call has 1 operands and 0 results"):
        ffi.pack(shift_entry, [(0x10000, [100], "i32")], [])


def test_scalar_out_of_range_is_a_scalar_range_error():
    a = aligned(10, "i32")
    e = entry(shift, (a, a.copy(), 1), [("operand", 0), ("result", 0), ("scalar", 1 << 40)])
    with pytest.raises(ScalarRangeError, match=r"shift: argument 'k' \(#2\)"):
        ffi.pack(e, [(0x10000, [10], "i32")], [(0x20000, [10], "i32")])


def test_kernel_with_runtime_checks_gets_the_fault_record_parameter():
    x, idx = aligned(8, "f32"), aligned(4, "i32")
    e = entry(K.gather, (x, idx, aligned(4, "f32")), [("operand", 0), ("operand", 1), ("result", 0)])
    _, _, _, _, data = ffi.pack(e, [(0x1000, [8], "f32"), (0x2000, [4], "i32")], [(0x3000, [4], "f32")])
    assert len(data) == 3 * 24 + 8          # three views, then the (here: absent, 0) fault record pointer
    assert struct.unpack("<Q", data[-8:]) == (0,)


def test_malformed_contract_and_slots_are_refused():
    lim, attrs = limits()
    with pytest.raises(ContractDefinitionError, match=r"k: invalid contract: args\[0\].name: missing"):
        ffi.register(0, 0, 0, '{"version": 1, "kernel": "k", "args": [{"kind": "nope"}]}', lim, attrs,
                     (0, 0, 0), (0, 0, 0), -1, [])
    a = aligned(4, "i32")
    with pytest.raises(ValueError, match="2 slots for 3 kernel parameters"):
        entry(shift, (a, a.copy(), 1), [("operand", 0), ("result", 0)])
    with pytest.raises(ValueError, match="slot kind must be operand, result or scalar"):
        entry(shift, (a, a.copy(), 1), [("operand", 0), ("result", 0), ("constant", 1)])


def test_unknown_entry_is_refused():
    with pytest.raises(KeyError, match="unknown launch entry"):
        ffi.pack(10 ** 9, [], [])


def test_no_faults_are_reported_when_none_were_recorded():
    assert ffi.take_faults() == []
