"""bridge.fatbin decompresses untrusted entries without trusting them: LZ4 and zstd stop at the size the
entry header declares (a decompression bomb is refused without allocating it), LZ4 is decoded by the
`lz4` package only (without it an LZ4 entry is a typed refusal saying what to install; bridge/fatbin.py
holds no LZ4 decoder of its own), and a compressed PTX entry is not inflated when a cubin of the same
arch already carries the contracts."""
from __future__ import annotations

import importlib
import re
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

import bridge.fatbin as fatbin
from bridge.fatbin import ModuleFormatError, embedded_contracts, fatbin_entries

from interop_tests.cpp.contract_kernel_sources import FILL, HEADER
from interop_tests.cpp.lz4_support import hide_lz4_package, require_lz4_package

SOURCE = HEADER + FILL


def forge_fatbin(*entries: tuple[int, int, int, bytes, int, int]) -> bytes:
    """A fatbin container of (kind, arch, flags, payload, compressed size, uncompressed size) entries,
    laid out as nvcc writes them (64-byte entry headers)."""
    body = b""
    for kind, arch, flags, payload, csize, usize in entries:
        hdr = bytearray(64)
        struct.pack_into("<HHIQ", hdr, 0, kind, 0x0101, 64, len(payload))
        struct.pack_into("<I", hdr, 16, csize)
        struct.pack_into("<I", hdr, 28, arch)
        struct.pack_into("<Q", hdr, 40, flags)
        struct.pack_into("<Q", hdr, 56, usize)
        body += bytes(hdr) + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def lz4_bomb(extension_bytes: int) -> tuple[bytes, int]:
    """An LZ4 block (literal 'A', then one match of offset 1 whose length has `extension_bytes` 255s,
    then 5 literals 'B') and the size it really decodes to: 1 + (15 + 255*n + 0 + 4) + 5."""
    block = b"\x1f" + b"A" + b"\x01\x00" + b"\xff" * extension_bytes + b"\x00" + b"\x50" + b"BBBBB"
    return block, 1 + 15 + 255 * extension_bytes + 4 + 5


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def build(nvcc, include_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("lz")
    (root / "k.cu").write_text(SOURCE)

    def run(*flags: str) -> bytes:
        out = root / f"out{abs(hash(flags))}.bin"
        proc = subprocess.run([nvcc, *flags, "-std=c++17", f"-I{include_dir}", str(root / "k.cu"), "-o", str(out)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return out.read_bytes()

    return run


def test_hand_built_lz4_bomb_really_decodes_to_its_size():
    """Control: the bomb is valid LZ4 (so refusing it below is the size limit, not a parse error)."""
    require_lz4_package()
    import lz4.block
    block, size = lz4_bomb(64)
    assert lz4.block.decompress(block, uncompressed_size=size) == b"A" * (1 + 15 + 255 * 64 + 4) + b"BBBBB"


def test_lz4_bomb_stops_at_the_declared_size_without_allocating():
    require_lz4_package()
    block, real_size = lz4_bomb(1 << 20)           # ~1 MiB entry that decodes to ~267 MB
    assert real_size > 250_000_000
    data = forge_fatbin((1, 90, 0x2011, block, len(block), 4096))   # header: 4096 bytes
    with pytest.raises(ModuleFormatError, match="fatbin ptx entry for arch 90: corrupt LZ4 data"):
        embedded_contracts(data)
    peak = _peak_bytes(lambda: pytest.raises(ModuleFormatError, embedded_contracts, data))
    assert peak < 4 * len(block) + (1 << 20), f"decoding the refused bomb allocated {peak} bytes"


@pytest.mark.parametrize("declared", [1 << 40, 300 * 1024])
def test_declared_size_beyond_what_the_payload_can_hold_is_refused_before_decoding(declared):
    block = b"\x50hello" + b"\0" * 1000                 # 1006 bytes can decode to at most ~256 KB
    data = forge_fatbin((1, 90, 0x2011, block, len(block), declared))
    match = ("declares 1099511627776 uncompressed bytes, more than the 2147483648" if declared == 1 << 40
             else "declares 307200 bytes from 1006 LZ4 bytes, more than LZ4 can expand to")
    with pytest.raises(ModuleFormatError, match=match):
        embedded_contracts(data)


def test_compressed_entry_without_declared_size_is_refused():
    data = forge_fatbin((1, 90, 0x2011, b"\x50hello", 6, 0))
    with pytest.raises(ModuleFormatError, match="lz4-compressed, but its header declares no uncompressed size"):
        embedded_contracts(data)


def test_lz4_package_api_takes_the_exact_size_and_refuses_more():
    require_lz4_package()
    import lz4.block
    src = b"kernelbridge " * 300
    packed = lz4.block.compress(src, store_size=False)
    assert lz4.block.decompress(packed, uncompressed_size=len(src)) == src
    with pytest.raises(lz4.block.LZ4BlockError):
        lz4.block.decompress(packed, uncompressed_size=len(src) - 1)


def test_lz4_package_is_used_with_the_declared_size(build, monkeypatch):
    require_lz4_package()
    import lz4.block
    calls = []
    real = lz4.block.decompress

    def spy(data, uncompressed_size):
        calls.append(uncompressed_size)
        return real(data, uncompressed_size=uncompressed_size)

    monkeypatch.setattr(lz4.block, "decompress", spy)
    data = build("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_90,code=compute_90")
    (ptx,) = [e for e in fatbin_entries(data) if e.kind == "ptx"]
    assert ptx.compression == "lz4"
    assert set(embedded_contracts(data)) == {"fill"}
    assert calls == [ptx.uncompressed_size]


def test_lz4_package_decodes_nvcc_output_to_the_uncompressed_entry(build):
    require_lz4_package()
    plain = {e.kind: e for e in fatbin_entries(build("-fatbin", "-compress-mode=none", "-gencode",
                                                     "arch=compute_90,code=compute_90"))}
    (packed,) = [e for e in fatbin_entries(build("-fatbin", "-compress-mode=speed", "-gencode",
                                                 "arch=compute_90,code=compute_90")) if e.kind == "ptx"]
    assert packed.compression == "lz4"
    assert packed.data().rstrip(b"\0") == plain["ptx"].data().rstrip(b"\0")


def test_without_the_lz4_package_an_lz4_entry_is_a_typed_refusal_naming_the_package(monkeypatch):
    hide_lz4_package(monkeypatch)
    with pytest.raises(ImportError):
        importlib.import_module("lz4.block")
    block, size = lz4_bomb(4)                       # valid LZ4: only the missing package refuses it
    data = forge_fatbin((1, 90, 0x2011, block, len(block), size))
    with pytest.raises(fatbin.CompressedEntryError,
                       match=r"^fatbin ptx entry for arch 90 is LZ4-compressed and the 'lz4' package .* not "
                             r"importable: pip install lz4, or rebuild with nvcc -compress-mode=none"):
        embedded_contracts(data)
    (entry,) = fatbin_entries(data)
    with pytest.raises(fatbin.CompressedEntryError, match="pip install lz4"):
        entry.data()


# The LZ4 block format's own parsing: a token split into nibbles (>> 4, & 15 / & 0xF, 0xF0), 255-continued
# lengths, 2-byte little-endian match offsets. Any of these in bridge/fatbin.py is a decoder of ours.
_LZ4_DECODING_IDIOMS = {
    "a removed decoder's name": r"_lz4_block_decode|_lz4_length",
    "a token's high nibble": r">>\s*4\b",
    "a token's low nibble": r"&\s*(?:15|0x0?[fF])\b",
    "a nibble mask": r"\b0x[fF]0\b",
    "a little-endian 2-byte offset": r"<<\s*8\b",
    "a match length's minimum": r"\+=\s*4\b",
}


def test_bridge_fatbin_holds_no_lz4_decoding_code_of_its_own():
    source = Path(fatbin.__file__).read_text(encoding="utf-8")
    found = {what: m.group(0) for what, pattern in _LZ4_DECODING_IDIOMS.items()
             if (m := re.search(pattern, source))}
    assert found == {}, f"bridge/fatbin.py decodes LZ4 itself ({found}): use the lz4 package"
    assert "lz4_block.decompress(" in source        # the one LZ4 decoder: the package's


def test_compressed_ptx_is_not_inflated_when_a_cubin_of_its_arch_was_read(build, monkeypatch):
    same_arch = build("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_90,code=[sm_90,compute_90]")
    assert {(e.kind, e.compression) for e in fatbin_entries(same_arch)} >= {("elf", "none"), ("ptx", "lz4")}
    inflated = []
    real = fatbin._lz4_decode
    monkeypatch.setattr(fatbin, "_lz4_decode", lambda *a: inflated.append(a[2]) or real(*a))
    assert set(embedded_contracts(same_arch)) == {"fill"}
    assert inflated == []
    require_lz4_package()          # what follows decodes the PTX entry
    # a PTX for an arch no cubin covers is what the driver JITs there: it is read and compared
    other_arch = build("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_80,code=sm_80",
                       "-gencode", "arch=compute_90,code=compute_90")
    assert set(embedded_contracts(other_arch)) == {"fill"}
    assert inflated == ["fatbin ptx entry for arch 90"]


ZSTD_DECODERS = ["compression.zstd", "zstandard", "pyzstd"]


def _use_only(monkeypatch, decoder: str) -> None:
    """Hide the zstd modules bridge.fatbin would prefer over `decoder`; skip when it is absent."""
    try:
        importlib.import_module(decoder)
    except ImportError:
        pytest.skip(f"zstd module {decoder!r} is not installed")
    for other in ZSTD_DECODERS[: ZSTD_DECODERS.index(decoder)]:
        monkeypatch.setitem(sys.modules, other.split(".")[0], None)


def _zstd_compress(data: bytes) -> bytes:
    for name, call in (("compression.zstd", "compress"), ("zstandard", None), ("pyzstd", "compress")):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        return mod.ZstdCompressor().compress(data) if call is None else getattr(mod, call)(data)
    raise AssertionError("unreachable: _use_only skipped")


@pytest.mark.parametrize("decoder", ZSTD_DECODERS)
def test_zstd_bomb_stops_at_the_declared_size_without_allocating(monkeypatch, decoder):
    _use_only(monkeypatch, decoder)
    packed = _zstd_compress(b"\0" * (1 << 28))        # 256 MiB of zeros in a few KB
    assert len(packed) < 64 * 1024
    data = forge_fatbin((2, 90, 0x8011, packed, len(packed), 4096))
    with pytest.raises(ModuleFormatError, match="fatbin elf entry for arch 90: decompressed to 4097 bytes, "
                                                "header says 4096"):
        embedded_contracts(data)
    peak = _peak_bytes(lambda: pytest.raises(ModuleFormatError, embedded_contracts, data))
    assert peak < (1 << 20), f"decoding the refused bomb allocated {peak} bytes"


@pytest.mark.parametrize("decoder", ZSTD_DECODERS)
def test_corrupt_zstd_data_is_a_module_format_error(monkeypatch, decoder):
    _use_only(monkeypatch, decoder)
    data = forge_fatbin((2, 90, 0x8011, b"not zstd at all", 15, 100))
    with pytest.raises(ModuleFormatError, match="fatbin elf entry for arch 90: corrupt zstd data"):
        embedded_contracts(data)


def test_compressed_size_larger_than_the_payload_is_refused():
    data = forge_fatbin((1, 90, 0x2011, b"\x50hello", 600, 5))
    with pytest.raises(ModuleFormatError, match="compressed size 600 is larger than its 6-byte payload"):
        embedded_contracts(data)
