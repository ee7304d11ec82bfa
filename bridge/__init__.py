"""kernelbridge runtime: zero-copy arrays, one stream/context manager, one validated launch path.

`import bridge` works on machines without a GPU or driver; `bridge.gpu_available()` says which it is.
"""
from __future__ import annotations

from bridge.errors import (
    AliasingError, AlignmentError, ArgumentCountError, ArgumentKindError, BlockSizeError,
    ComputeCapabilityError, ContractDefinitionError, CudaError, DeviceMismatchError, DTypeError,
    GridSizeError, KernelFault, LaunchContractError, LayoutError, MissingContractError, NdimError,
    NoDeviceError, ReadOnlyError, ScalarRangeError, SharedMemoryError, ShapeRelationError,
)
from bridge._driver import available as gpu_available, reason as gpu_unavailable_reason

__version__ = "0.1.0"

# --- exports added by each runtime module (keep one block per module) -----------------------------
