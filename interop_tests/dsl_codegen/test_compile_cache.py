"""The disk cache: miss then hit, keys that change with everything the PTX depends on, corrupt or
truncated entries ignored and rebuilt, atomic plain-text entries (no pickle) in the cache's own folder,
KB_CACHE=0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dsl.cache import CacheEntry, DiskCache, cache_key, source_fingerprint
from dsl.cache_folder import FOLDER, KEY_FILE, MARKER
from dsl.compiler import compile_kernel
from dsl.ir.types import F32, F64, ArrayType
from dsl.options import KernelOptions

KERNEL_SRC = '''
from dsl import simt, f32

OFFSET = {offset}

@simt.device
def bump(x: f32) -> f32:
    return x + OFFSET

@simt.kernel
def addone(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = bump(a[i])
'''


def write_module(tmp_path: Path, name: str, offset: float = 1.0, extra: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL_SRC.format(offset=offset) + extra)
    return path


def import_kernel(path: Path, attr: str = "addone"):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"kbcache_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, attr)


def sig(dtype=F32):
    return [ArrayType(dtype, 1, layout="C", aligned16=True),
            ArrayType(dtype, 1, writable=True, layout="C", aligned16=True)]


@pytest.fixture
def disk(tmp_path, monkeypatch) -> DiskCache:
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KB_CACHE", raising=False)
    monkeypatch.delenv("KB_DUMP", raising=False)
    return DiskCache()


def test_miss_then_hit_returns_identical_ptx_and_contract(tmp_path, disk):
    k = import_kernel(write_module(tmp_path, "m1"))
    first = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    second = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    assert first.metadata["cache"] == "miss" and second.metadata["cache"] == "disk"
    assert second.ptx == first.ptx and second.contract_json == first.contract_json
    assert second.name == first.name == "addone" and second.ir is None and first.ir is not None
    assert [p.name for p in disk.dir.iterdir()] == [FOLDER]          # one folder of ours, nothing else
    key = first.metadata["key"]
    assert sorted(p.name for p in disk.folder.iterdir()) == sorted([MARKER, KEY_FILE, f"{key}.kernel"])
    head, meta, ptx = (disk.folder / f"{key}.kernel").read_text().split("\n", 2)   # plain text
    assert head.startswith("kbcache3 kernel ") and ptx == first.ptx
    meta = json.loads(meta)
    assert meta["name"] == "addone" and json.loads(meta["contract"])["kernel"] == "addone"


def test_key_changes_with_source_globals_callees_signature_options_arch(tmp_path, disk):
    k1 = import_kernel(write_module(tmp_path, "k1", 1.0))
    base = cache_key(k1.pyfunc, sig(), k1.options, "sm_90")
    k2 = import_kernel(write_module(tmp_path, "k1", 2.0))      # same file, only OFFSET differs
    assert cache_key(k2.pyfunc, sig(), k2.options, "sm_90") != base
    k1_again = import_kernel(write_module(tmp_path, "k1", 1.0))
    assert cache_key(k1_again.pyfunc, sig(), k1_again.options, "sm_90") == base
    assert cache_key(k1.pyfunc, sig(F64), k1.options, "sm_90") != base
    assert cache_key(k1.pyfunc, sig(), KernelOptions(block=(128, 1, 1)), "sm_90") != base
    assert cache_key(k1.pyfunc, sig(), k1.options, "sm_80") != base
    assert cache_key(k1.pyfunc, sig(), k1.options, "sm_90") == base     # deterministic
    # editing only the device function's body changes the kernel's key
    p = write_module(tmp_path, "k3", 1.0)
    before = source_fingerprint(import_kernel(p).pyfunc)
    p.write_text(p.read_text().replace("return x + OFFSET", "return x + OFFSET + 0.5"))
    assert source_fingerprint(import_kernel(p).pyfunc) != before


def test_the_source_fingerprint_reads_the_kernel_lines_from_its_decorator_to_its_last_code(tmp_path):
    """The fingerprint reads the kernel's lines without tokenizing (fast in a fresh process): the
    decorator and signature lines count, and so does the last statement; lines after it do not."""
    p = write_module(tmp_path, "k4", 1.0, extra="# a trailing comment\n")
    base = source_fingerprint(import_kernel(p).pyfunc)
    for old, new in (("@simt.kernel\ndef addone", "@simt.kernel(block=(64, 1, 1))\ndef addone"),
                     ("out: simt.DisjointSlice[f32, 1]", "out: simt.DisjointSlice[f32, 1]   "),
                     ("out[i] = bump(a[i])", "out[i] = bump(a[i]) * 1")):
        original = p.read_text()
        p.write_text(original.replace(old, new))                     # same file, one edit
        assert source_fingerprint(import_kernel(p).pyfunc) != base, old
        p.write_text(original)
    p.write_text(p.read_text().replace("# a trailing comment", "# another comment, after the kernel"))
    assert source_fingerprint(import_kernel(p).pyfunc) == base


def test_key_covers_closure_and_large_array_constants():
    import numpy as np

    def make(table, scale):
        def k(x):
            return table[x] * scale
        return k
    t1 = np.arange(5000, dtype=np.float32)
    t2 = t1.copy()
    t2[2500] = -1.0                       # differs only where NumPy's repr elides ("...")
    assert source_fingerprint(make(t1, 2.0)) != source_fingerprint(make(t2, 2.0))
    assert source_fingerprint(make(t1, 2.0)) != source_fingerprint(make(t1, 3.0))
    assert source_fingerprint(make(t1, 2.0)) == source_fingerprint(make(t1.copy(), 2.0))


@pytest.mark.parametrize("damage", ["truncate_ptx", "truncate_meta", "garbage", "delete", "wrong_key"])
def test_corrupt_entry_is_ignored_and_rebuilt(tmp_path, disk, damage):
    k = import_kernel(write_module(tmp_path, f"c_{damage}"))
    good = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    entry = disk.folder / f"{good.metadata['key']}.kernel"
    raw = entry.read_bytes()
    if damage == "truncate_ptx":
        entry.write_bytes(raw[: len(raw) - len(good.ptx) // 2])
    elif damage == "truncate_meta":
        entry.write_bytes(raw[:120])
    elif damage == "garbage":
        entry.write_bytes(b"\x00\xff\xfe not an entry")
    elif damage == "delete":
        entry.unlink()
    else:   # an intact entry of another key, under this key's file name
        disk.store("0" * 64, disk.load(good.metadata["key"]))
        os.replace(disk.folder / ("0" * 64 + ".kernel"), entry)
    again = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    assert again.metadata["cache"] == "miss"             # ignored, recompiled ...
    assert again.ptx == good.ptx
    hit = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    assert hit.metadata["cache"] == "disk" and hit.ptx == good.ptx   # ... and rewritten


def test_store_is_atomic_and_leaves_no_temp_files(tmp_path):
    d = DiskCache(tmp_path / "c")
    d.store("k" * 64, CacheEntry(".version 8.0\n", "x", "{}", {"a": 1}))
    assert [p.name for p in d.dir.iterdir()] == [FOLDER]
    assert sorted(p.name for p in d.folder.iterdir()) == sorted([MARKER, KEY_FILE, "k" * 64 + ".kernel"])
    loaded = d.load("k" * 64)
    assert loaded.ptx == ".version 8.0\n" and loaded.metadata == {"a": 1}
    assert d.load("z" * 64) is None


def test_cache_disabled_by_env(tmp_path, disk, monkeypatch):
    monkeypatch.setenv("KB_CACHE", "0")
    k = import_kernel(write_module(tmp_path, "nocache"))
    a = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    b = compile_kernel(k.pyfunc, sig(), k.options, "sm_90")
    assert a.metadata["cache"] == b.metadata["cache"] == "miss"
    assert not disk.dir.exists() or not any(disk.dir.iterdir())


@pytest.mark.slow
def test_fresh_process_hits_the_cache_without_loading_llvm(tmp_path, disk):
    path = write_module(tmp_path, "fresh")
    child = textwrap.dedent(f'''
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("fresh_k", {str(path)!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        from dsl.compiler import compile_kernel
        from dsl.ir.types import F32, ArrayType
        sig = [ArrayType(F32, 1, layout="C", aligned16=True),
               ArrayType(F32, 1, writable=True, layout="C", aligned16=True)]
        ck = compile_kernel(m.addone.pyfunc, sig, m.addone.options, "sm_90")
        print(json.dumps([ck.metadata["cache"], "llvmlite.binding" in sys.modules, len(ck.ptx)]))
    ''')
    env = dict(os.environ, KB_CACHE_DIR=str(disk.dir), PYTHONPATH=str(Path.cwd()))
    run = lambda: json.loads(subprocess.run([sys.executable, "-c", child], env=env, check=True,
                                            capture_output=True, text=True).stdout.splitlines()[-1])
    first, second = run(), run()
    assert first[0] == "miss" and first[1] is True
    assert second == ["disk", False, first[2]]


def test_kernel_object_compile_uses_the_pipeline(tmp_path, disk):
    k = import_kernel(write_module(tmp_path, "obj"))
    a = np.ones(10, np.float32)
    ck = k.compile(a, a, arch="sm_80")
    assert ".target sm_80" in ck.ptx and ".entry addone(" in ck.ptx


def test_the_toolchain_fingerprint_covers_llvmlite_without_importing_it():
    """The llvmlite build is in the key through its version module and library file (size, mtime),
    read with os.scandir through importlib's spec: llvmlite itself is not imported in a fresh process."""
    import subprocess
    import sys
    code = ("import sys; from dsl import cache; cache.toolchain_fingerprint(); "
            "print('llvmlite' in sys.modules, [r[0] for r in cache._llvmlite_stats()])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported, names = out.split(" ", 1)
    assert imported == "False"
    assert "llvmlite/_version.py" in names and "llvmlite/binding/libllvmlite" in names
