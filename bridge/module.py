"""Driver modules: PTX text, cubin (ELF) or fatbin images loaded into a device's primary context.

Why a cache per (device, content hash): loading is expensive and the same image (e.g. a DSL kernel's
PTX) is requested again and again; the driver module is shared, contracts stay per Module object.
A module is loaded on one device; `Module.on_device(n)` loads the same image on device n, and a
kernel launched with device n's arrays (or stream) does that itself (docs/architecture.md "Devices").
What an image is (PTX, cubin, fatbin) is decided by `bridge.fatbin.module_format`, the one sniffer.
Contracts come from the image's own metadata (`bridge.fatbin.embedded_contracts`) and from
`contracts=`, which wins per kernel name. A module hands out `bridge.Kernel`s
(bridge/kernel.py, which knows nothing of modules beyond the object it is given); `kernel_from_ptx`,
the DSL's entry point, is a one-kernel module of PTX text (cached per device, PTX, name, contract).
"""
from __future__ import annotations

import hashlib
import os
import threading
from typing import Any, Mapping

from bridge import _driver, _native
from bridge.contract import native_contract
from bridge.device import Device
from bridge.errors import ContractDefinitionError
from bridge.fatbin import embedded_contracts, module_format
from bridge.kernel import Kernel
from bridge._ptx_text import entry_names

_loaded: dict[tuple[int, str], int] = {}   # documented cache: (device, sha256) -> driver module handle
_lock = threading.Lock()


def read_image(path_or_bytes: str | bytes | bytearray | memoryview | os.PathLike) -> tuple[bytes, str]:
    """(image bytes, display name) from a path, PTX source text or raw bytes."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), "<bytes>"
    if isinstance(path_or_bytes, str) and ("\n" in path_or_bytes or path_or_bytes.lstrip().startswith(".")):
        return path_or_bytes.encode(), "<ptx text>"
    if isinstance(path_or_bytes, (str, os.PathLike)):
        path = os.fspath(path_or_bytes)
        if not os.path.exists(path):
            raise FileNotFoundError(f"load_module: no such module file: {path!r}")
        with open(path, "rb") as f:
            return f.read(), os.path.basename(path)
    raise TypeError(f"load_module: expected a path, PTX text or bytes, got {type(path_or_bytes).__name__}")


class Module:
    """A loaded driver module; `module.<kernel>` / `module.get_kernel(name)` give `bridge.Kernel`s."""

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("use bridge.load_module(...) to load a module")

    @classmethod
    def _create(cls, handle: int, kind: str, device: int, name: str, contracts: dict[str, Any],
                data: bytes) -> Module:
        self = object.__new__(cls)
        self.handle, self.kind, self.device, self.name = handle, kind, device, name
        self.contracts = contracts        # kernel name -> _native.Contract
        self._kernels: dict[str, Any] = {}
        self._ptx_entries = entry_names(data) if kind == "ptx" else None
        self._data = data                 # the image, to load it on other devices (on_device)
        self._family: dict[int, Module] = {device: self}   # this image with these contracts, per device
        self._family_lock = threading.Lock()
        self._resolve_contracted()
        return self

    def _resolve_contracted(self) -> None:
        """Create the kernels that have contracts now (a few attribute queries each). With CUDA's lazy
        loading a kernel is loaded at its first attribute query or launch; resolving here keeps that
        work out of a stream capture in which a module's first launch may happen (a precaution: the
        capture failure that prompted it was the CuPy intake's probe, fixed in bridge.capture)."""
        for kname in self.contracts:
            if self._ptx_entries is None or kname in self._ptx_entries:
                try:
                    self.get_kernel(kname)
                except AttributeError:         # a contract for a kernel this image does not have
                    pass

    def on_device(self, device: Device | int) -> Module:
        """This module (same image, same contracts) loaded on `device` (once; this object for its own)."""
        dev = Device(device).ordinal
        mod = self._family.get(dev)
        if mod is not None:
            return mod
        with self._family_lock:
            mod = self._family.get(dev)
            if mod is None:
                mod = Module._create(_load_image(dev, self._data), self.kind, dev, self.name, self.contracts,
                                     self._data)
                mod._family, mod._family_lock = self._family, self._family_lock
                self._family[dev] = mod
        return mod

    def get_kernel(self, name: str) -> Any:
        """The kernel `name` of this module (AttributeError naming the module when it has none)."""
        k = self._kernels.get(name)
        if k is not None:
            return k
        if self._ptx_entries is not None and name not in self._ptx_entries:
            func = None                    # known absent: no failing driver call (sanitizers report those)
        else:
            func = _native.module_get_function(self.handle, name)
        if func is None:
            known = f"; it has {', '.join(self._ptx_entries)}" if self._ptx_entries else ""
            raise AttributeError(f"module {self.name!r} has no kernel named {name!r}{known} "
                                 f"(extern \"C\" kernels keep their name; C++ ones are mangled)")
        k = Kernel._create(self, name, int(func), self.contracts.get(name), self.device)
        self._kernels[name] = k
        return k

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get_kernel(name)

    @property
    def kernel_names(self) -> list[str]:
        """Entry names when known (PTX), else the names that have contracts."""
        return list(self._ptx_entries) if self._ptx_entries is not None else sorted(self.contracts)

    def __repr__(self) -> str:
        return f"<bridge.Module {self.name!r} ({self.kind}) on device {self.device}>"


def load_module(path_or_bytes: str | bytes | os.PathLike, *, contracts: Mapping[str, Any] | None = None,
                name: str | None = None, device: Device | int | None = None) -> Module:
    """Load PTX text, a cubin or a fatbin (path, text or bytes) into the primary context of `device`
    (default: the current device); its kernels load it on other devices where they are launched."""
    data, display = read_image(path_or_bytes)
    kind = module_format(data)
    _driver.require()
    dev = Device(device if device is not None else _driver.current_ordinal()).ordinal
    merged: dict[str, Any] = {}
    for kname, text in embedded_contracts(data).items():
        merged[kname] = native_contract(text, kname)
    for kname, value in (contracts or {}).items():
        if not isinstance(kname, str):
            raise TypeError(f"contracts: keys must be kernel names (str), got {type(kname).__name__}")
        merged[kname] = native_contract(value, kname)
    for kname, c in merged.items():
        cname = getattr(c, "kernel", kname)
        if cname not in (kname, ""):
            raise ContractDefinitionError(f"contracts[{kname!r}]: the contract names kernel {cname!r}",
                                          kernel=kname)
    return Module._create(_load_image(dev, data), kind, dev, name or display, merged, data)


def _load_image(dev: int, data: bytes) -> int:
    """Driver module handle of `data` on device `dev` (loaded once per device and content)."""
    key = (dev, hashlib.sha256(data).hexdigest())
    with _lock:
        handle = _loaded.get(key)
        if handle is None:
            handle = int(_native.module_load_data(dev, data))
            _loaded[key] = handle
    return handle


# --- kernels built from PTX text (the DSL's entry point) --------------------------------------------

_from_ptx: dict[tuple[int, str, str, str], Kernel] = {}   # documented cache: (device, ptx hash, name, contract)
_from_ptx_lock = threading.Lock()


def kernel_from_ptx(ptx: str, name: str, contract_json: str, *, device: Device | int | None = None) -> Kernel:
    """A contract-carrying Kernel from PTX text, loaded on `device` (default: the current device; cached
    per device, PTX, name and contract). The DSL compiles the PTX for that device's arch."""
    _driver.require()
    dev = Device(device if device is not None else _driver.current_ordinal()).ordinal
    key = (dev, hashlib.sha256(ptx.encode()).hexdigest(), name, contract_json)
    k = _from_ptx.get(key)
    if k is None:
        with _from_ptx_lock:
            k = _from_ptx.get(key)
            if k is None:
                mod = load_module(ptx.encode(), contracts={name: contract_json}, name=name, device=dev)
                k = mod.get_kernel(name)
                _from_ptx[key] = k
    return k
