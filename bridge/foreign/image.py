"""What a module image (PTX, cubin or fatbin) says a kernel's parameters are, and the wrap-time check.

A fatbin carries one cubin per architecture and maybe PTX: every entry that has the kernel must
agree with the contract (the driver picks the entry at load time, so any of them may run). An entry
compressed with a codec this Python cannot decode (zstd, nvcc 13's default, without a zstd module) is
not checked when another entry with the kernel is (one nvcc run compiles every entry from the same
source); when none can be read, the CompressedEntryError says what to install.
"""
from __future__ import annotations

import json
from typing import Any

from bridge.contract import native_contract
from bridge.errors import ForeignKernelError
from bridge.fatbin import CompressedEntryError, fatbin_entries, module_format
from bridge.foreign.cubin import cubin_kernels, cubin_params
from bridge.foreign.params import Param, check_params, contract_params
from bridge.foreign.ptx import ptx_entries, ptx_params

__all__ = ["image_params", "check_image"]


def image_params(data: bytes, name: str) -> list[tuple[str, list[Param]]]:
    """(where, parameters of kernel `name`) for each part of the image that has it: the PTX entry,
    the cubin, or each fatbin entry. ForeignKernelError when no part has the kernel."""
    kind = module_format(data)
    if kind == "ptx":
        return [("the PTX entry", ptx_params(data, name))]
    if kind == "cubin":
        return [("the cubin", cubin_params(data, name))]
    found, known, unread = [], {}, []
    for entry in fatbin_entries(data):
        if entry.kind not in ("elf", "ptx"):
            continue
        try:
            where, blob = f"the {entry.where}", entry.data()
        except CompressedEntryError as exc:       # no decoder here: the driver still reads it
            unread.append(exc)
            continue
        names = cubin_kernels(blob, where) if entry.kind == "elf" else list(ptx_entries(blob))
        known.update(dict.fromkeys(names))
        if name in names:
            found.append((where, cubin_params(blob, name, where) if entry.kind == "elf" else ptx_params(blob, name)))
    if not found and unread and not known:      # nothing could be read: say what to install
        raise unread[0]
    if not found:
        skipped = f"; {len(unread)} compressed entr{'y' if len(unread) == 1 else 'ies'} not read" if unread else ""
        raise ForeignKernelError(f"{name}: no entry of the fatbin has a kernel {name!r} (it has: "
                                 f"{', '.join(known) or 'none'}{skipped}; extern \"C\" kernels keep their name, C++ "
                                 f"ones are mangled)", kernel=name)
    return found


def check_image(data: bytes, name: str, contract: Any) -> None:
    """Raise ForeignKernelError unless every part of the image that has kernel `name` takes exactly the
    parameters a launch of `contract` packs (count; sizes; alignment and offsets where stated)."""
    native = native_contract(contract, name)
    expected = contract_params(native, name)
    placed = not json.loads(native.to_json()).get("tensor_maps")   # with tensor maps the driver's offsets rule
    for where, actual in image_params(data, name):
        check_params(name, expected, actual, where, offsets=placed)
