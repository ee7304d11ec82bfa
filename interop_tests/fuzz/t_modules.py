"""Fuzz target `modules`: `bridge.fatbin.embedded_contracts` on mutated real fatbins, cubins and PTX.

Bases are the package's installed fatbins (`bridge/kernels/*.fatbin`, built by `pip install -e .`) and
small modules nvcc builds here once (a cubin, PTX, a plain and an LZ4-compressed fatbin of a kernel
with a KB_CONTRACT; cached under the temp directory, keyed by source, flags and macro header).
Mutations know the formats: fatbin container and entry header fields, ELF section headers and
`__kb_contract_*` symbol entries, the contract JSON bytes themselves, PTX initialisers, LZ4 payloads
and an LZ4 bomb (an entry that declares 4096 bytes and expands to ~250 MB), plus flips, truncations,
insertions and splices. Allowed: a dict or ModuleFormatError (or a bridge typed error). Oracle: a
kernel the unmutated module has a contract for never comes back with a *different valid* contract.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from interop_tests.cpp.contract_kernel_sources import AXPB, BARE, FILL, HEADER
from interop_tests.fuzz.targets import Oracle

TIMEOUT = 15.0
INPUTS = 300         # a suite run's inputs (targets.py)
SOURCE = HEADER + FILL + AXPB + BARE
GENCODE = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90"]
BUILDS: dict[str, list[str]] = {
    "nvcc.cubin": ["-cubin", "-arch=sm_80"],
    "nvcc.ptx": ["-ptx", "-arch=sm_80"],
    "nvcc_plain.fatbin": ["-fatbin", "-compress-mode=none", *GENCODE],
    "nvcc_lz4.fatbin": ["-fatbin", "-compress-mode=speed", *GENCODE],
}


# ------------------------------------------------------------------------------- bases
_BASES: dict[str, Path] | None = None


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def _build_nvcc_bases() -> dict[str, Path]:
    import bridge
    nvcc = _nvcc()
    if nvcc is None:
        return {}
    include = bridge.cpp_kernels.include_dir()
    header = (include / "kernelbridge" / "kernel_contract.cuh").read_bytes()
    key = hashlib.sha256(SOURCE.encode() + header + nvcc.encode() + repr(BUILDS).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"kb_fuzz_modules_{os.getuid()}" / key
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, flags in BUILDS.items():
        target = root / name
        if not target.exists():
            src = root / "k.cu"
            if not src.exists():
                tmp = root / f"k.cu.{os.getpid()}"
                tmp.write_text(SOURCE)
                os.replace(tmp, src)
            part = root / f"{name}.{os.getpid()}"
            proc = subprocess.run([nvcc, *flags, "-std=c++17", f"-I{include}", str(src), "-o", str(part)],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"nvcc failed for the fuzz base {name}:\n{proc.stderr}")
            os.replace(part, target)
        out[name] = target
    return out


def bases() -> dict[str, Path]:
    """Base module name -> file: the package's fatbins plus the nvcc-built ones (sorted, stable)."""
    global _BASES
    if _BASES is None:
        import bridge
        found = {f"pkg_{n}.fatbin": bridge.cpp_kernels.path(n) for n in bridge.cpp_kernels.available()}
        found.update(_build_nvcc_bases())
        _BASES = dict(sorted(found.items()))
    return _BASES


_DATA: dict[str, bytes] = {}


def _data(name: str) -> bytes:
    if name not in _DATA:
        _DATA[name] = bases()[name].read_bytes()
    return _DATA[name]


# ------------------------------------------------------------------------------- structure
def _fatbin_fields(buf: bytes) -> list[tuple[str, int, int]]:
    """(field name, offset, width) of the container and entry header fields of a valid fatbin."""
    fields: list[tuple[str, int, int]] = []
    pos = 0
    while pos + 16 <= len(buf) and struct.unpack_from("<I", buf, pos)[0] == 0xBA55ED50:
        _, _, hsize, size = struct.unpack_from("<IHHQ", buf, pos)
        fields += [("container.version", pos + 4, 2), ("container.header_size", pos + 6, 2),
                   ("container.size", pos + 8, 8)]
        e, end = pos + hsize, pos + hsize + size
        while e + 16 <= end:
            _, _, ehs, eps = struct.unpack_from("<HHIQ", buf, e)
            for name, off, width in (("kind", 0, 2), ("header_size", 4, 4), ("payload_size", 8, 8),
                                     ("compressed_size", 16, 4), ("arch", 28, 4), ("flags", 40, 8),
                                     ("uncompressed_size", 56, 8)):
                if off + width <= ehs:
                    fields.append((f"entry.{name}", e + off, width))
            fields.append(("entry.payload", e + ehs, eps))
            e += ehs + eps
        pos = (end + 7) & ~7
    return fields


def _elf_fields(buf: bytes, base: int = 0) -> list[tuple[str, int, int]]:
    """Header, section-header and contract-symbol fields of an ELF image at `base` in `buf`."""
    if buf[base:base + 4] != b"\x7fELF":
        return []
    fields = [("elf.shoff", base + 0x28, 8), ("elf.shentsize", base + 0x3A, 2), ("elf.shnum", base + 0x3C, 2),
              ("elf.shstrndx", base + 0x3E, 2), ("elf.class", base + 4, 1)]
    shoff = struct.unpack_from("<Q", buf, base + 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", buf, base + 0x3A)
    secs = []
    for i in range(shnum):
        h = base + shoff + i * shentsize
        if h + 64 > len(buf):
            break
        typ = struct.unpack_from("<I", buf, h + 4)[0]
        off, size = struct.unpack_from("<QQ", buf, h + 24)
        link = struct.unpack_from("<I", buf, h + 40)[0]
        secs.append((typ, off, size, link))
        for name, o, w in (("type", 4, 4), ("addr", 16, 8), ("offset", 24, 8), ("size", 32, 8), ("link", 40, 4),
                           ("entsize", 56, 8)):
            fields.append((f"section.{name}", h + o, w))
    for typ, off, size, link in secs:
        if typ != 2 or link >= len(secs):
            continue
        strtab = secs[link][1]
        for k in range(size // 24):
            s = base + off + k * 24
            if s + 24 > len(buf):
                break
            name_off = struct.unpack_from("<I", buf, s)[0]
            name_at = base + strtab + name_off
            if buf[name_at:name_at + 14] == b"__kb_contract_":
                fields += [("symbol.name", s, 4), ("symbol.shndx", s + 6, 2), ("symbol.value", s + 8, 8),
                           ("symbol.size", s + 16, 8), ("symbol.name_bytes", name_at, 14 + 4)]
    return fields


def _structure(name: str) -> list[tuple[str, int, int]]:
    buf = _data(name)
    fields = _fatbin_fields(buf) or _elf_fields(buf)
    for fname, off, width in list(fields):   # ELF images inside uncompressed fatbin entries
        if fname == "entry.payload":
            fields += _elf_fields(buf, off)
    at = buf.find(b'{"version"')
    while at >= 0:                            # contract JSON bytes (cubin sections, plain fatbins)
        end = buf.find(b"\0", at)
        fields.append(("contract.json", at, (end if end > 0 else len(buf)) - at))
        at = buf.find(b'{"version"', at + 1)
    at = buf.find(b".global .align 1 .b8 __kb_contract_")
    while at >= 0:                            # PTX initialisers
        end = buf.find(b"};", at)
        fields.append(("ptx.initialiser", at, (end if end > 0 else len(buf)) - at))
        at = buf.find(b".global .align 1 .b8 __kb_contract_", at + 1)
    return fields


_STRUCTURE: dict[str, list] = {}

ODD_NUMBERS = [0, 1, 2, 15, 16, 17, 64, 4096, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1]


# ------------------------------------------------------------------------------- generation
def _field_mutation(rng, name: str, fields: list[tuple[str, int, int]], size: int) -> tuple:
    fname, off, width = rng.choice(fields)
    if fname == "entry.payload" or fname in ("contract.json", "ptx.initialiser"):
        if width <= 0:
            return ("flip", off % max(size, 1), rng.randrange(8))
        at = off + rng.randrange(width)
        r = rng.random()
        if fname == "ptx.initialiser" and r < 0.5:
            return ("set", at, rng.choice([b"256", b"-1", b"999999999999", b"0x41", b"abc", b"}", b"{", b"\xff\xfe",
                                           b"\x00", b"]", b"[0]", b",,", b"\xc3\xa9"]))
        if r < 0.7:
            return ("flip", at, rng.randrange(8))
        return ("set", at, bytes([rng.choice([0, 0x22, 0x5C, 0x7B, 0x7D, 0xC3, 0xFF, 0x80])]))
    if width in (1, 2, 4, 8):
        value = rng.choice(ODD_NUMBERS + [size, size + 1, max(0, size - 1)]) % (1 << (8 * width))
        if fname == "entry.flags":
            value = rng.choice([0, 0x2000, 0x8000, 0xA000, 0x11, 2**64 - 1])
        return ("int", off, width, value)
    return ("flip", off + rng.randrange(max(width, 1)), rng.randrange(8))


def _raw_mutation(rng, size: int, names: list[str]) -> tuple:
    r = rng.random()
    at = rng.randrange(max(size, 1))
    if r < 0.35:
        return ("flip", at, rng.randrange(8))
    if r < 0.5:
        return ("trunc", rng.choice([0, 1, 4, 15, 16, 63, 64, rng.randrange(max(size, 1))]))
    if r < 0.62:
        return ("insert", at, bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))))
    if r < 0.72:
        return ("delete", at, rng.randint(1, 256))
    if r < 0.82:
        return ("dup", at, rng.randint(1, 512))
    return ("splice", rng.choice(names), rng.random(), rng.randint(16, 4096), at)


def generate(rng) -> dict:
    names = list(bases())
    if not names:
        return {"base": None, "mutations": []}
    name = rng.choice(names)
    if name not in _STRUCTURE:
        _STRUCTURE[name] = _structure(name)
    fields, size = _STRUCTURE[name], len(_data(name))
    muts: list[tuple] = []
    if name.endswith(".fatbin") and rng.random() < 0.04:
        entries = [i for i, f in enumerate(f for f in fields if f[0] == "entry.kind")]
        muts.append(("lz4_bomb", rng.choice(entries) if entries else 0, rng.choice([300_000, 1_000_000])))
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
        if fields and rng.random() < 0.6:
            muts.append(_field_mutation(rng, name, fields, size))
        else:
            muts.append(_raw_mutation(rng, size, names))
    as_text = name.endswith(".ptx") and rng.random() < 0.3
    if as_text and rng.random() < 0.3:
        muts.append(("text_insert", rng.randrange(size), rng.choice(["\u00e9", "\U0001F600", "\\", "\\x", '"'])))
    return {"base": name, "mutations": muts, "as_text": as_text}


# ------------------------------------------------------------------------------- execution
def _lz4_bomb(buf: bytearray, entry_no: int, k: int) -> bytearray:
    """Replace entry `entry_no`'s payload by an LZ4 block that declares 4096 bytes and expands far more."""
    fields = [f for f in _fatbin_fields(bytes(buf)) if f[0] in ("entry.kind", "container.size")]
    kinds = [f for f in fields if f[0] == "entry.kind"]
    if not kinds:
        return buf
    e = kinds[entry_no % len(kinds)][1]
    hsize, psize = struct.unpack_from("<IQ", buf, e + 4)
    bomb = b"\x1f" + b"A" + b"\x01\x00" + b"\xff" * k + b"\x00"
    bomb += b"\0" * (-len(bomb) % 8)
    out = buf[: e + hsize] + bomb + buf[e + hsize + psize:]
    struct.pack_into("<Q", out, e + 8, len(bomb))
    if hsize >= 20:
        struct.pack_into("<I", out, e + 16, len(bomb))
    if hsize >= 48:
        flags = struct.unpack_from("<Q", out, e + 40)[0]
        struct.pack_into("<Q", out, e + 40, (flags | 0x2000) & ~0x8000)
    if hsize >= 64:
        struct.pack_into("<Q", out, e + 56, 4096)
    container = max((f for f in fields if f[0] == "container.size" and f[1] < e), key=lambda f: f[1])
    old = struct.unpack_from("<Q", out, container[1])[0]
    struct.pack_into("<Q", out, container[1], old + len(bomb) - psize)
    return out


def materialize(spec: dict) -> bytes | str:
    buf = bytearray(_data(spec["base"]))
    text_inserts = []
    for m in spec["mutations"]:
        op = m[0]
        if op == "flip" and m[1] < len(buf):
            buf[m[1]] ^= 1 << m[2]
        elif op == "set":
            buf[m[1]: m[1] + len(m[2])] = m[2]
        elif op == "int" and m[1] + m[2] <= len(buf):
            buf[m[1]: m[1] + m[2]] = m[3].to_bytes(m[2], "little")
        elif op == "trunc":
            del buf[m[1]:]
        elif op == "insert":
            buf[m[1]:m[1]] = m[2]
        elif op == "delete":
            del buf[m[1]: m[1] + m[2]]
        elif op == "dup":
            buf[m[1]:m[1]] = buf[m[1]: m[1] + m[2]]
        elif op == "splice":
            other = _data(m[1])
            start = int(m[2] * max(len(other) - 1, 0))
            buf[m[4]:m[4]] = other[start: start + m[3]]
        elif op == "lz4_bomb":
            buf = _lz4_bomb(buf, m[1], m[2])
        elif op == "text_insert":
            text_inserts.append(m)
    if not spec.get("as_text"):
        return bytes(buf)
    text = bytes(buf).decode("utf-8", errors="replace")
    for _, at, s in text_inserts:
        text = text[:at] + s + text[at:]
    return text


_BASE_CONTRACTS: dict[str, dict | None] = {}


def _base_contracts(name: str) -> dict | None:
    if name not in _BASE_CONTRACTS:
        from bridge.fatbin import embedded_contracts
        try:
            _BASE_CONTRACTS[name] = embedded_contracts(_data(name))
        except Exception:   # noqa: BLE001 - an unreadable base only disables the oracle for it
            _BASE_CONTRACTS[name] = None
    return _BASE_CONTRACTS[name]


def warm() -> None:
    import bridge.fatbin  # noqa: F401
    for name in bases():
        _base_contracts(name)


def execute(spec: dict) -> str:
    from bridge.fatbin import embedded_contracts
    if spec["base"] is None:
        return "no base modules (no nvcc and no installed fatbins)"
    data = materialize(spec)
    got = embedded_contracts(data)
    if not isinstance(got, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
        raise Oracle(f"embedded_contracts returned {type(got).__name__}, not dict[str, str]: {got!r:.300}")
    check_against_base(_base_contracts(spec["base"]), got)
    return f"{len(got)} contracts"


def check_against_base(base: dict | None, got: dict) -> None:
    """Oracle: a kernel the unmutated module has a contract for never gets a different VALID one."""
    from bridge import _native
    from bridge.errors import ContractDefinitionError
    for kernel, text in got.items():
        if base is None or kernel not in base or base[kernel] == text:
            continue
        try:
            _native.Contract(text)
        except ContractDefinitionError:
            continue          # corrupt and refused when loaded: a typed error, not a wrong contract
        raise Oracle(f"{kernel}: corrupt module bytes gave a different VALID contract\n  base: {base[kernel]}\n"
                     f"   got: {text}")


def allowed(exc: BaseException, spec: dict) -> bool:
    from bridge.errors import LaunchContractError
    from bridge.fatbin import ModuleFormatError
    return isinstance(exc, (ModuleFormatError, LaunchContractError))
