"""A chunk loop's loads and stores stay vector accesses whatever math its body calls (issue 28: GELU
bf16 with tanh fell back to 2-byte accesses and ran at 0.35x its C++ peer), as wide as the chunk's
bytes and the data pointer's alignment allow; where moving them would change what the kernel does
(a conditional write, overlapping arrays, a run-time bounds check) they stay per element."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from dsl import f32
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.types import bf16, f16
from interop_tests.dsl_codegen import chunk_kernels as C

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
_ACCESS = re.compile(r"\b(ld|st)\.global(?:\.nc)?(?:\.v(\d))?\.[bfu](\d+)\s")

# widest access (bytes) a chunk of n elements allows when the arrays are 16-byte aligned: the chunk
# starts at thread * n elements, so its offset is aligned to the largest power of two dividing its bytes
WIDEST_2_BYTE = {2: 4, 3: 2, 4: 8, 5: 2, 6: 4, 7: 2, 8: 16, 9: 2, 10: 4, 11: 2, 12: 8, 13: 2, 14: 4, 15: 2, 16: 16}
WIDEST_4_BYTE = {2: 8, 3: 4, 4: 16, 5: 4, 6: 8, 7: 4, 8: 16, 9: 4, 10: 8, 11: 4, 12: 16, 13: 4, 14: 8, 15: 4, 16: 16}
DTYPES = {"bf16": (bf16, ml_dtypes.bfloat16, WIDEST_2_BYTE), "f16": (f16, np.float16, WIDEST_2_BYTE),
          "f32": (f32, np.float32, WIDEST_4_BYTE)}


def widest(ptx: str, op: str) -> int:
    """The widest global `op` ("ld" or "st") access of the PTX, in bytes."""
    sizes = [int(m.group(2) or 1) * int(m.group(3)) // 8 for m in _ACCESS.finditer(ptx) if m.group(1) == op]
    assert sizes, f"no {op}.global in the PTX"
    return max(sizes)


def arrays(np_dt, n: int = 4096, offset: int = 0):
    buf = np.zeros(n + 16, np_dt)
    return buf[offset:offset + n], np.zeros(n, np_dt)


@pytest.mark.parametrize("kernel, np_dt", [(C.gelu_bf16, ml_dtypes.bfloat16), (C.gelu_f16, np.float16),
                                           (C.gelu_f32, np.float32)], ids=["bf16x8", "f16x8", "f32x4"])
def test_gelu_tanh_chunk_loads_and_stores_are_16_byte_vectors(kernel, np_dt):
    ptx = kernel.ptx(*arrays(np_dt), arch="sm_90")
    assert re.search(r"ld\.global\.nc\.v4\.b32", ptx), "the chunk's loads should be one 16-byte access"
    assert re.search(r"st\.global\.v4\.b32", ptx), "the chunk's stores should be one 16-byte access"
    assert widest(ptx, "ld") == widest(ptx, "st") == 16


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel, np_dt", [(C.gelu_bf16, ml_dtypes.bfloat16), (C.gelu_f16, np.float16),
                                           (C.gelu_f32, np.float32), (C.gelu_residual, np.float32)])
def test_gelu_chunk_ptx_assembles(kernel, np_dt, arch):
    ptx = kernel.ptx(*arrays(np_dt), arch=arch)
    assert re.search(r"\.v4\.b32", ptx)
    assemble(ptx, arch)        # raises on any ptxas error


@pytest.mark.parametrize("n", range(2, 17))
@pytest.mark.parametrize("name", list(DTYPES))
def test_chunk_accesses_are_as_wide_as_size_and_alignment_allow(name, n):
    dt, np_dt, table = DTYPES[name]
    kernel = C.make_gelu(dt, n)
    ptx = kernel.ptx(*arrays(np_dt), arch="sm_90")
    assert widest(ptx, "ld") == table[n] and widest(ptx, "st") == table[n]


@pytest.mark.parametrize("name", list(DTYPES))
def test_an_unaligned_input_loads_per_element_and_the_aligned_output_still_stores_vectors(name):
    dt, np_dt, table = DTYPES[name]
    n = 16 // np.dtype(np_dt).itemsize              # one 16-byte chunk
    ck = C.make_gelu(dt, n).compile(*arrays(np_dt, offset=1), arch="sm_90")   # x starts one element in
    assert widest(ck.ptx, "ld") == np.dtype(np_dt).itemsize
    assert widest(ck.ptx, "st") == 16
    kinds = [p["kind"] for p in ck.metadata["slow_paths"]]
    assert kinds == ["unaligned"]


def test_a_strided_input_loads_per_element():
    x = np.zeros(2 * 4096, np.float32)[::2]
    ck = C.gelu_f32.compile(x, np.zeros(4096, np.float32), arch="sm_90")
    assert widest(ck.ptx, "ld") == 4 and widest(ck.ptx, "st") == 16
    assert [p["kind"] for p in ck.metadata["slow_paths"]] == ["strided"]


def test_read_modify_write_of_the_output_is_one_vector_load_and_one_vector_store():
    ptx = C.gelu_residual.ptx(*arrays(np.float32), arch="sm_90")
    assert len(re.findall(r"ld\.global\.v4\.b32", ptx)) == 1        # out, read (not .nc: it is written)
    assert len(re.findall(r"ld\.global\.nc\.v4\.b32", ptx)) == 1     # x
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == 1


def test_a_write_on_some_paths_keeps_per_element_stores():
    """Storing the whole chunk would write elements the body leaves alone."""
    ck = C.relu_some_paths.compile(*arrays(np.float32), arch="sm_90")
    assert widest(ck.ptx, "st") == 4 and widest(ck.ptx, "ld") == 16      # x's loads still move
    assert [p["kind"] for p in ck.metadata["slow_paths"]] == ["in-order"]


def test_arrays_that_may_overlap_keep_their_order():
    ck = C.gelu_inplace.compile(*arrays(np.float32), arch="sm_90")
    assert widest(ck.ptx, "ld") == 4 and widest(ck.ptx, "st") == 4
    assert [p["kind"] for p in ck.metadata["slow_paths"]] == ["overlap", "overlap"]


def test_a_bounds_checked_input_keeps_the_output_stores_in_order():
    """x may fault at element j: the stores of elements before j must have happened."""
    ck = C.gelu_unrelated.compile(*arrays(ml_dtypes.bfloat16), arch="sm_90")
    assert widest(ck.ptx, "ld") == 2              # (its 8-byte stores are the fault record's)
    assert not re.search(r"st\.global\.v", ck.ptx) and re.search(r"st\.global\.b16", ck.ptx)
    assert [p["kind"] for p in ck.metadata["slow_paths"]] == ["unrelated-length", "in-order"]
