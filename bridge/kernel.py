"""`bridge.Kernel`: a CUfunction plus its LaunchContract, launched through the native Launcher.

Why so thin: every check and the parameter packing run in C++ (`_native.Launcher`), so a launch costs
a few microseconds of host time and there is exactly one validator. A kernel without a contract can only
be launched through `unsafe_launch`, which states the argument types explicitly.

A kernel launches on the device of its arrays, else of its stream, else on the current device
(docs/architecture.md "Devices"): its Launcher's router loads the module on that device on first use.
"""
from __future__ import annotations

import json
import weakref
from typing import Any

import numpy as np

from bridge import _native, dtypes
from bridge.contract import native_contract
from bridge.device import Device
from bridge.errors import MissingContractError


def func_attrs(func: int) -> tuple[Any, dict[str, int]]:
    """(`_native.FuncAttrs`, every attribute by name) of a CUfunction."""
    values = dict(_native.func_attributes(func))
    attrs = _native.FuncAttrs()
    for key in ("max_threads_per_block", "static_smem", "num_regs", "max_dynamic_smem"):
        setattr(attrs, key, values[key])
    # cluster dims compiled into the function (__cluster_dims__ / .reqnctapercluster); 0 when none
    attrs.required_cluster = tuple(values.get(f"required_cluster_{axis}", 0) for axis in ("width", "height", "depth"))
    attrs.cluster_must_be_set = bool(values.get("cluster_size_must_be_set", 0))
    return attrs, values


def _calibrate_temporaries() -> None:
    """Tell the launcher which reference count marks an argument only the launch holds (a temporary,
    kept alive until the launch completes), measured on this interpreter for each call path: native
    `launcher(*args)` / `kernel[g, b](*args)` calls, `Kernel.__call__(*args)` handing its tuple over, and
    a `fastcall(*args)` from a Python `*args` wrapper (what `Kernel.__call__` and DSL kernels use)."""
    o = object()

    def through_python(*args: Any, grid: Any = None) -> list:
        return _native.refcount_probe_tuple(args)

    def through_fast(*args: Any) -> list:
        return _native.refcount_probe_fast(*args)

    native_temp, native_named = _native.refcount_probe(object())[0], _native.refcount_probe(o)[0]
    tuple_temp, tuple_named = through_python(object())[0], through_python(o)[0]
    fast_temp, fast_named = through_fast(object())[0], through_fast(o)[0]
    # Kernel.__call__ and the DSL kernels' __call__ are instance calls (type-slot dispatch adds its own
    # references): measured through a class whose __call__ has their shape and call expressions
    probe = _CallShape()
    fm_temp, fm_named = probe(object())[0], probe(o)[0]
    tm_temp, tm_named = probe(object(), stream=None)[0], probe(o, stream=None)[0]
    always = 1 << 62    # indistinguishable on this interpreter: keep every array alive (safe, slower)
    _native.set_temporary_refcount(native_temp if native_temp < native_named else always,
                                   tuple_temp if tuple_temp < tuple_named else always,
                                   fast_temp if fast_temp < fast_named else always,
                                   fm_temp if fm_temp < fm_named else always,
                                   tm_temp if tm_temp < tm_named else always)


class _CallShape:
    """Kernel.__call__'s shape (and the DSL kernels'): `__call__(self, *args, **kw)` handing its own
    tuple to an unconfigured fastcall, or with keywords to Launcher.launch(args, ..., from_call=True).
    Keep in step with Kernel.__call__ (interop_tests/runtime/test_temporary_calibration.py checks it)."""

    def __init__(self) -> None:
        self._fast = _native.refcount_probe_fast

    def __call__(self, *args: Any, **kw: Any) -> list:
        if not kw and self._fast is not None:
            return self._fast(*args)
        return _native.refcount_probe_tuple(args)


_calibrate_temporaries()


class Kernel:
    """One kernel of a module. `k(*args, grid=, block=)`, `k[grid, block](*args)`, `k.launch(...)`."""

    _fast: Any = None     # the launcher's fastcall (set by _create when the kernel has a contract)

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("kernels come from bridge.load_module(...).<name> or bridge.kernel_from_ptx(...)")

    @classmethod
    def _create(cls, module: Any, name: str, func: int, contract: Any, device: int) -> Kernel:
        self = object.__new__(cls)
        self.module, self.name, self.handle, self.contract, self.device = module, name, func, contract, device
        self.attributes, self.attribute_values = func_attrs(func)
        self.ptx_version = self.attribute_values["ptx_version"]
        self.binary_version = self.attribute_values["binary_version"]
        self._launcher = None
        self._fast = None             # the launcher's fastcall: `k(*args)` with no keyword
        if contract is not None:
            self._launcher = _native.Launcher(func, contract, Device(device).limits, self.attributes, device)
            self._launcher.router = _router(self)
            self._fast = self._launcher.fastcall
        self._unsafe: dict[tuple, Any] = {}   # documented cache: argument signature -> loose Launcher
        return self

    def on_device(self, device: Device | int) -> Kernel:
        """This kernel loaded on `device` (its module is loaded there once; this object for its own)."""
        dev = Device(device).ordinal
        if dev == self.device:
            return self
        return self.module.on_device(dev).get_kernel(self.name)

    @property
    def launcher(self) -> Any:
        """The native Launcher (MissingContractError when this kernel has no contract)."""
        if self._launcher is None:
            raise MissingContractError(
                f"{self.name}: kernel has no launch contract; give one with load_module(..., "
                f"contracts={{{self.name!r}: ...}}) or launch it with bridge.unsafe_launch",
                kernel=self.name)
        return self._launcher

    def __call__(self, *args: Any, **kw: Any) -> None:
        """`k(*args, grid=, block=, shared_mem=, stream=, peer_access=False, pdl=True)`; without keywords,
        one C call. `pdl=False` launches a kernel whose contract declares PDL without programmatic stream
        serialization (True: the contract's choice; a kernel without it is never launched with it).

        Both branches hand the launcher THIS call's argument tuple: an extra wrapper level would hide
        temporaries (arrays only the call holds) from the launcher, which keeps those alive.
        `peer_access=True` lets the launch use arrays of other devices (peer access is enabled for them;
        PeerAccessError when impossible); it runs on the stream's device, else the first array's."""
        if not kw and self._fast is not None:
            self._fast(*args)
            return
        peer = _peer_option(self.name, kw)
        pdl = kw.pop("pdl", True)
        grid, block, shared_mem, stream = launch_options(self.name, kw)
        self.launcher.launch(args, grid, block, shared_mem, stream, peer_access=peer, from_call=True, pdl=pdl)

    def launch(self, *args: Any, grid: Any = None, block: Any = None, stream: Any = None,
               shared_mem: int | None = None, peer_access: bool = False, pdl: bool = True) -> None:
        """Validate and launch; `pdl=False` opts this launch out of the contract's PDL."""
        _check_peer_flag(self.name, peer_access)
        self.launcher.launch(args, grid, block, shared_mem, stream,   # the tuple-call threshold applies
                             peer_access=peer_access, pdl=pdl)

    def __getitem__(self, config: Any) -> Any:
        """`k[grid, block]`, `k[grid, block, stream]`, `k[grid, block, stream, shared_mem]`."""
        return self.launcher[config]

    def __repr__(self) -> str:
        state = "with contract" if self.contract is not None else "NO contract (unsafe_launch only)"
        return f"<bridge.Kernel {self.name!r} on device {self.device}, {state}>"


_OPTIONS = ("grid", "block", "shared_mem", "stream")


def _router(kernel: Kernel, pick: Any = None) -> Any:
    """The native Launcher's router for `kernel`: device -> the Launcher of the same kernel loaded on
    that device (`pick(kernel_there)`, default its contract Launcher). Holds the kernel weakly, so the
    Launcher does not keep its own Kernel alive through the router."""
    ref = weakref.ref(kernel)

    def route(device: int) -> Any:
        k = ref()
        if k is None:
            raise RuntimeError("the kernel of this launcher no longer exists")
        there = k.on_device(device)
        return pick(there) if pick is not None else there.launcher
    return route


def _check_peer_flag(kernel: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{kernel}: peer_access must be True or False, got {value!r}")


def _peer_option(kernel: str, kw: dict[str, Any]) -> bool:
    """Take `peer_access=` out of a launch call's keywords (bridge kernels take it besides _OPTIONS)."""
    if "peer_access" not in kw:
        return False
    value = kw.pop("peer_access")
    _check_peer_flag(kernel, value)
    return value


def launch_options(kernel: str, kw: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(grid, block, shared_mem, stream) from a launch call's keywords; TypeError for any other."""
    unknown = set(kw) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"{kernel}: unexpected keyword argument(s) {', '.join(sorted(unknown))}; a launch "
                        f"takes {', '.join(_OPTIONS)}")
    return kw.get("grid"), kw.get("block"), kw.get("shared_mem"), kw.get("stream")


# --- unsafe launches --------------------------------------------------------------------------------

# Scalars unsafe_launch passes: the kernel types of the dtype table (bridge/dtypes.py). ctypes has no
# 16-bit or 8-bit float, so f16/bf16/f8 scalars come as NumPy scalars only.
_CTYPES = {np.ctypeslib.as_ctypes_type(dtypes.to_numpy(row.name)): row.name
           for row in dtypes.kernel_rows() if not (row.kind == "float" and row.itemsize < 4)}
_NUMPY = {row.long_name: row.name for row in dtypes.kernel_rows()}


def _loose_arg(i: int, a: Any) -> tuple[dict, Any]:
    """(spec, value to pass) for one unsafe_launch argument."""
    name = f"arg{i}"
    if isinstance(a, (bool, int, float, complex)) and not isinstance(a, np.generic):
        raise TypeError(f"unsafe_launch: argument #{i + 1} is a Python {type(a).__name__}, whose size in the "
                        f"kernel is ambiguous; pass a NumPy scalar (e.g. np.int32({a!r})) or a ctypes value")
    for ct, dt in _CTYPES.items():
        if type(a) is ct:
            return {"name": name, "kind": "scalar", "dtype": dt}, np.dtype(ct).type(a.value)
    if isinstance(a, np.generic):
        dt = _NUMPY.get(a.dtype.name)
        if dt is None:
            raise TypeError(f"unsafe_launch: argument #{i + 1}: NumPy scalars of dtype {a.dtype} cannot be passed")
        return {"name": name, "kind": "scalar", "dtype": dt}, a
    return ({"name": name, "kind": "array", "dtype": "any", "ndim": -1, "layout": "any", "align": 1,
             "access": "read", "abi": "pointer"}, a)


def unsafe_launch(kernel: Kernel, grid: Any, block: Any, *args: Any, shared_mem: int = 0,
                  stream: Any = None) -> None:
    """Launch `kernel` WITHOUT its contract (unsafe): arrays go as raw device pointers, scalars must be
    NumPy scalars or ctypes values (their exact type is what the kernel receives). Device limits, host
    memory and argument kinds are still checked; sizes, aliasing and bounds are not."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"unsafe_launch: expected a bridge.Kernel, got {type(kernel).__name__}")
    specs, values = [], []
    for i, a in enumerate(args):
        spec, value = _loose_arg(i, a)
        specs.append(spec)
        values.append(value)
    _loose_launcher(kernel, specs).launch(tuple(values), grid, block, shared_mem, stream, keep_all=True)


def _loose_launcher(kernel: Kernel, specs: list[dict]) -> Any:
    """The contract-less Launcher of `kernel` for these argument specs (cached per kernel), routed like
    the kernel's own: a launch with another device's arrays (or stream) uses the kernel loaded there."""
    key = tuple((s["kind"], s["dtype"]) for s in specs)
    launcher = kernel._unsafe.get(key)
    if launcher is None:
        contract = {"version": 1, "kernel": kernel.name, "domain": 3, "args": specs,
                    "dynamic_smem": {"max": 1 << 30}}
        launcher = _native.Launcher(kernel.handle, native_contract(json.dumps(contract), kernel.name),
                                    Device(kernel.device).limits, kernel.attributes, kernel.device)
        if getattr(kernel, "module", None) is not None:
            launcher.router = _router(kernel, lambda k: _loose_launcher(k, specs))
        kernel._unsafe[key] = launcher
    return launcher
