"""numba-cuda kernels compiled by numba for an explicit target (no GPU needed): the contract inferred from
the numba signature, the PTX entry numba emits matching what the contract packs (numba's 5 + 2*ndim
parameters per array), the entry renamed from numba's mangled name, and what is refused when wrapped.
Skips with the reason when numba-cuda or the NVVM / NVRTC it compiles with is missing."""
from __future__ import annotations

import importlib
import re

import pytest

from bridge.errors import ForeignKernelError
from bridge.foreign import build_numba

pytestmark = pytest.mark.slow                 # numba's import and NVVM: seconds on 2 cores

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'kernelbridge[foreign]')")
nk = importlib.import_module("foreign_numba_kernels")      # numba is there: any import error is a failure


@pytest.fixture(scope="module", autouse=True)
def _numba_can_compile():
    if (why := nk.compile_problem()) is not None:
        pytest.skip(why)


def _ptx_params(ptx: str, name: str) -> list[str]:
    """The `.param` types of `.entry name(...)`, read from the text directly."""
    body = re.search(rf"\.entry\s+{name}\s*\(([^)]*)\)", ptx).group(1)
    return re.findall(r"\.param\s+\.(\w+)", body)


def test_saxpy_contract_is_inferred_from_the_numba_signature_and_matches_numbas_ptx():
    b = build_numba(nk.saxpy, "void(float32, float32[::1], float32[::1], int64)", arch=90,
                    access={"x": "read"}, requires=["len(x) == n", "len(y) == n"], grid_from="y", block=256)
    b.check()
    assert b.name == "saxpy" and b.info["entry"].startswith("_ZN") and "saxpy" in b.info["entry"]
    assert b.info["entry"] not in b.info["ptx"]                  # renamed everywhere, params included
    # numba's layout: a, then 7 per 1-D array (meminfo parent nitems itemsize data shape stride), then n
    assert _ptx_params(b.info["ptx"], "saxpy") == ["f32"] + ["u64"] * 15
    d = b.contract.to_dict()
    assert len(d["args"]) == 16 and d["min_cc"] == 90 and d["block"] == {"exact": [256, 1, 1]}
    assert {a["name"]: a.get("access") for a in d["args"] if a["name"] in ("x", "y")} == {"x": "read",
                                                                                          "y": "readwrite"}


def test_two_d_any_layout_arrays_are_narrowed_to_c_and_the_entry_still_matches():
    b = build_numba(nk.scale_rows, "void(float64[:, :], float32[::1], float32[:, ::1])", arch=90,
                    grid_from="out", domain=2, requires=["x.shape == out.shape", "len(w) == out.shape[1]"])
    b.check()
    assert len(_ptx_params(b.info["ptx"], "scale_rows")) == 9 + 7 + 9
    assert b.layouts == {"x": "C", "w": "C", "out": "C"}
    assert "_kb_x_stride0 == 8 * x.shape[1]" in b.contract.to_dict()["requires"]


def test_readonly_arrays_from_numba_types_are_read():
    from numba.cuda import types
    ro = types.Array(types.float32, 1, "C", readonly=True)
    b = build_numba(nk.mul_sub, (ro, ro, types.float32[::1], types.float32, types.int32), arch=90)
    b.check()
    access = {a["name"]: a["access"] for a in b.contract.to_dict()["args"] if a["name"] in ("u", "v", "out")}
    assert access == {"u": "read", "v": "read", "out": "readwrite"}


def test_a_float16_scalar_numba_declares_as_16_bits_passes_the_check():
    b = build_numba(nk.fill, "void(float16[::1], float16)", arch=90)
    b.check()
    assert _ptx_params(b.info["ptx"], "fill")[-1] in ("u16", "b16")


def test_printf_is_left_to_the_driver():
    build_numba(nk.shout, "void(float32[::1])", arch=90).check()


@pytest.mark.parametrize("kernel,sig,match", [
    ("twice", "float32(float32)", "device function"),
    ("debugged", "void(float32[::1])", "debug=True"),
    ("half_add", "void(float16[::1], float16)", r"half_add: the kernel calls \w*half\w*, which numba links"),
    ("saxpy", "void(complex64, complex64[::1], complex64[::1], int64)", "parameter 'a': complex64"),
    ("saxpy", "int32(float32, float32[::1], float32[::1], int64)", "returns void, got int32"),
])
def test_what_numba_would_link_or_launch_differently_is_refused_when_wrapped(kernel, sig, match):
    with pytest.raises(ForeignKernelError, match=match):
        build_numba(getattr(nk, kernel), sig, arch=90)


def test_layout_any_is_refused_until_the_launcher_packs_byte_strides():
    with pytest.raises(ForeignKernelError, match="'x'.*layout 'any'"):
        build_numba(nk.scale_rows, "void(float64[:, :], float32[::1], float32[:, ::1])", arch=90,
                    layout={"x": "any"})


def test_not_a_numba_kernel_is_a_type_error():
    with pytest.raises(TypeError, match="expected a @numba.cuda.jit kernel, got function"):
        build_numba(lambda x: x, "void(float32[::1])", arch=90)
