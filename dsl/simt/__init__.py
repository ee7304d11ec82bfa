"""dsl.simt — per-thread kernels in the spirit of cuda-oxide: ThreadIndex, DisjointSlice, contracts,
and an explicit `unsafe` escape hatch. See docs/dsl.md for the language reference."""
from dsl.vocab.simt import Array, ArraySpec, DisjointSlice, Optional
from dsl.vocab.simt import (atomic, block, blockDim, blockIdx, gridDim, lane_id, math_intrinsic, shared,
                                 sync_threads, thread, threadIdx, unsafe, warp, warp_size)
from dsl.vocab.simt import range  # noqa: A004   (simt.range(..., unroll=N); nothing here calls range)
from dsl.vocab import math as _vocab
from dsl.simt.kernel import DeviceFunction, SimtKernel, device, kernel
from dsl.simt.extern import ExternDevice, extern_device   # C++ __device__ functions (dsl/link.py)
from dsl.vocab import launch as _launch
from dsl.vocab.simt import Intrinsic as _Intrinsic

# simt.pdl, simt.grid, simt.cluster: the launch-feature table (dsl/vocab/launch.py)
_LAUNCH_NAMES = _launch.model_names("simt", lambda row: _Intrinsic(row.key))
globals().update(_LAUNCH_NAMES)

# simt.sqrt, simt.exp, ...: every row of the math table (dsl/vocab/math.py).
globals().update({_n: math_intrinsic(_n) for _n in _vocab.names()})
_MATH_NAMES = _vocab.names()
_vocab.add_model_namespace(__name__, globals())   # register_math refuses the names taken here

__all__ = ["kernel", "device", "Array", "DisjointSlice", "Optional", "ArraySpec", "SimtKernel", "DeviceFunction",
           "thread", "threadIdx", "blockIdx", "blockDim", "gridDim", "lane_id", "warp_size",
           "sync_threads", "shared", "atomic", "warp", "block", "unsafe", "range", "extern_device", "ExternDevice",
           *sorted(_LAUNCH_NAMES), *_MATH_NAMES]


def __getattr__(name: str) -> object:
    """Math rows registered after import (dsl.vocab.register_math) are `simt.<name>` too."""
    obj = math_intrinsic(name)
    if obj is None:
        raise AttributeError(f"module 'dsl.simt' has no attribute {name!r}")
    return obj
