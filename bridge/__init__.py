"""kernelbridge runtime: zero-copy arrays, one stream/context manager, one validated launch path.

`import bridge` works on machines without a GPU or driver; `bridge.gpu_available()` says which it is.
"""
from __future__ import annotations

from bridge.errors import (
    AliasingError, AlignmentError, ArgumentCountError, ArgumentKindError, BlockSizeError, BlockSizeTypeError,
    ClusterError, ComputeCapabilityError, CooperativeGridError,
    ConfigurationError, ContractDefinitionError, CudaError, DeviceMismatchError, DTypeError,
    ForeignKernelError, GridSizeError, GridSizeTypeError, KernelFault, LaunchContractError, LayoutError,
    MissingContractError, NdimError, NoDeviceError, PeerAccessError, ReadOnlyError, ScalarRangeError,
    SharedMemoryError, ShapeRelationError,
)
from bridge._driver import available as gpu_available, reason as gpu_unavailable_reason

__version__ = "0.1.0"

# --- exports added by each runtime module (keep one block per module) -----------------------------
# cpp_kernels / fatbin: the package's CUDA C++ kernels, the CMake module dir, contracts inside modules
from bridge import cpp_kernels, fatbin  # noqa: E402
from bridge.cpp_kernels import cmake_dir  # noqa: E402
# arrays: zero-copy views (DLPack / CUDA Array Interface), stream-ordered allocation, host copies
from bridge import dtypes  # noqa: E402
from bridge.array import Array, asarray, empty, empty_like, from_host, full, zeros, zeros_like  # noqa: E402
# runtime core: devices, streams (shared with CuPy/torch), modules, kernels, graphs
from bridge.device import Device, current_device, device_count, synchronize  # noqa: E402
from bridge.peer import copy_peer  # noqa: E402
from bridge.stream import Event, Stream, current_stream, use_stream  # noqa: E402
from bridge.module import Module, kernel_from_ptx, load_module  # noqa: E402
from bridge.kernel import Kernel, unsafe_launch  # noqa: E402
from bridge.graph import Graph, capture  # noqa: E402
# profiling: opt-in NVTX ranges per launch
from bridge.profiling import nvtx_status, set_nvtx  # noqa: E402
# contract: Python-side builder of launch contracts (parsed by the one native validator)
from bridge.contract import ArgSpec, LaunchContract  # noqa: E402
# foreign: Triton / CuPy / exported cubin kernels under contracts (bridge/foreign/), imported on first use


def __getattr__(name: str) -> object:
    """`bridge.foreign` loads on first use: `import bridge` does not pay for it."""
    if name == "foreign":
        import importlib
        return importlib.import_module("bridge.foreign")
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")


# `from bridge import *` exports exactly these (interop_tests/runtime/test_package_surface.py keeps the list
# true and docs/api.md documents each).
__all__ = [
    # errors (bridge/errors.py)
    "LaunchContractError", "ArgumentCountError", "ArgumentKindError", "DTypeError", "NdimError",
    "ShapeRelationError", "LayoutError", "AlignmentError", "ReadOnlyError", "AliasingError",
    "DeviceMismatchError", "ScalarRangeError", "BlockSizeError", "BlockSizeTypeError", "GridSizeError",
    "GridSizeTypeError", "CooperativeGridError", "ClusterError", "SharedMemoryError", "ComputeCapabilityError",
    "ContractDefinitionError",
    "MissingContractError", "ForeignKernelError", "PeerAccessError", "CudaError", "NoDeviceError", "KernelFault",
    "ConfigurationError",
    # machine
    "gpu_available", "gpu_unavailable_reason", "Device", "current_device", "device_count",
    # arrays
    "copy_peer", "Array", "asarray", "empty", "empty_like", "from_host", "full", "zeros", "zeros_like", "dtypes",
    # streams and graphs
    "Stream", "Event", "current_stream", "synchronize", "use_stream", "Graph", "capture",
    # modules, kernels, contracts
    "Module", "load_module", "Kernel", "kernel_from_ptx", "unsafe_launch", "LaunchContract", "ArgSpec",
    # the package's CUDA C++ kernels and contracts inside modules
    "cpp_kernels", "cmake_dir", "fatbin",
    # foreign kernels (Triton, CuPy, exported cubins) under contracts: loaded on first use
    "foreign",
    # profiling
    "set_nvtx", "nvtx_status",
]
