"""dsl.simt — per-thread kernels in the spirit of cuda-oxide: ThreadIndex, DisjointSlice, contracts,
and an explicit `unsafe` escape hatch. See docs/dsl.md for the language reference."""
from dsl.simt.annotations import Array, ArraySpec, DisjointSlice
from dsl.simt.intrinsics import (MATH, atomic, blockDim, blockIdx, gridDim, lane_id, shared,
                                 sync_threads, thread, threadIdx, unsafe, warp, warp_size)
from dsl.simt.kernel import DeviceFunction, SimtKernel, device, kernel
from dsl.simt.extern import ExternDevice, extern_device   # C++ __device__ functions (dsl/link.py)

sqrt = MATH["sqrt"]
rsqrt = MATH["rsqrt"]
exp = MATH["exp"]
exp2 = MATH["exp2"]
log = MATH["log"]
log2 = MATH["log2"]
log1p = MATH["log1p"]
sin = MATH["sin"]
cos = MATH["cos"]
tan = MATH["tan"]
tanh = MATH["tanh"]
erf = MATH["erf"]
pow = MATH["pow"]  # noqa: A001 - the DSL's pow, as in CUDA
fma = MATH["fma"]
floor = MATH["floor"]
ceil = MATH["ceil"]
trunc = MATH["trunc"]
isnan = MATH["isnan"]
isinf = MATH["isinf"]
copysign = MATH["copysign"]

__all__ = ["kernel", "device", "Array", "DisjointSlice", "ArraySpec", "SimtKernel", "DeviceFunction",
           "thread", "threadIdx", "blockIdx", "blockDim", "gridDim", "lane_id", "warp_size",
           "sync_threads", "shared", "atomic", "warp", "unsafe", "extern_device", "ExternDevice", *MATH]

