"""CuPy RawKernel / RawModule source compiled by us (NVRTC, or nvcc) into a cubin with a contract from the
kernel's C signature; checked against the compiled parameters. CuPy itself is not needed: a stand-in
object with `.code`, `.name`, `.options` and `.backend` is what the adapter reads."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from bridge.errors import ContractDefinitionError, ForeignKernelError
from bridge.foreign import build_cupy, kernel_signature
from bridge.foreign.compile_cuda import nvrtc_problem
from bridge.foreign.cubin import cubin_params

CODE = r"""
// two kernels; the second one spans lines and has launch bounds
extern "C" __global__ void fill(float* out, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v;
}

extern "C" __global__ void __launch_bounds__(256)
scale(const float* __restrict__ x,   /* input */
      float* __restrict__ y,
      float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = SCALE * s * x[i];
}
"""


@dataclass
class RawKernelStandIn:
    """The attributes of cupy.RawKernel the adapter reads (cupy/_core/raw.pyx)."""

    code: str
    name: str | None = None
    options: tuple = ("-DSCALE=1.0f",)
    backend: str = "nvrtc"
    jitify: bool = False
    enable_cooperative_groups: bool = False


def test_kernel_signature_is_found_in_the_source():
    assert kernel_signature(CODE, "fill") == "void fill(float* out, float v, int n)"
    sig = kernel_signature(CODE, "scale")
    assert sig.startswith("void __launch_bounds__(256) scale(") and "float s, int n)" in sig
    with pytest.raises(ForeignKernelError, match=r"no `__global__ void scal\(\.\.\.\)` \(it has: fill, scale\)"):
        kernel_signature(CODE, "scal")


@pytest.mark.slow
def test_raw_kernel_source_becomes_a_checked_cubin_with_an_inferred_contract():
    b = build_cupy(RawKernelStandIn(CODE, "scale"), arch=90, requires=["len(x) == n", "len(y) == n"], grid_from="y")
    c = json.loads(b.contract.to_json())
    assert c["block"] == {"max_threads": 256} and c["grid_from"] == {"arg": "y", "per_thread": [1, 1, 1]}
    assert [(a["name"], a["kind"], a["dtype"], a.get("access")) for a in c["args"]] == [
        ("x", "array", "f32", "read"), ("y", "array", "f32", "write"), ("s", "scalar", "f32", None),
        ("n", "scalar", "i32", None)]
    assert [p.size for p in cubin_params(b.image, "scale")] == [8, 8, 4, 4]
    b.check()
    assert b.info["source"] == "cupy" and b.info["arch"] == 90 and b.name == "scale"


@pytest.mark.slow
def test_the_objects_options_reach_the_compiler():
    with pytest.raises(ForeignKernelError, match="SCALE"):
        build_cupy(RawKernelStandIn(CODE, "scale", options=()), arch=90)
    build_cupy(RawKernelStandIn(CODE, "scale", options=("-DSCALE=2.0f",)), arch=90)


@pytest.mark.slow
def test_nvrtc_compiles_when_its_library_loads():
    problem = nvrtc_problem()
    if problem:
        pytest.skip(f"NVRTC cannot be loaded here ({problem}); `pip install nvidia-cuda-nvrtc` gives it")
    b = build_cupy(RawKernelStandIn(CODE, "fill"), arch=90)
    assert b.info["compiler"] == "nvrtc"
    b.check()


@pytest.mark.slow
def test_backend_nvcc_compiles_with_nvcc(nvcc):
    b = build_cupy(RawKernelStandIn(CODE, "fill", backend="nvcc"), arch=90)
    assert b.info["compiler"] == "nvcc"
    assert [p.size for p in cubin_params(b.image, "fill")] == [8, 4, 4]


@pytest.mark.slow
def test_a_given_contract_that_does_not_match_the_compiled_kernel_is_refused():
    b = build_cupy(RawKernelStandIn(CODE, "fill"), arch=90,
                   contract="void fill(float* out, double v, int n)")
    with pytest.raises(ForeignKernelError, match=r"kernel parameter #1 \('v', f64 scalar\): the contract packs 8 "
                                                 r"bytes, the cubin declares 4 bytes"):
        b.check()


def test_raw_module_without_a_name_jitify_templates_and_unknown_backends_are_refused():
    with pytest.raises(TypeError, match="give name="):
        build_cupy(RawKernelStandIn(CODE), arch=90)
    with pytest.raises(ForeignKernelError, match="jitify=True is not supported"):
        build_cupy(RawKernelStandIn(CODE, "fill", jitify=True), arch=90)
    with pytest.raises(ForeignKernelError, match="cooperative groups"):
        build_cupy(RawKernelStandIn(CODE, "fill", enable_cooperative_groups=True), arch=90)
    with pytest.raises(ForeignKernelError, match="backend 'hiprtc'"):
        build_cupy(RawKernelStandIn(CODE, "fill", backend="hiprtc"), arch=90)
    templated = "template <typename T> __global__ void tk(T* out, int n) { }"
    with pytest.raises(ContractDefinitionError, match=r"parameter 'out' \(#0\): unsupported type 'T'"):
        build_cupy(RawKernelStandIn(templated, "tk"), arch=90)
    with pytest.raises(TypeError, match="RawKernel"):
        build_cupy(object(), "fill", arch=90)
