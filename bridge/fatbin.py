"""Read what a CUDA module file carries — on the host, in pure Python, without a GPU or CUDA tools.

Architecture: a module file is a fatbin container, one ELF cubin, or PTX text. A fatbin is a header
followed by entries (ELF cubins for given SM archs, PTX text, possibly compressed). The launch
contracts of CUDA C++ kernels (cpp/include/kernelbridge/kernel_contract.cuh) and of `python -m
dsl.aot` modules live in each cubin as the initialised device globals `__kb_contract_<kernel>` (JSON
text, NUL-terminated) and `__kb_checksum_<kernel>` (u64: FNV-1a 64 of that text), and in PTX as
`.global .b8 __kb_contract_<kernel>[N] = {...}` and `.global .u64 __kb_checksum_<kernel> = <value>`.

The bytes are untrusted: every parse path raises only ModuleFormatError (and its subclasses) for
malformed data, decompression stops at the size an entry declares, and a contract is returned only
when its checksum is present and matches (ContractIntegrityError otherwise, naming the kernel). Every
parse is linear in its input and bounded: a contract longer than MAX_CONTRACT_BYTES is refused before
its checksum, one nested deeper than MAX_CONTRACT_DEPTH before JSON parsing (never a RecursionError),
and a PTX initialiser's end is looked for no further than such a contract can reach.

Fatbin layout (little endian, as nvcc 11–13 write it):
  container header (16 bytes): u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size
  entry header: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size (padded),
    u32 compressed size @16, u32 arch @28 (e.g. 90), u64 flags @40, u64 uncompressed size @56.
  flags: 0x2000 = LZ4 block compression (decoded by the `lz4` package, a dependency), 0x8000 = zstd
  (decoded when a zstd module is importable: `compression.zstd` of Python 3.14, `zstandard` or
  `pyzstd`). Compressed bytes are decoded only by those libraries, never by code of ours; an entry
  whose decoder is not importable raises CompressedEntryError saying what to install.
  kernelbridge's CMake function builds with `-compress-mode=none`.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

__all__ = [
    "CONTRACT_SYMBOL_PREFIX", "CHECKSUM_SYMBOL_PREFIX", "MAX_ENTRY_BYTES", "MAX_CONTRACT_BYTES",
    "MAX_CONTRACT_DEPTH", "FatbinEntry",
    "ModuleFormatError", "CompressedEntryError", "ContractIntegrityError", "contract_checksum",
    "ptx_contract_directives", "module_format", "fatbin_entries", "embedded_contracts", "elf_contracts",
    "ptx_contracts", "zstd_available",
]

CONTRACT_SYMBOL_PREFIX = "__kb_contract_"
CHECKSUM_SYMBOL_PREFIX = "__kb_checksum_"
FATBIN_MAGIC = 0xBA55ED50
MAX_ENTRY_BYTES = 1 << 31     # a compressed entry may not declare more (2 GiB: far above real entries)
MAX_CONTRACT_BYTES = 1 << 20  # an embedded contract may not be longer (1 MiB: real ones have a few KB)
MAX_CONTRACT_DEPTH = 64       # JSON nesting of a contract, as the C++ reader allows (detail/json.hpp)
_LZ4_MAX_RATIO = 255          # an LZ4 block cannot expand more than ~255x (one length byte = 255 bytes)
_ELF_MAGIC = b"\x7fELF"
# a PTX header line; [ \t]*, not \s*: \s* also eats newlines, and 64 KiB of them took 13 s to search
_PTX_DIRECTIVE = re.compile(rb"^[ \t]*\.(?:version|target)\b", re.MULTILINE)
_SNIFF_SIZE = 1 << 16        # module_format reads no further (PTX headers come first)
_KIND_NAMES = {1: "ptx", 2: "elf"}
_FLAG_LZ4 = 0x2000
_FLAG_ZSTD = 0x8000
_U64 = (1 << 64) - 1


class ModuleFormatError(ValueError):
    """The bytes are not a well-formed fatbin, cubin or PTX module."""


class CompressedEntryError(ModuleFormatError):
    """A fatbin entry uses a compression this Python cannot decode (LZ4 without the `lz4` package, zstd
    without a zstd module)."""


class ContractIntegrityError(ModuleFormatError):
    """An embedded contract that cannot be trusted — no checksum (built before checksums), a checksum
    that does not match, a checksum without a contract, or JSON naming another kernel: never used."""

    def __init__(self, message: str, *, kernel: str) -> None:
        super().__init__(message)
        self.kernel = kernel


_F = TypeVar("_F", bound=Callable[..., Any])


def _typed_errors(what: str) -> Callable[[_F], _F]:
    """Whatever slipped past the explicit checks of a parser becomes a ModuleFormatError."""
    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except ModuleFormatError:
                raise
            except (struct.error, IndexError, KeyError, UnicodeError, OverflowError, ValueError) as exc:
                raise ModuleFormatError(f"{what}: malformed data ({type(exc).__name__}: {exc})") from None
        return checked  # type: ignore[return-value]
    return wrap


def contract_checksum(text: str | bytes) -> int:
    """FNV-1a 64 of the contract's bytes (UTF-8 for str), as kernelbridge/contract_checksum.hpp."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & _U64
    return h


_IDENT = re.compile(r"[A-Za-z_$][\w$]*", re.ASCII)


def ptx_contract_directives(kernel: str, contract_json: str) -> str:
    """The PTX globals that carry `contract_json` for `kernel`, in the format KB_CONTRACT's PTX has:
    `.global .align 1 .b8 __kb_contract_<k>[N] = {...};` and `.global .align 8 .u64
    __kb_checksum_<k> = <FNV-1a 64 as a signed decimal>;` (append them to a PTX module)."""
    if not _IDENT.fullmatch(kernel):
        raise ValueError(f"kernel: expected a PTX identifier, got {kernel!r}")
    data = contract_json.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{kernel}: contract JSON may not contain a NUL byte")
    body = ", ".join(str(b) for b in data + b"\0")
    s = contract_checksum(data)
    signed = s - (1 << 64) if s >= 1 << 63 else s
    return (f".global .align 1 .b8 {CONTRACT_SYMBOL_PREFIX}{kernel}[{len(data) + 1}] = {{{body}}};\n"
            f".global .align 8 .u64 {CHECKSUM_SYMBOL_PREFIX}{kernel} = {signed};\n")


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

    @property
    def where(self) -> str:
        return f"fatbin {self.kind} entry for arch {self.arch}"

    @_typed_errors("fatbin entry")
    def data(self) -> bytes:
        """The payload, decompressed — never more than the size its header declares."""
        if self.compression == "none":
            return self.raw
        declared = self.uncompressed_size
        if declared <= 0:
            raise ModuleFormatError(f"{self.where}: {self.compression}-compressed, but its header "
                                    "declares no uncompressed size")
        if declared > MAX_ENTRY_BYTES:
            raise ModuleFormatError(f"{self.where}: declares {declared} uncompressed bytes, more than "
                                    f"the {MAX_ENTRY_BYTES} a module entry may have")
        if self.compressed_size > len(self.raw):
            raise ModuleFormatError(f"{self.where}: compressed size {self.compressed_size} is larger "
                                    f"than its {len(self.raw)}-byte payload")
        packed = self.raw[: self.compressed_size] if self.compressed_size else self.raw
        if self.compression == "lz4":
            out = _lz4_decode(packed, declared, self.where)
        else:
            out = _zstd_decode(packed, declared, self.where)
        if len(out) != declared:
            raise ModuleFormatError(f"{self.where}: decompressed to {len(out)} bytes, header says {declared}")
        return out


def module_format(data: bytes | bytearray | memoryview | str) -> str:
    """'fatbin', 'cubin' or 'ptx', decided by the leading bytes (never by a file name): the one sniffer
    of module images, asked by `bridge.load_module` and `embedded_contracts` alike. A fatbin starts
    with FATBIN_MAGIC, a cubin with the ELF magic; PTX text (bytes, or a str) has a `.version` or
    `.target` line in its first 64 KiB and no NUL byte before its trailing padding. Anything else is
    a ModuleFormatError (a ValueError); a value that is neither bytes-like nor str is a TypeError."""
    if isinstance(data, str):
        if _looks_like_ptx(data[:_SNIFF_SIZE].encode("utf-8", "replace")):
            return "ptx"
        raise _not_a_module(f"a str of {len(data)} characters", data[:8])
    if isinstance(data, (bytes, bytearray)):
        size, head = len(data), bytes(data[:_SNIFF_SIZE])
    else:
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError(f"module image: expected bytes-like data (bytes, bytearray, memoryview) or str "
                            f"(PTX text), got {type(data).__name__}") from None
        size = view.nbytes
        flat = view if view.ndim == 1 and view.itemsize == 1 else memoryview(view.tobytes())
        head = bytes(flat[:_SNIFF_SIZE])
    if len(head) >= 4 and struct.unpack_from("<I", head)[0] == FATBIN_MAGIC:
        return "fatbin"
    if head[:4] == _ELF_MAGIC:
        return "cubin"
    if _looks_like_ptx(head):
        return "ptx"
    raise _not_a_module(f"{size} bytes", head[:8])


def _looks_like_ptx(head: bytes) -> bool:
    """A .version/.target line, and no NUL byte but trailing padding (so no binary file is PTX)."""
    return b"\0" not in head.rstrip(b"\0") and _PTX_DIRECTIVE.search(head) is not None


def _not_a_module(what: str, start: bytes | str) -> ModuleFormatError:
    shown = f" starting with {start!r}" if start else ""
    return ModuleFormatError(f"module image: expected a fatbin (magic 0x{FATBIN_MAGIC:08X}), an ELF cubin or "
                             f"PTX text (a .version or .target line); got {what}{shown}")


@_typed_errors("fatbin")
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
    if pos == 0:
        raise ModuleFormatError(f"data: {len(buf)} bytes are too short for a fatbin container header")
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
    """Kernel name → contract JSON text (checksum verified), read from a fatbin, an ELF cubin or PTX.

    Fatbins: ELF entries are read first, then PTX entries; a compressed PTX entry is not decompressed
    when an ELF entry for the same arch was read (nvcc builds both from the same source with the same
    __CUDA_ARCH__, so they carry the same contracts). Entries that disagree about one kernel's
    contract are an error (an arch-conditional KB_CONTRACT: the driver may run either entry). A module with no contracts returns {} (its kernels can
    then only go through bridge.unsafe_launch). Raises ContractIntegrityError (naming the kernel)
    for a contract whose checksum is missing or wrong, CompressedEntryError when an entry cannot be
    decompressed and no other entry could be read, and ModuleFormatError for any other malformed data.
    """
    fmt = module_format(data)
    if fmt == "ptx":
        return ptx_contracts(data if isinstance(data, str) else bytes(data))
    if fmt == "cubin":
        return elf_contracts(bytes(data))
    return _fatbin_contracts(bytes(data))


@_typed_errors("fatbin")
def _fatbin_contracts(data: bytes) -> dict[str, str]:
    entries = [e for e in fatbin_entries(data) if e.kind in ("elf", "ptx")]
    entries.sort(key=lambda e: e.kind != "elf")
    found: dict[str, str] = {}
    undecodable: list[CompressedEntryError] = []
    read_any = False
    elf_archs: set[int] = set()
    for entry in entries:
        if entry.kind == "ptx" and entry.compression != "none" and entry.arch in elf_archs:
            continue      # same source, same __CUDA_ARCH__ as a cubin already read: same contracts
        try:
            payload = entry.data()
        except CompressedEntryError as exc:
            undecodable.append(exc)
            continue
        read_any = True
        if entry.kind == "elf":
            elf_archs.add(entry.arch)
            got = _elf_contracts(payload, entry.where)
        else:
            got = _ptx_contracts(payload.rstrip(b"\0").decode("latin-1"), entry.where)
        for name, text in got.items():
            if found.setdefault(name, text) != text:
                raise ModuleFormatError(f"{name}: the {entry.where} carries a different contract than "
                                        "another entry")
    if undecodable and not read_any:
        raise undecodable[0]
    return found


def _verified(blobs: dict[str, bytes], sums: dict[str, int], where: str) -> dict[str, str]:
    """Contract texts whose stored checksum matches; ContractIntegrityError for any other."""
    orphans = sorted(set(sums) - set(blobs))
    if orphans:
        name = orphans[0]
        raise ContractIntegrityError(
            f"{name}: the {where} carries a contract checksum ({CHECKSUM_SYMBOL_PREFIX}{name}) but no "
            f"contract ({CONTRACT_SYMBOL_PREFIX}{name}); the module is damaged: rebuild it", kernel=name)
    out: dict[str, str] = {}
    for name in sorted(blobs):
        text = blobs[name].split(b"\0", 1)[0]
        if len(text) > MAX_CONTRACT_BYTES:
            raise ModuleFormatError(f"{name}: the contract in the {where} has {len(text)} bytes, more than the "
                                    f"{MAX_CONTRACT_BYTES} a contract may have; the module is damaged or hostile")
        if name not in sums:
            raise ContractIntegrityError(
                f"{name}: the contract in the {where} has no checksum ({CHECKSUM_SYMBOL_PREFIX}{name}): "
                "it was built before kernelbridge checked contract integrity, or the module is damaged; "
                "rebuild it with the current kernelbridge/kernel_contract.cuh (or python -m dsl.aot)",
                kernel=name)
        computed = contract_checksum(text)
        if computed != sums[name]:
            raise ContractIntegrityError(
                f"{name}: the contract in the {where} fails its checksum (stored 0x{sums[name]:016x}, "
                f"computed 0x{computed:016x} over its {len(text)} bytes); the module is damaged: rebuild "
                "it (the contract is not used)", kernel=name)
        out[name] = _named_contract(text, name, where)
    return out


def _named_contract(text: bytes, name: str, where: str) -> str:
    """The checksum covers the JSON, not the symbol name: the JSON must name the kernel it is stored for
    (a damaged name shared by both symbols would otherwise move a contract onto another kernel)."""
    depth = _json_depth(text)
    if depth > MAX_CONTRACT_DEPTH:
        raise ModuleFormatError(f"{name}: the contract in the {where} is nested {depth} levels deep, deeper than "
                                f"the {MAX_CONTRACT_DEPTH} levels a contract may have")
    try:
        decoded = text.decode("utf-8")
        obj = json.loads(decoded)
    except ValueError:    # UnicodeDecodeError and JSONDecodeError (depth is bounded above)
        raise ModuleFormatError(f"{name}: the contract in the {where} is not JSON text") from None
    kernel = obj.get("kernel") if isinstance(obj, dict) else None
    if kernel != name:
        raise ContractIntegrityError(f"{name}: the contract stored for kernel {name!r} in the {where} names "
                                     f"kernel {kernel!r}; the module is damaged: rebuild it", kernel=name)
    return decoded


_JSON_ESCAPE = re.compile(rb"\\[\s\S]")         # a backslash and the character it escapes
_JSON_STRING = re.compile(rb'"[^"]*"')            # a string, once its escapes are gone
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 for b in range(256)]       # a bracket's change of depth


def _json_depth(text: bytes) -> int:
    """The deepest nesting of `[`/`{` in JSON `text`, outside strings, in linear time and without
    recursion (json.loads recurses once per level: RecursionError past ~1000). Escapes go first, then
    strings. An unterminated string counts its brackets too, and a backslash outside a string (which
    json.loads stops at) hides only what follows it: never shallower than json.loads goes."""
    brackets = _JSON_STRING.sub(b"", _JSON_ESCAPE.sub(b"", text)).translate(None, _NOT_BRACKETS)
    if len(brackets) <= MAX_CONTRACT_DEPTH:
        return len(brackets)          # a bound, enough to pass: the real depth is no deeper
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)))


# ---- ELF ---------------------------------------------------------------------------------------
_SHT_SYMTAB, _SHT_NOBITS, _SHT_SYMTAB_SHNDX = 2, 8, 18
_SHN_XINDEX = 0xFFFF
_SHDR_SIZE, _SYM_SIZE = 64, 24


def elf_contracts(elf: bytes) -> dict[str, str]:
    """Verified contracts in one ELF cubin: the initialiser bytes of its `__kb_contract_*` symbols,
    each checked against its `__kb_checksum_*` symbol."""
    return _elf_contracts(bytes(elf), "cubin")


@_typed_errors("cubin")
def _elf_contracts(elf: bytes, where: str) -> dict[str, str]:
    blobs: dict[str, bytes] = {}
    sums: dict[str, int] = {}
    for name, blob in _elf_kb_symbols(elf, where):
        if name.startswith(CONTRACT_SYMBOL_PREFIX):
            key, table = name[len(CONTRACT_SYMBOL_PREFIX):], blobs
            value: Any = blob
        else:
            if len(blob) != 8:
                raise ModuleFormatError(f"{name}: the {where}'s checksum symbol has {len(blob)} bytes, not 8")
            key, table, value = name[len(CHECKSUM_SYMBOL_PREFIX):], sums, struct.unpack("<Q", blob)[0]
        if table.setdefault(key, value) != value:
            raise ModuleFormatError(f"{name}: defined twice with different bytes in the {where}")
    return _verified(blobs, sums, where)


def _elf_kb_symbols(elf: bytes, where: str) -> list[tuple[str, bytes]]:
    """(name, initialiser bytes) of every `__kb_contract_*` / `__kb_checksum_*` symbol."""
    sections = _elf_sections(elf, where)
    out = []
    for sec in sections:
        if sec["type"] != _SHT_SYMTAB:
            continue
        if sec["entsize"] not in (0, _SYM_SIZE) or sec["link"] >= len(sections):
            raise ModuleFormatError(f"{where}: malformed symbol table (section {sec['index']})")
        strtab = sections[sec["link"]]
        shndx_table = next((s for s in sections
                            if s["type"] == _SHT_SYMTAB_SHNDX and s["link"] == sec["index"]), None)
        for k in range(sec["size"] // _SYM_SIZE):
            name_off, _info, _other, shndx, value, size = struct.unpack_from(
                "<IBBHQQ", elf, sec["offset"] + k * _SYM_SIZE)
            name = _cstr(elf, strtab, name_off, where)
            if not name.startswith((CONTRACT_SYMBOL_PREFIX, CHECKSUM_SYMBOL_PREFIX)):
                continue
            if shndx == _SHN_XINDEX and shndx_table is not None:
                if 4 * k + 4 > shndx_table["size"]:
                    raise ModuleFormatError(f"{where}: {name}: extended section index table too short")
                shndx = struct.unpack_from("<I", elf, shndx_table["offset"] + 4 * k)[0]
            if shndx == 0 or shndx >= len(sections):
                raise ModuleFormatError(f"{name}: symbol is undefined in the {where}")
            holder = sections[shndx]
            if holder["type"] == _SHT_NOBITS:
                raise ModuleFormatError(f"{name}: symbol has no initialiser in the {where} (section without data)")
            rel = value - holder["addr"] if holder["addr"] and value >= holder["addr"] else value
            if rel + size > holder["size"]:
                raise ModuleFormatError(f"{name}: symbol runs past its section in the {where}")
            out.append((name, elf[holder["offset"] + rel: holder["offset"] + rel + size]))
    return out


def _elf_sections(elf: bytes, where: str = "cubin") -> list[dict[str, int]]:
    if elf[:4] != _ELF_MAGIC:
        raise ModuleFormatError(f"{where}: missing ELF magic")
    if len(elf) < 64:
        raise ModuleFormatError(f"{where}: {len(elf)} bytes are too short for an ELF header")
    if elf[4] != 2 or elf[5] != 1:
        raise ModuleFormatError(f"{where}: expected a 64-bit little-endian ELF (CUDA cubin)")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    if shnum == 0 and shoff:
        if shoff + _SHDR_SIZE > len(elf):
            raise ModuleFormatError(f"{where}: section header table runs past the end of the file")
        shnum = struct.unpack_from("<Q", elf, shoff + 0x20)[0]  # extended count in section 0's size
    if shnum and shentsize < _SHDR_SIZE:
        raise ModuleFormatError(f"{where}: section header entries of {shentsize} bytes (expected {_SHDR_SIZE})")
    if shoff + shnum * shentsize > len(elf):
        raise ModuleFormatError(f"{where}: section header table runs past the end of the file")
    sections = []
    for i in range(shnum):
        (name_off, typ, _flags, addr, offset, size, link, _info, _align, entsize) = struct.unpack_from(
            "<IIQQQQIIQQ", elf, shoff + i * shentsize)
        if typ != _SHT_NOBITS and offset + size > len(elf):
            raise ModuleFormatError(f"{where}: section {i} runs past the end of the file")
        sections.append({"index": i, "type": typ, "addr": addr, "offset": offset, "size": size,
                         "link": link, "entsize": entsize, "name_off": name_off})
    return sections


def _cstr(buf: bytes, strtab: dict[str, int], off: int, where: str) -> str:
    """A NUL-terminated name inside the string table section `strtab`."""
    if strtab["type"] == _SHT_NOBITS or off >= strtab["size"]:
        raise ModuleFormatError(f"{where}: a symbol name lies outside its string table")
    start, stop = strtab["offset"] + off, strtab["offset"] + strtab["size"]
    end = buf.find(b"\0", start, stop)
    return buf[start: end if end >= 0 else stop].decode("latin-1")


# ---- PTX ---------------------------------------------------------------------------------------
_PTX_GLOBAL = r"\.global\s+(?:\.align\s+\d+\s+)?"
_PTX_CONTRACT_HEAD = re.compile(     # up to the initialiser's opening `{` or `"`
    _PTX_GLOBAL + r"\.[bsu]8\s+" + CONTRACT_SYMBOL_PREFIX
    + r"([A-Za-z_$][\w$]*)\s*\[\s*\d*\s*\]\s*=\s*([{\"])", re.ASCII)
_PTX_CHECKSUM = re.compile(
    _PTX_GLOBAL + r"\.[bsu]64\s+" + CHECKSUM_SYMBOL_PREFIX
    + r"([A-Za-z_$][\w$]*)\s*=\s*(-?(?:0[xX][0-9A-Fa-f]+|\d+))U?\s*;", re.ASCII)
_PTX_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|[\s\S]?)")   # splits a literal: text, escape, text, ...


_OCTAL_DIGITS = frozenset("01234567")
_PTX_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def _escape_char(body: str) -> str | None:
    """The one byte (as a latin-1 character) an escape body (after the backslash) stands for: a
    letter, xH or xHH (hex digits of either case), or one to three octal digits up to 0o377; None if none."""
    if body[:1] == "x" and len(body) > 1:
        return chr(int(body[1:], 16))
    if body[:1] in _OCTAL_DIGITS:
        v = int(body, 8)
        return chr(v) if v < 256 else None
    return _PTX_SIMPLE_ESCAPES.get(body)


def ptx_contracts(ptx: str | bytes) -> dict[str, str]:
    """Verified contracts in PTX text: `.global .b8 __kb_contract_<k>[N] = {...}` initialisers, each
    checked against its `.global .u64 __kb_checksum_<k> = <value>`."""
    text = ptx.encode("utf-8", errors="replace").decode("latin-1") if isinstance(ptx, str) \
        else bytes(ptx).decode("latin-1")
    return _ptx_contracts(text, "PTX")


@_typed_errors("PTX")
def _ptx_contracts(text: str, where: str) -> dict[str, str]:
    """`text` holds one character per byte (latin-1), so initialisers give back the exact bytes."""
    if CONTRACT_SYMBOL_PREFIX not in text and CHECKSUM_SYMBOL_PREFIX not in text:
        return {}         # the common case of foreign PTX, found without running the regexes
    blobs: dict[str, bytes] = {}
    sums: dict[str, int] = {}

    def put(table: dict, name: str, value: Any, symbol: str) -> None:
        if table.setdefault(name, value) != value:
            raise ModuleFormatError(f"{symbol}{name}: declared twice with different values in the {where}")

    pos = 0
    while (m := _PTX_CONTRACT_HEAD.search(text, pos)) is not None:
        name, body = m.group(1), m.end()
        if m.group(2) == "{":
            end = _initialiser_end(text, body, "}", 8 * MAX_CONTRACT_BYTES, name, where)
            blob = _ptx_bytes(text[body:end], name, where)
        else:                             # a string literal (some PTX producers)
            end = _initialiser_end(text, body, '"', MAX_CONTRACT_BYTES, name, where)
            blob = _ptx_unescape(text[body:end], name, where)
        put(blobs, name, blob, CONTRACT_SYMBOL_PREFIX)
        pos = end + 1
    for m in _PTX_CHECKSUM.finditer(text):
        value = int(m.group(2), 0)
        if not -(1 << 63) <= value <= _U64:
            raise ModuleFormatError(f"{CHECKSUM_SYMBOL_PREFIX}{m.group(1)}: {value} does not fit 64 bits")
        put(sums, m.group(1), value & _U64, CHECKSUM_SYMBOL_PREFIX)
    return _verified(blobs, sums, where)


def _initialiser_end(text: str, start: int, closer: str, most: int, name: str, where: str) -> int:
    """Index of the `closer` (`}`, or a `"` after an even run of backslashes) ending the initialiser whose
    body starts at `start`, looked for only `most` characters far: each character is looked at once
    or twice, and the text past a too long initialiser never (no regex: the `re` engine keeps a
    backtracking frame per repetition of a group, hundreds of MB for a literal of megabytes)."""
    stop = min(len(text), start + most + 1)
    pos = start
    while (end := text.find(closer, pos, stop)) >= 0:
        run = end
        while closer == '"' and run > start and text[run - 1] == "\\":
            run -= 1
        if (end - run) % 2 == 0:
            return end
        pos = end + 1                     # an escaped quote: part of the literal
    what = "string initialiser" if closer == '"' else "initialiser"
    if stop < len(text):
        raise ModuleFormatError(f"{CONTRACT_SYMBOL_PREFIX}{name}: the {where}'s {what} is longer than the {most} "
                                f"characters a contract of at most {MAX_CONTRACT_BYTES} bytes may take")
    raise ModuleFormatError(f"{CONTRACT_SYMBOL_PREFIX}{name}: the {where}'s {what} has no closing {closer!r}")


def _ptx_bytes(init: str, name: str, where: str) -> bytes:
    """The bytes of a `{1, 2, ...}` initialiser."""
    out = bytearray()
    for tok in init.split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            value = int(tok, 0)
        except ValueError:
            value = -1
        if not 0 <= value <= 255:
            raise ModuleFormatError(f"{CONTRACT_SYMBOL_PREFIX}{name}: bad byte {tok[:20]!r} in the {where}'s "
                                    "initialiser")
        out.append(value)
    return bytes(out)


def _ptx_unescape(literal: str, name: str, where: str) -> bytes:
    """C-style escapes of a PTX string initialiser (\\n \\t \\r \\0 \\\\ \\" \\' \\xHH \\ooo), in linear time:
    one split into text and escape bodies, each escape decoded on its own. `literal` holds one character
    per byte (latin-1) and at most MAX_CONTRACT_BYTES of them (_initialiser_end looks no further)."""
    parts = _PTX_ESCAPE.split(literal)       # text, escape body, text, escape body, ..., text
    bodies = parts[1::2]
    chars = [_escape_char(b) for b in bodies]
    if None in chars:
        bad = bodies[chars.index(None)]
        what = "escape out of byte range" if re.fullmatch("[0-7]{3}", bad) else f"bad escape \\{bad}"
        raise ModuleFormatError(f"{CONTRACT_SYMBOL_PREFIX}{name}: {what} in the {where}'s string")
    parts[1::2] = chars
    return "".join(parts).encode("latin-1")


# ---- decompression -----------------------------------------------------------------------------
def _lz4_decode(packed: bytes, declared: int, where: str) -> bytes:
    """At most `declared` bytes from an LZ4 block, decoded by the `lz4` package (untrusted bytes go to
    a maintained decoder, not to one of ours); CompressedEntryError when it is not importable."""
    if declared > _LZ4_MAX_RATIO * len(packed) + 32:
        raise ModuleFormatError(f"{where}: declares {declared} bytes from {len(packed)} LZ4 bytes, more "
                                "than LZ4 can expand to")
    try:
        import lz4.block as lz4_block  # type: ignore[import-not-found]
    except ImportError:
        raise CompressedEntryError(
            f"{where} is LZ4-compressed and the 'lz4' package (a kernelbridge dependency) is not "
            "importable: pip install lz4, or rebuild with nvcc -compress-mode=none "
            "(kernelbridge_add_cuda_module does)") from None
    try:
        # The output buffer is exactly `declared` bytes: data that would decode past it is refused.
        return lz4_block.decompress(packed, uncompressed_size=declared)
    except Exception as exc:  # LZ4BlockError, MemoryError, ...: all mean this entry is unusable
        raise ModuleFormatError(f"{where}: corrupt LZ4 data ({type(exc).__name__}: {exc})") from None


def _zstd_decode(packed: bytes, declared: int, where: str) -> bytes:
    """At most `declared` + 1 bytes of a zstd frame (one more shows the entry lies about its size)."""
    limit = declared + 1
    decoder = _zstd_decoder(where)
    try:
        return decoder(packed, limit)
    except Exception as exc:  # each module's ZstdError, MemoryError, ...: this entry is unusable
        raise ModuleFormatError(f"{where}: corrupt zstd data ({type(exc).__name__}: {exc})") from None


def zstd_available() -> bool:
    """Whether this Python can decode zstd fatbin entries (nvcc 13 compresses PTX entries so)."""
    try:
        _zstd_decoder("")
        return True
    except CompressedEntryError:
        return False


def _zstd_decoder(where: str) -> Callable[[bytes, int], bytes]:
    try:  # Python 3.14+
        from compression import zstd  # type: ignore[import-not-found]
        return lambda data, limit: zstd.ZstdDecompressor().decompress(data, max_length=limit)
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
        return lambda data, limit: _read_up_to(zstandard.ZstdDecompressor().stream_reader(data), limit)
    except ImportError:
        pass
    try:
        import pyzstd  # type: ignore[import-not-found]
        return lambda data, limit: pyzstd.ZstdDecompressor().decompress(data, max_length=limit)
    except ImportError:
        pass
    raise CompressedEntryError(
        f"{where} is zstd-compressed and no zstd decoder is importable "
        "(Python 3.14's compression.zstd, 'zstandard' or 'pyzstd'); rebuild with "
        "nvcc -compress-mode=none (kernelbridge_add_cuda_module does) or install 'zstandard'")


def _read_up_to(reader: Any, limit: int) -> bytes:
    out = bytearray()
    while len(out) < limit:
        chunk = reader.read(min(limit - len(out), 1 << 20))
        if not chunk:
            break
        out += chunk
    return bytes(out)
