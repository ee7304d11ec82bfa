"""Every exception the runtime raises. Launch-contract errors are raised before anything is submitted.

The C++ validator (cpp/include/kernelbridge/contract.hpp) reports an error *code*; `ERROR_CLASSES`
maps each code to its class here, so C++ and Python agree on one taxonomy. Device-side faults come
back as records of the extension's fault log; `raise_faults` turns them into a KernelFault.
"""
from __future__ import annotations


class LaunchContractError(ValueError):
    """A launch was refused: nothing was launched and no buffer was touched."""

    def __init__(self, message: str, *, kernel: str | None = None, arg: int | None = None,
                 arg_name: str | None = None) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.arg = arg
        self.arg_name = arg_name


class ArgumentCountError(LaunchContractError, TypeError):
    pass


class ArgumentKindError(LaunchContractError, TypeError):
    """An array was given where a scalar was declared, or the reverse, or an unusable object."""


class DTypeError(LaunchContractError, TypeError):
    pass


class NdimError(LaunchContractError):
    pass


class ShapeRelationError(LaunchContractError):
    """A `requires=` relation between arguments (or with the launch: `grid.x == len(partials)`) does not hold."""


class LayoutError(LaunchContractError):
    """Strides do not match the declared layout (C/F contiguous)."""


class AlignmentError(LaunchContractError):
    pass


class ReadOnlyError(LaunchContractError):
    pass


class AliasingError(LaunchContractError):
    """A writable argument overlaps another argument and the pair is not declared in-place."""


class DeviceMismatchError(LaunchContractError):
    """Host memory where device memory is needed, memory of another device, or a stream, event or graph
    of another device than the work it is used for (docs/architecture.md "Devices")."""


class PeerAccessError(DeviceMismatchError):
    """A launch with `peer_access=True` names memory of a device its own device cannot reach."""


class ScalarRangeError(LaunchContractError, OverflowError):
    pass


class BlockSizeError(LaunchContractError):
    pass


class GridSizeError(LaunchContractError):
    pass


class SharedMemoryError(LaunchContractError):
    pass


class CooperativeGridError(GridSizeError):
    """A cooperative launch's grid has more blocks than can be co-resident (occupancy API x SMs)."""


class ClusterError(GridSizeError):
    """A thread-block cluster the launch cannot have: grid not divisible by it, unlike the cluster compiled
    into the function (`__cluster_dims__`), or not schedulable with this block and shared memory."""


class BlockSizeTypeError(BlockSizeError, TypeError):
    """`block` is not an int or a tuple of 1 to 3 ints (a TypeError too, as Python code expects)."""


class GridSizeTypeError(GridSizeError, TypeError):
    """`grid` is not an int or a tuple of 1 to 3 ints (a TypeError too, as Python code expects)."""


class ComputeCapabilityError(LaunchContractError):
    pass


class ContractDefinitionError(LaunchContractError):
    """The contract itself is malformed (bad JSON, unknown name in a relation, ...)."""


class MissingContractError(LaunchContractError):
    """The kernel has no contract: only `bridge.unsafe_launch` may launch it."""


class ForeignKernelError(ContractDefinitionError):
    """A foreign kernel (`bridge.foreign`: a Triton, CuPy or exported cubin/PTX kernel) does not match
    its contract, found when it is wrapped, never at a launch: `param` is the kernel parameter's
    position, `expected` / `actual` the bytes the contract packs and the image declares (None when the
    mismatch is not about one parameter's size)."""

    def __init__(self, message: str, *, kernel: str | None = None, param: int | None = None,
                 expected: int | None = None, actual: int | None = None, arg_name: str | None = None) -> None:
        super().__init__(message, kernel=kernel, arg_name=arg_name)
        self.param, self.expected, self.actual = param, expected, actual


class ConfigurationError(ValueError):
    """A `KB_*` environment setting holds a value kernelbridge does not accept. Raised where the setting
    is read (bridge/settings.py), before anything it governs is done; the message names the variable,
    the value given and the values accepted (docs/configuration.md)."""

    def __init__(self, message: str, *, variable: str = "", value: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable
        self.value = value


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error name."""

    def __init__(self, call: str, code: int, name: str = "", text: str = "") -> None:
        self.call, self.code, self.name = call, code, name
        super().__init__(f"{call} failed: {name or code}" + (f" ({text})" if text else ""))


class NoDeviceError(RuntimeError):
    """No CUDA driver or no CUDA device on this machine."""


class KernelFault(RuntimeError):
    """A device-side safety check failed in a kernel (reported at the next synchronisation)."""

    def __init__(self, message: str, *, kernel: str = "", array: str = "", index: int = -1,
                 extent: int = -1, file: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.kernel, self.array, self.index, self.extent = kernel, array, index, extent
        self.file, self.line = file, line


def raise_faults(records: list) -> None:
    """Raise KernelFault for the first of `records` (what `_native.take_faults` returns for a stream or a
    device: it has cleared them already); nothing when there are none."""
    if not records:
        return
    kernel, info, site, index, extent, _stream = records[0]
    array, file, line, text = "", "", 0, ""
    if info is not None:
        entry = info.get(int(site)) if hasattr(info, "get") else None
        if entry is not None:
            array, file, line, text = entry
    where = f" at {file}:{line}" if file else ""
    src = f": {text.strip()}" if text else ""
    what = f"array '{array}'" if array else f"fault site {site}"
    more = f" (and {len(records) - 1} more fault(s))" if len(records) > 1 else ""
    msg = (f"{kernel}: index {index} out of bounds for {what} with extent {extent}{where}{src}{more}; "
           f"the fault record was cleared, the next launch works")
    raise KernelFault(msg, kernel=kernel, array=array, index=int(index), extent=int(extent), file=file,
                      line=int(line))


# Order matches kb::ErrorCode in cpp/include/kernelbridge/contract.hpp (index = code).
ERROR_CLASSES: tuple[type[LaunchContractError] | None, ...] = (
    None,                      # ok
    ArgumentCountError,
    ArgumentKindError,
    DTypeError,
    NdimError,
    ShapeRelationError,
    LayoutError,
    AlignmentError,
    ReadOnlyError,
    AliasingError,
    DeviceMismatchError,
    ScalarRangeError,
    BlockSizeError,
    GridSizeError,
    SharedMemoryError,
    ComputeCapabilityError,
    ContractDefinitionError,
    MissingContractError,
    CooperativeGridError,
    ClusterError,
)


def contract_error(code: int, message: str, kernel: str | None = None, arg: int | None = None,
                   arg_name: str | None = None) -> LaunchContractError:
    """Build the exception for a validator error code (used by the native extension)."""
    cls = ERROR_CLASSES[code] if 0 < code < len(ERROR_CLASSES) else LaunchContractError
    return cls(message, kernel=kernel, arg=arg, arg_name=arg_name)
