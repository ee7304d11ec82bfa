"""Line tables in DSL PTX (`lineinfo=`, on by default): every SIMT and tile statement's Python
file:line reaches the PTX as `.file`/`.loc`, device functions map to their own file, nothing else in
the PTX changes, `lineinfo=False` (or KB_LINEINFO=0) gives PTX without any debug trace, the disk cache
keeps the two apart, and ptxas accepts the PTX for sm_80, sm_90 and sm_90a."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from dsl import DslCompileError, f32, simt, tile
from dsl.backend.ptxas import find_ptxas
from interop_tests.kernels_zoo import ZOO
from interop_tests.lineinfo import lineinfo_kernels as K
from interop_tests.lineinfo.lineinfo_kit import (DEVICE, KERNELS, files, has_debug_trace, locs, marker_line,
                                                 ptx_target, ptxas_cubin, simt_variant, tile_cases, tile_ptx,
                                                 tile_variant, without_line_tables, zoo_ptx)

A = np.zeros(10, np.float32)
S = np.float32(2.0)
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (CUDA toolkit missing)")


def _lines_of(ptx: str, path: Path) -> set[int]:
    return {line for p, line in locs(ptx) if Path(p).resolve() == path}


# ------------------------------------------------------------------ what the line table says
def test_simt_statements_carry_their_file_and_line_and_device_code_its_own_file():
    ptx = K.scaled_cube.ptx(A, A, S, arch="sm_90")
    assert sorted(Path(p).resolve() for p in files(ptx).values()) == sorted([KERNELS, DEVICE])
    mine = _lines_of(ptx, KERNELS)
    assert {marker_line(KERNELS, "def"), marker_line(KERNELS, "if"), marker_line(KERNELS, "store")} <= mine
    # nothing but the kernel's own statements (0 = code LLVM merged from several lines)
    assert mine <= {0} | {marker_line(KERNELS, m) for m in ("def", "index", "if", "store")}
    inlined = _lines_of(ptx, DEVICE)
    assert {marker_line(DEVICE, "cube-mul"), marker_line(DEVICE, "cube-ret")} <= inlined
    assert inlined <= {0} | {marker_line(DEVICE, m) for m in ("cube-def", "cube-mul", "cube-ret")}


def test_only_line_directives_no_dwarf_sections_and_no_debug_target():
    ptx = K.scaled_cube.ptx(A, A, S, arch="sm_90")
    assert "\n.target sm_90\n" in ptx                      # not `.target sm_90, debug`
    for section in (".debug_info", ".debug_abbrev", ".debug_str", ".debug_loc"):
        assert section not in ptx


@pytest.mark.slow
def test_tile_statements_map_to_their_tile_source_lines():
    ptx = K.tile_axpy.ptx(S, A, A, tile.partition(np.zeros(10, np.float32), (256,)), arch="sm_90")
    mine = _lines_of(ptx, KERNELS)
    assert {marker_line(KERNELS, "tload"), marker_line(KERNELS, "tstore")} <= mine
    assert mine <= {0} | {marker_line(KERNELS, m) for m in ("tdef", "tbid", "tload", "tstore")}


def test_lineinfo_false_ptx_has_no_debug_trace():
    assert not has_debug_trace(K.scaled_cube_plain.ptx(A, A, S, arch="sm_90"))
    part = tile.partition(np.zeros(10, np.float32), (256,))
    assert not has_debug_trace(K.tile_axpy_plain.ptx(S, A, A, part, arch="sm_90"))
    assert has_debug_trace(K.scaled_cube.ptx(A, A, S, arch="sm_90"))


# ------------------------------------------------------------------ nothing else changes
@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_ptx_with_line_tables_is_the_plain_ptx_plus_directives(case):
    on, off = zoo_ptx(case, "sm_90", True), zoo_ptx(case, "sm_90", False)
    assert has_debug_trace(on) and not has_debug_trace(off)
    assert without_line_tables(on) == off


@pytest.mark.parametrize("name", sorted(tile_cases()))
@pytest.mark.slow
def test_tile_ptx_with_line_tables_is_the_plain_ptx_plus_directives(name):
    on, off = tile_ptx(name, "sm_90", True), tile_ptx(name, "sm_90", False)
    assert has_debug_trace(on) and not has_debug_trace(off)
    assert without_line_tables(on) == off


# ------------------------------------------------------------------ ptxas
@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_simt_and_tile_ptx_with_line_tables(arch, tmp_path):
    ptxas_cubin(K.scaled_cube.ptx(A, A, S, arch=arch), arch, tmp_path / "simt.cubin")
    part = tile.partition(np.zeros(10, np.float32), (256,))
    ptxas_cubin(K.tile_axpy.ptx(S, A, A, part, arch=arch), arch, tmp_path / "tile.cubin")


@needs_ptxas
def test_ptxas_accepts_sm_90a_wgmma_ptx_with_line_tables(tmp_path):
    ptx = tile_ptx("gemm_f16_tensor_cores", "sm_90", True)
    assert ptx_target(ptx) == "sm_90a" and "wgmma.mma_async" in ptx and "\t.loc\t" in ptx
    ptxas_cubin(ptx, "sm_90a", tmp_path / "gemm.cubin")


# ------------------------------------------------------------------ the option and the cache
def test_lineinfo_option_must_be_a_bool_and_is_reported_at_the_decorator():
    with pytest.raises(DslCompileError) as err:
        @simt.kernel(block=32, lineinfo="yes")
        def k(out: simt.DisjointSlice[f32]):
            out[simt.thread.index_1d()] = 1.0
    assert "@simt.kernel 'k': lineinfo= must be True or False, got str 'yes'" in str(err.value)
    assert err.value.source_line.strip() == '@simt.kernel(block=32, lineinfo="yes")'
    with pytest.raises(DslCompileError) as err:
        @tile.kernel(lineinfo=1)
        def t(out: tile.Partition[f32]):
            out.store(tile.zeros(out.tile_shape, f32))
    assert "@tile.kernel 't': lineinfo= must be True or False, got int 1" in str(err.value)


@pytest.mark.parametrize("value,expected", [("0", False), ("off", False), ("False", False), ("no", False),
                                            ("1", True), ("", True), (None, True)])
def test_kb_lineinfo_sets_the_default_when_the_decorator_is_applied(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("KB_LINEINFO", raising=False)
    else:
        monkeypatch.setenv("KB_LINEINFO", value)
    k = simt_variant(K.scaled_cube, True)          # an explicit value wins over the environment
    assert k.options.lineinfo is True
    fresh = simt.kernel(block=128)(K.scaled_cube.pyfunc)
    assert fresh.options.lineinfo is expected
    assert tile.kernel(K.tile_axpy.pyfunc).lineinfo is expected
    assert tile.kernel(lineinfo=True)(K.tile_axpy.pyfunc).lineinfo is True
    monkeypatch.setenv("KB_LINEINFO", "1")
    assert fresh.options.lineinfo is expected      # read once, at the decorator


def test_disk_cache_keeps_simt_variants_apart(tmp_path):
    from dsl.cache import DiskCache
    from dsl.compiler import compile_kernel
    disk = DiskCache(tmp_path)
    on, off = simt_variant(K.scaled_cube, True), simt_variant(K.scaled_cube, False)
    sig = on.signature(A, A, S)
    first = compile_kernel(on.pyfunc, sig, on.options, "sm_90", cache=disk)
    second = compile_kernel(off.pyfunc, sig, off.options, "sm_90", cache=disk)
    assert (first.metadata["cache"], second.metadata["cache"]) == ("miss", "miss")
    assert has_debug_trace(first.ptx) and not has_debug_trace(second.ptx)
    again = compile_kernel(off.pyfunc, sig, off.options, "sm_90", cache=disk)
    assert again.metadata["cache"] == "disk" and again.ptx == second.ptx


def test_disk_cache_keeps_tile_variants_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    args = (S, A, A, tile.partition(np.zeros(10, np.float32), (256,)))
    on = tile_variant(K.tile_axpy, True).compile(args, "sm_90")
    off = tile_variant(K.tile_axpy, False).compile(args, "sm_90")
    assert (on.metadata["cache"], off.metadata["cache"]) == ("miss", "miss")
    assert has_debug_trace(on.ptx) and not has_debug_trace(off.ptx)
    hit = tile_variant(K.tile_axpy, False).compile(args, "sm_90")
    assert hit.metadata["cache"] == "disk" and hit.ptx == off.ptx


# ------------------------------------------------------------------ awkward inputs
KERNEL_SOURCE = """
from dsl import f32, simt

@simt.kernel(block=32)
def odd_path(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + 1.0
"""


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"kb_lineinfo_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("dirname", ['quote"d dir', "ünïcödé 中", "back\\slash\ttab"],
                         ids=["quote", "non-ascii", "backslash-tab"])
def test_source_paths_ptxas_cannot_quote_are_rewritten_not_fatal(tmp_path, dirname):
    src = tmp_path / dirname / "k.py"
    src.parent.mkdir()
    src.write_text(KERNEL_SOURCE)
    ptx = _import_file(src).odd_path.ptx(A, A, arch="sm_90")
    assert list(files(ptx).values()) == [_expected_ptx_path(str(src))]
    assert any(line == 7 for _, line in locs(ptx))           # `out[i] = a[i] + 1.0`
    if find_ptxas() is not None:
        ptxas_cubin(ptx, "sm_90", tmp_path / "k.cubin")


def _expected_ptx_path(path: str) -> str:
    """How NVPTX prints the path in `.file` after the DSL replaced `"`: UTF-8 bytes as octal
    escapes, `\\` doubled, a tab as `\\t`."""
    out = []
    for byte in path.replace('"', "_").encode():
        ch = chr(byte)
        if byte == 0x5C:
            out.append("\\\\")
        elif byte == 0x09:
            out.append("\\t")
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


@pytest.mark.skipif(sys.platform != "linux", reason="needs a file system that takes non-UTF-8 names")
def test_a_source_path_that_is_not_utf8_compiles(tmp_path):
    raw = os.fsencode(tmp_path) + b"/bad\xffname"
    os.mkdir(raw)
    src = Path(os.fsdecode(raw)) / "k.py"
    # no checked access: a fault site would put the path into the contract JSON, which refuses lone
    # surrogates (a ContractDefinitionError, a separate limitation of the contract)
    src.write_text(KERNEL_SOURCE.replace("a[i] + 1.0", "2.0"))
    ptx = _import_file(src).odd_path.ptx(A, A, arch="sm_90")
    (path,) = files(ptx).values()
    assert any(line == 7 for _, line in locs(ptx))
    assert path.endswith("/bad\\357\\277\\275name/k.py")    # U+FFFD for the undecodable byte
    if find_ptxas() is not None:
        ptxas_cubin(ptx, "sm_90", tmp_path / "k.cubin")
