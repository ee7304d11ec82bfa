"""The parameter lists of kernels in a cubin, from its `.nv.info.<kernel>` section (no CUDA needed).

Format (little endian; the records `cuobjdump -elf` prints as EIATTR_*): a sequence of records, each a
u8 format, a u8 attribute and a u16 that is the value (EIFMT_NVAL 0x01 / BVAL 0x02 / HVAL 0x03) or the
size of the payload that follows (EIFMT_SVAL 0x04). EIATTR_KPARAM_INFO (0x17, SVAL, 12 bytes) is one
parameter: u32 index, u16 ordinal, u16 byte offset, u32 flags whose bits 18..31 are the size in
bytes. EIATTR_CBANK_PARAM_SIZE (0x19, HVAL) is the total. The section table is read by
`bridge.fatbin` (bounds-checked); malformed bytes raise ModuleFormatError.
"""
from __future__ import annotations

import struct

from bridge.errors import ForeignKernelError
from bridge.fatbin import ModuleFormatError, _cstr, _elf_sections
from bridge.foreign.params import Param

__all__ = ["cubin_kernels", "cubin_params"]

_EIFMT_SVAL = 0x04
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19
_INFO_PREFIX = ".nv.info."


def _named_sections(elf: bytes, where: str) -> dict[str, dict[str, int]]:
    """Section name -> section (as bridge.fatbin reads it)."""
    sections = _elf_sections(elf, where)
    if not sections:
        return {}
    shstrndx = struct.unpack_from("<H", elf, 0x3E)[0]
    if shstrndx == 0xFFFF:                      # SHN_XINDEX: the index is in section 0's sh_link
        shstrndx = sections[0]["link"]
    if shstrndx >= len(sections):
        raise ModuleFormatError(f"{where}: section name table index {shstrndx} out of range")
    names = sections[shstrndx]
    return {_cstr(elf, names, s["name_off"], where): s for s in sections}


def cubin_kernels(elf: bytes, where: str = "cubin") -> list[str]:
    """Names of the kernels with a `.nv.info.<kernel>` section."""
    return [n[len(_INFO_PREFIX):] for n in _named_sections(bytes(elf), where) if n.startswith(_INFO_PREFIX)]


def _records(blob: bytes, where: str) -> list[tuple[int, int, bytes]]:
    """(format, attribute, payload-or-value bytes) of every record of an .nv.info section."""
    out, pos = [], 0
    while pos + 4 <= len(blob):
        fmt, attr, value = struct.unpack_from("<BBH", blob, pos)
        pos += 4
        if fmt == _EIFMT_SVAL:
            if pos + value > len(blob):
                raise ModuleFormatError(f"{where}: .nv.info record 0x{attr:02x} runs past its section")
            out.append((fmt, attr, blob[pos: pos + value]))
            pos += value
        else:
            out.append((fmt, attr, struct.pack("<H", value)))
    return out


def cubin_params(elf: bytes, name: str, where: str = "cubin") -> list[Param]:
    """The parameters of kernel `name` (ordinal order, with size and offset); ForeignKernelError listing
    the kernels when the cubin has no `name`, or when its parameter records cannot be read."""
    elf = bytes(elf)
    sections = _named_sections(elf, where)
    sec = sections.get(_INFO_PREFIX + name)
    if sec is None:
        known = [n[len(_INFO_PREFIX):] for n in sections if n.startswith(_INFO_PREFIX)]
        raise ForeignKernelError(f"{name}: the {where} has no kernel {name!r} (it has: {', '.join(known) or 'none'}; "
                                 f"extern \"C\" kernels keep their name, C++ ones are mangled)", kernel=name)
    blob = elf[sec["offset"]: sec["offset"] + sec["size"]]
    by_ordinal: dict[int, Param] = {}
    total = None
    for fmt, attr, payload in _records(blob, where):
        if attr == _EIATTR_CBANK_PARAM_SIZE and fmt != _EIFMT_SVAL:
            total = struct.unpack("<H", payload)[0]
        if attr != _EIATTR_KPARAM_INFO or fmt != _EIFMT_SVAL:
            continue
        if len(payload) < 12:
            raise ModuleFormatError(f"{where}: {name}: a KPARAM_INFO record of {len(payload)} bytes (expected 12)")
        _index, ordinal, offset, flags = struct.unpack_from("<IHHI", payload)
        by_ordinal[ordinal] = Param((flags >> 18) & 0x3FFF, 0, offset=offset)
    if sorted(by_ordinal) != list(range(len(by_ordinal))):
        raise ForeignKernelError(f"{name}: the {where}'s parameter records skip ordinals "
                                 f"({sorted(by_ordinal)}): its parameter list cannot be read", kernel=name)
    params = [by_ordinal[k] for k in range(len(by_ordinal))]
    if not params and total:
        raise ForeignKernelError(f"{name}: the {where} declares {total} bytes of parameters but no "
                                 f"EIATTR_KPARAM_INFO records: its parameter list cannot be read", kernel=name)
    return params
