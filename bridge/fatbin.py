"""Read what a CUDA module file carries — on the host, in pure Python, without a GPU or CUDA tools.

Architecture: a module file is a fatbin container, one ELF cubin, or PTX text. A fatbin is a header
followed by entries (ELF cubins for given SM archs, PTX text, possibly compressed). The launch
contracts of CUDA C++ kernels (cpp/include/kernelbridge/kernel_contract.cuh) live in each cubin as
the initialised device globals `__kb_contract_<kernel>` (in the ELF symbol table, bytes in their
section) and in PTX as `.global .b8 __kb_contract_<kernel>[N] = {...}`.

Fatbin layout (little endian, as nvcc 11–13 write it):
  container header (16 bytes): u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size
  entry header: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size (padded),
    u32 compressed size @16, u32 arch @28 (e.g. 90), u64 flags @40, u64 uncompressed size @56.
  flags: 0x2000 = LZ4 block compression (decoded here), 0x8000 = zstd (decoded when a zstd module
  is importable: `compression.zstd` of Python 3.14, `zstandard` or `pyzstd`; otherwise that entry
  raises CompressedEntryError). kernelbridge's CMake function builds with `-compress-mode=none`.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

__all__ = [
    "CONTRACT_SYMBOL_PREFIX", "FatbinEntry", "ModuleFormatError", "CompressedEntryError",
    "module_format", "fatbin_entries", "embedded_contracts", "elf_contracts", "ptx_contracts",
]

CONTRACT_SYMBOL_PREFIX = "__kb_contract_"
FATBIN_MAGIC = 0xBA55ED50
_ELF_MAGIC = b"\x7fELF"
_KIND_NAMES = {1: "ptx", 2: "elf"}
_FLAG_LZ4 = 0x2000
_FLAG_ZSTD = 0x8000


class ModuleFormatError(ValueError):
    """The bytes are not a well-formed fatbin, cubin or PTX module."""


class CompressedEntryError(ModuleFormatError):
    """A fatbin entry uses a compression this Python cannot decode (zstd without a zstd module)."""


@dataclass(frozen=True)
class FatbinEntry:
    """One entry of a fatbin container: an ELF cubin or PTX text for one architecture."""

    kind: str            # "elf", "ptx", or "kind<N>" for entries we do not interpret
    arch: int            # SM / compute number, e.g. 90
    flags: int
    raw: bytes           # payload as stored (possibly compressed, possibly padded)
    compressed_size: int
    uncompressed_size: int

    @property
    def compression(self) -> str:
        if self.flags & _FLAG_ZSTD:
            return "zstd"
        if self.flags & _FLAG_LZ4:
            return "lz4"
        return "none"

    def data(self) -> bytes:
        """The payload, decompressed."""
        if self.compression == "none":
            return self.raw
        packed = self.raw[: self.compressed_size] if self.compressed_size else self.raw
        if self.compression == "lz4":
            out = _lz4_block_decode(packed, self.uncompressed_size)
        else:
            out = _zstd_decode(packed, self.kind, self.arch)
        if self.uncompressed_size and len(out) != self.uncompressed_size:
            raise ModuleFormatError(
                f"fatbin {self.kind} entry for arch {self.arch}: decompressed to {len(out)} bytes, "
                f"header says {self.uncompressed_size}")
        return out


def module_format(data: bytes | bytearray | memoryview | str) -> str:
    """'fatbin', 'elf' or 'ptx' — decided by the leading bytes, not by a file extension."""
    if isinstance(data, str):
        return "ptx"
    head = bytes(data[:4])
    if len(head) == 4 and struct.unpack("<I", head)[0] == FATBIN_MAGIC:
        return "fatbin"
    if head == _ELF_MAGIC:
        return "elf"
    text = bytes(data[:4096]).decode("latin-1")
    if re.search(r"^\s*\.(version|target)\b", text, re.MULTILINE):
        return "ptx"
    raise ModuleFormatError(
        f"data: expected a fatbin (magic 0x{FATBIN_MAGIC:08X}), an ELF cubin or PTX text, "
        f"got leading bytes {head!r}")


def fatbin_entries(data: bytes | bytearray | memoryview) -> list[FatbinEntry]:
    """All entries of all fatbin containers in `data` (nvcc may concatenate containers)."""
    buf = bytes(data)
    entries: list[FatbinEntry] = []
    pos = 0
    while pos + 16 <= len(buf):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", buf, pos)
        if magic != FATBIN_MAGIC:
            if pos and not buf[pos:].strip(b"\0"):
                break  # trailing padding
            raise ModuleFormatError(f"data: no fatbin container at offset {pos} (magic 0x{magic:08X})")
        start, end = pos + header_size, pos + header_size + size
        if header_size < 16 or end > len(buf):
            raise ModuleFormatError(f"data: fatbin container at offset {pos} runs past the end "
                                    f"({end} > {len(buf)} bytes)")
        entries.extend(_container_entries(buf, start, end))
        pos = (end + 7) & ~7
    return entries


def _container_entries(buf: bytes, start: int, end: int) -> list[FatbinEntry]:
    out = []
    pos = start
    while pos < end:
        if pos + 16 > end:
            raise ModuleFormatError(f"data: truncated fatbin entry header at offset {pos}")
        kind, _ver, hsize, psize = struct.unpack_from("<HHIQ", buf, pos)
        if hsize < 16 or pos + hsize + psize > end:
            raise ModuleFormatError(f"data: fatbin entry at offset {pos} runs past its container")
        out.append(FatbinEntry(
            kind=_KIND_NAMES.get(kind, f"kind{kind}"), arch=_field(buf, pos, hsize, 28, "<I"),
            flags=_field(buf, pos, hsize, 40, "<Q"), raw=buf[pos + hsize: pos + hsize + psize],
            compressed_size=_field(buf, pos, hsize, 16, "<I"),
            uncompressed_size=_field(buf, pos, hsize, 56, "<Q")))
        pos += hsize + psize
    return out


def _field(buf: bytes, entry: int, header_size: int, off: int, fmt: str) -> int:
    """A header field, or 0 when this (older, shorter) entry header does not have it."""
    if off + struct.calcsize(fmt) > header_size:
        return 0
    return struct.unpack_from(fmt, buf, entry + off)[0]


def embedded_contracts(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """Kernel name → contract JSON text, read from a fatbin, an ELF cubin or PTX text.

    Every entry of a fatbin is searched (ELF first, then PTX); entries that disagree about one
    kernel's contract are an error. A module with no contracts returns {} (its kernels can then only
    go through bridge.unsafe_launch). Raises ModuleFormatError for malformed data and
    CompressedEntryError when an entry cannot be decompressed and no other entry could be read.
    """
    fmt = module_format(data)
    if fmt == "ptx":
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")
        return ptx_contracts(text)
    if fmt == "elf":
        return elf_contracts(bytes(data))
    entries = sorted(fatbin_entries(data), key=lambda e: e.kind != "elf")
    found: dict[str, str] = {}
    undecodable: list[CompressedEntryError] = []
    read_any = False
    for entry in entries:
        if entry.kind not in ("elf", "ptx"):
            continue
        try:
            payload = entry.data()
        except CompressedEntryError as exc:
            undecodable.append(exc)
            continue
        read_any = True
        if entry.kind == "elf":
            got = elf_contracts(payload)
        else:
            got = ptx_contracts(payload.rstrip(b"\0").decode("utf-8", errors="replace"))
        for name, text in got.items():
            if found.setdefault(name, text) != text:
                raise ModuleFormatError(f"{name}: the fatbin's {entry.kind} entry for arch {entry.arch} "
                                        "carries a different contract than another entry")
    if undecodable and not read_any:
        raise undecodable[0]
    return found


# ---- ELF ---------------------------------------------------------------------------------------
_SHT_SYMTAB, _SHT_NOBITS, _SHT_SYMTAB_SHNDX = 2, 8, 18
_SHN_XINDEX = 0xFFFF


def elf_contracts(elf: bytes) -> dict[str, str]:
    """Contracts in one ELF cubin: the initialiser bytes of its `__kb_contract_*` symbols."""
    sections = _elf_sections(elf)
    out: dict[str, str] = {}
    for sec in sections:
        if sec["type"] != _SHT_SYMTAB:
            continue
        strtab = sections[sec["link"]]
        shndx_table = next((s for s in sections
                            if s["type"] == _SHT_SYMTAB_SHNDX and s["link"] == sec["index"]), None)
        entsize = sec["entsize"] or 24
        for k in range(sec["size"] // entsize):
            name_off, _info, _other, shndx, value, size = struct.unpack_from(
                "<IBBHQQ", elf, sec["offset"] + k * entsize)
            name = _cstr(elf, strtab["offset"] + name_off)
            if not name.startswith(CONTRACT_SYMBOL_PREFIX):
                continue
            if shndx == _SHN_XINDEX and shndx_table is not None:
                shndx = struct.unpack_from("<I", elf, shndx_table["offset"] + 4 * k)[0]
            if shndx == 0 or shndx >= len(sections):
                raise ModuleFormatError(f"{name}: contract symbol is undefined in this cubin")
            holder = sections[shndx]
            if holder["type"] == _SHT_NOBITS:
                raise ModuleFormatError(f"{name}: contract symbol has no initialiser (section without data)")
            rel = value - holder["addr"] if holder["addr"] and value >= holder["addr"] else value
            if rel + size > holder["size"]:
                raise ModuleFormatError(f"{name}: contract symbol runs past its section")
            blob = elf[holder["offset"] + rel: holder["offset"] + rel + size]
            out[name[len(CONTRACT_SYMBOL_PREFIX):]] = blob.split(b"\0", 1)[0].decode("utf-8")
    return out


def _elf_sections(elf: bytes) -> list[dict[str, int]]:
    if elf[:4] != _ELF_MAGIC:
        raise ModuleFormatError("cubin: missing ELF magic")
    if elf[4] != 2 or elf[5] != 1:
        raise ModuleFormatError("cubin: expected a 64-bit little-endian ELF (CUDA cubin)")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    if shnum == 0 and shoff:
        shnum = struct.unpack_from("<Q", elf, shoff + 0x20)[0]  # extended count in section 0's size
    if shoff + shnum * shentsize > len(elf):
        raise ModuleFormatError("cubin: section header table runs past the end of the file")
    sections = []
    for i in range(shnum):
        (_name, typ, _flags, addr, offset, size, link, _info, _align, entsize) = struct.unpack_from(
            "<IIQQQQIIQQ", elf, shoff + i * shentsize)
        if typ != _SHT_NOBITS and offset + size > len(elf):
            raise ModuleFormatError(f"cubin: section {i} runs past the end of the file")
        sections.append({"index": i, "type": typ, "addr": addr, "offset": offset, "size": size,
                         "link": link, "entsize": entsize})
    return sections


def _cstr(buf: bytes, off: int) -> str:
    end = buf.find(b"\0", off)
    return buf[off: end if end >= 0 else len(buf)].decode("utf-8", errors="replace")


# ---- PTX ---------------------------------------------------------------------------------------
_PTX_CONTRACT = re.compile(
    r"\.global\s+(?:\.align\s+\d+\s+)?\.[bsu]8\s+" + CONTRACT_SYMBOL_PREFIX
    + r"([A-Za-z_$][\w$]*)\s*\[\s*\d*\s*\]\s*=\s*\{([^}]*)\}")
_PTX_STRING = re.compile(
    r"\.global\s+(?:\.align\s+\d+\s+)?\.[bsu]8\s+" + CONTRACT_SYMBOL_PREFIX
    + r"([A-Za-z_$][\w$]*)\s*\[\s*\d*\s*\]\s*=\s*\"((?:[^\"\\]|\\.)*)\"")


def ptx_contracts(ptx: str) -> dict[str, str]:
    """Contracts in PTX text: `.global .b8 __kb_contract_<k>[N] = {...}` initialisers."""
    out: dict[str, str] = {}
    for m in _PTX_CONTRACT.finditer(ptx):
        try:
            blob = bytes(int(tok, 0) & 0xFF for tok in m.group(2).replace("\n", " ").split(",") if tok.strip())
        except ValueError as exc:
            raise ModuleFormatError(f"{CONTRACT_SYMBOL_PREFIX}{m.group(1)}: bad PTX initialiser ({exc})") from None
        out[m.group(1)] = blob.split(b"\0", 1)[0].decode("utf-8")
    for m in _PTX_STRING.finditer(ptx):  # string-literal initialisers (some PTX producers)
        out.setdefault(m.group(1), m.group(2).encode("latin-1").decode("unicode_escape").split("\0", 1)[0])
    return out


# ---- decompression -----------------------------------------------------------------------------
def _lz4_block_decode(src: bytes, expected: int) -> bytes:
    """LZ4 *block* format (no frame): sequences of token, literals, 2-byte offset, match length."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        length = token >> 4
        if length == 15:
            while True:
                if i >= n:
                    raise ModuleFormatError("fatbin: truncated LZ4 literal length")
                b = src[i]
                i += 1
                length += b
                if b != 255:
                    break
        out += src[i: i + length]
        i += length
        if i >= n or (expected and len(out) >= expected):
            break
        if i + 2 > n:
            raise ModuleFormatError("fatbin: truncated LZ4 match offset")
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        mlen = token & 15
        if mlen == 15:
            while True:
                if i >= n:
                    raise ModuleFormatError("fatbin: truncated LZ4 match length")
                b = src[i]
                i += 1
                mlen += b
                if b != 255:
                    break
        mlen += 4
        start = len(out) - offset
        if offset == 0 or start < 0:
            raise ModuleFormatError("fatbin: LZ4 match offset points before the start of the data")
        if offset >= mlen:
            out += out[start: start + mlen]
        else:  # overlapping match: repeat the last `offset` bytes
            pattern = bytes(out[start:])
            out += (pattern * (mlen // offset + 1))[:mlen]
    return bytes(out[:expected] if expected else out)


def _zstd_decode(packed: bytes, kind: str, arch: int) -> bytes:
    try:  # Python 3.14+
        from compression import zstd  # type: ignore[import-not-found]
        return zstd.decompress(packed)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
        return zstandard.ZstdDecompressor().decompressobj().decompress(packed)
    except ImportError:
        pass
    try:
        import pyzstd  # type: ignore[import-not-found]
        return pyzstd.decompress(packed)
    except ImportError:
        pass
    raise CompressedEntryError(
        f"fatbin {kind} entry for arch {arch} is zstd-compressed and no zstd decoder is importable "
        "(Python 3.14's compression.zstd, 'zstandard' or 'pyzstd'); rebuild with "
        "nvcc -compress-mode=none (kernelbridge_add_cuda_module does) or install 'zstandard'")
