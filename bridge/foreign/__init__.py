"""Foreign kernels under our contracts: Triton, CuPy RawKernel/RawModule/ElementwiseKernel, numba-cuda, and
any PTX/cubin/fatbin with a C signature, launched through the one native validator on the bridge's
streams (docs/interop.md).

Architecture: every source ends as a `ForeignBuild` (image, entry name, contract, hidden trailing
parameters) that `load` checks against the image's own parameter list and loads through
`bridge.load_module`. `signature` turns C signatures into contracts (`declare`), `ptx` / `cubin` /
`image` read an image's parameter lists and `params` compares them with what a contract packs,
`compile_cuda` compiles CUDA source (NVRTC or nvcc), and the adapters `cupy_source`, `elementwise`
(CuPy ElementwiseKernels, generated anew from `elementwise_params`), `triton_jit` and `numba_jit`
produce builds from the foreign objects; `launch.ForeignKernel` fills parameters the foreign
system adds (Triton's scratch pointers; numba's per-array fields: `numba_jit.NumbaKernel`). Nothing
here imports `dsl`; Triton, CuPy and numba are imported only when their adapters are called.
"""
from __future__ import annotations

from bridge.errors import ForeignKernelError
from bridge.foreign.cupy_source import build_cupy, cupy, kernel_signature
from bridge.foreign.elementwise import build_elementwise, elementwise, elementwise_spec
from bridge.foreign.image import check_image, image_params
from bridge.foreign.launch import ForeignKernel
from bridge.foreign.numba_jit import NumbaKernel, build_numba, numba
from bridge.foreign.signature import declare, parse_signature
from bridge.foreign.triton_jit import build_triton, triton
from bridge.foreign.wrap import ForeignBuild, kernel, load

__all__ = ["declare", "parse_signature", "kernel", "triton", "cupy", "numba", "elementwise", "elementwise_spec",
           "load", "check_image", "image_params", "build_triton", "build_cupy", "build_numba", "build_elementwise",
           "kernel_signature", "ForeignBuild", "ForeignKernel", "NumbaKernel", "ForeignKernelError"]
