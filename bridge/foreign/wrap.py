"""Any module image + a contract → a validated kernel: `bridge.foreign.kernel(image, name, signature)`.

The steps every foreign source shares: a `ForeignBuild` (the image, the entry name, the full contract,
the hidden trailing parameters, what the foreign compiler reported) is checked against the image's own
parameter list (`check_image`: count, sizes, alignment, offsets) and only then loaded through
`bridge.load_module`, so it launches through the native Launcher like any kernel of ours. The adapters
(triton.py, cupy.py) only produce builds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bridge.contract import LaunchContract
from bridge.errors import ForeignKernelError
from bridge.fatbin import embedded_contracts
from bridge.foreign.image import check_image
from bridge.foreign.launch import ForeignKernel, Hidden
from bridge.foreign.signature import declare
from bridge.kernel import Kernel
from bridge.module import load_module, read_image

__all__ = ["ForeignBuild", "load", "kernel", "as_contract", "device_arch"]


@dataclass(frozen=True)
class ForeignBuild:
    """A compiled foreign kernel, not yet loaded: `image` (PTX/cubin/fatbin bytes), its entry `name`,
    `contract` (the user's arguments, then one optional u8 pointer array per `hidden` parameter), and
    `info` (what the foreign compiler reported: source, arch, compiler, metadata)."""

    image: bytes
    name: str
    contract: LaunchContract
    hidden: tuple[Hidden, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """ForeignKernelError unless the image's parameters are the ones the contract packs."""
        check_image(self.image, self.name, self.contract)


def device_arch(device: Any = None) -> int:
    """major*10+minor of `device` (default: the current device): what foreign sources compile for."""
    from bridge import _driver
    from bridge.device import Device
    _driver.require()
    major, minor = Device(device if device is not None else _driver.current_ordinal()).cc
    return major * 10 + minor


def _renamed(contract: LaunchContract, name: str) -> LaunchContract:
    d = contract.to_dict()
    d["kernel"] = name
    return LaunchContract.from_json(json.dumps(d))


def as_contract(contract: Any, name: str | None, declare_kw: dict[str, Any]) -> LaunchContract:
    """A LaunchContract named `name` from a C signature (with `declare` keywords) or a contract value
    (LaunchContract, JSON text or a mapping; then no keywords)."""
    if isinstance(contract, str) and not contract.lstrip().startswith("{"):
        c = declare(contract, **declare_kw)
    else:
        if declare_kw:
            raise TypeError(f"{name or 'kernel'}: {', '.join(sorted(declare_kw))}: keywords of a C signature "
                            f"declaration, given with a ready contract")
        if isinstance(contract, LaunchContract):
            c = contract
        elif isinstance(contract, str):
            c = LaunchContract.from_json(contract)
        elif isinstance(contract, dict):
            c = LaunchContract.from_json(json.dumps(contract))
        else:
            raise TypeError(f"{name or 'kernel'}: contract: expected a C signature, a LaunchContract or its JSON, "
                            f"got {type(contract).__name__}")
    return c if name is None or c.kernel == name else _renamed(c, name)


def load(build: ForeignBuild, *, device: Any = None) -> Kernel | ForeignKernel:
    """Check `build` against its image, load it on `device` (default: the current device) and return
    a `bridge.Kernel`, or a `ForeignKernel` when the wrapper fills hidden parameters."""
    build.check()
    mod = load_module(build.image, contracts={build.name: build.contract}, name=build.name, device=device)
    k = mod.get_kernel(build.name)
    if not build.hidden:
        return k
    visible = build.contract.to_dict()
    visible["args"] = visible["args"][: len(visible["args"]) - len(build.hidden)]
    return ForeignKernel._create(k, build.hidden, LaunchContract.from_json(json.dumps(visible)), dict(build.info))


def kernel(image: Any, name: str | None = None, contract: Any = None, *, device: Any = None,
           **declare_kw: Any) -> Kernel | ForeignKernel:
    """A validated `bridge.Kernel` from any PTX / cubin / fatbin (a path, PTX text or bytes):

        k = bridge.foreign.kernel("saxpy.cubin", contract="void saxpy(float a, const float* x, float* y, int n)",
                                  requires=["len(x) == n", "len(y) == n"], access={"y": "readwrite"}, grid_from="y")

    `contract`: a C signature (then `declare`'s keywords apply), a LaunchContract or its JSON; None
    takes the contract the image carries (KB_CONTRACT). `name`: the entry name (default: the
    signature's). Before loading, the image's parameter list (PTX `.entry`, cubin `.nv.info`, every
    fatbin entry) must be exactly what the contract packs: ForeignKernelError otherwise."""
    data, _display = read_image(image)
    if contract is None:
        if name is None:
            raise TypeError("bridge.foreign.kernel: give the kernel's name or a contract naming it")
        if declare_kw:
            raise TypeError(f"{name}: {', '.join(sorted(declare_kw))}: keywords of a C signature, given without one")
        text = embedded_contracts(data).get(name)
        if text is None:
            raise ForeignKernelError(f"{name}: no contract: the image carries none for {name!r}; give a C "
                                     f"signature (contract='void {name}(...)') or a LaunchContract", kernel=name)
        c = LaunchContract.from_json(text)
    else:
        c = as_contract(contract, name, declare_kw)
    built = ForeignBuild(data, name or c.kernel, c, info={"source": "image"})
    return load(built, device=device)       # no hidden parameters: a bridge.Kernel
