"""The disk cache owns only what it wrote and trusts only what it wrote (issue 27, findings 2, 3, 4, 6).

- `clear`/`prune` touch only entries this cache sealed, inside its own `kb-cache-v3/` folder, and refuse a
  directory that holds no such folder (nothing deleted);
- an entry not sealed with this cache's key (a forged one, with its checksums recomputed) is a miss, so
  the launch validator keeps the kernel's real contract;
- folders are 0700 and files 0600 whatever the umask; a cache directory or folder that another user owns
  or that group/others may write is not used (a miss and a CacheTrustWarning; the CLI refuses);
- a body nested too deep to parse is a miss, never a RecursionError;
- stale temporaries of killed writers are removed by prune (ours only, old ones only).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bridge.errors import LaunchContractError
from dsl.cache import CacheEntry, CacheRefusedError, CacheTrustWarning, DiskCache
from dsl.cache_folder import FOLDER, KEY_FILE, MARKER, STALE_TMP_SECONDS, open_folder
from dsl.sim.validator import host_launcher

KERNEL_SRC = '''
from dsl import simt, f32

@simt.kernel(block=64, requires=["len(a) == len(out)"])
def copy_all(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = a[i]
'''
FOREIGN = {"package.json": b'{"name": "my-app"}\n', "notes.ptx": b"// my notes\n"}
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="giving a folder to another user needs root")


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KB_CACHE", raising=False)
    monkeypatch.delenv("KB_DUMP", raising=False)
    path = tmp_path / "copy_all_mod.py"
    path.write_text(KERNEL_SRC)
    spec = importlib.util.spec_from_file_location("kbown_copy_all", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.copy_all


def _compile(k):
    from dsl.compiler import compile_kernel
    a = np.zeros(8, np.float32)
    return compile_kernel(k.pyfunc, k.signature(a, a), k.options, "sm_90")


def _fill(root: Path, keys=("aaaa", "bbbb")) -> DiskCache:
    cache = DiskCache(root)
    for key in keys:
        cache.store(key, CacheEntry("// ptx\n", f"kernel_{key}", "{}", {"arch": "sm_90"}))
    return cache


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsl", "cache", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, KB_CACHE_DIR=str(cache)))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ------------------------------------------------------------------ finding 2: only what it wrote
@pytest.mark.parametrize("command", [("clear",), ("prune", "--older-than", "0s")])
def test_clear_and_prune_leave_the_other_files_of_the_cache_directory(tmp_path, command):
    """The finding: KB_CACHE_DIR pointing at a folder with package.json and notes.ptx lost both."""
    root = tmp_path / "project"
    root.mkdir(mode=0o700)
    for name, data in FOREIGN.items():
        (root / name).write_bytes(data)
    cache = _fill(root)
    time.sleep(0.01)
    proc = _cli(*command, cache=root)
    assert proc.returncode == 0, proc.stderr
    assert {n: (root / n).read_bytes() for n in FOREIGN if (root / n).exists()} == FOREIGN
    assert proc.stdout.startswith(f"removed 2 entries from {root}")
    assert cache.entries() == [] and cache.load("aaaa") is None


@pytest.mark.parametrize("command", [("clear",), ("prune", "--older-than", "0s")])
def test_clear_and_prune_leave_files_in_the_cache_folder_it_did_not_seal(tmp_path, command):
    cache = _fill(tmp_path / "c")
    strays = {"x.json": b"{}", "y.ptx": b"//", "cccc.kernel": b"kbcache3 kernel " + b"0" * 64 + b"\n{}\n",
              "dddd.pick": b"{}"}
    for name, data in strays.items():
        (cache.folder / name).write_bytes(data)
    time.sleep(0.01)
    proc = _cli(*command, cache=cache.dir)
    assert proc.returncode == 0 and proc.stdout.startswith(f"removed 2 entries from {cache.dir}")
    assert {n: (cache.folder / n).read_bytes() for n in strays} == strays
    assert sorted(p.name for p in cache.folder.iterdir()) == sorted([MARKER, KEY_FILE, *strays])


def test_clear_of_a_folder_that_is_not_a_kernelbridge_cache_is_refused_and_deletes_nothing(tmp_path):
    root = tmp_path / "project"
    root.mkdir(mode=0o700)
    for name, data in FOREIGN.items():
        (root / name).write_bytes(data)
    (root / ("0" * 64 + ".json")).write_text('{"entry_sha256": "", "entry": {}}')    # an old flat layout
    before = _tree(root)
    for command in (("clear",), ("prune", "--older-than", "0s")):
        proc = _cli(*command, cache=root)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.strip() == (f"error: python -m dsl cache {command[0]}: {root} is not a kernelbridge "
                                       f"cache (there is no {FOLDER}/ folder with its marker file in it); "
                                       "nothing was deleted")
    with pytest.raises(CacheRefusedError, match="is not a kernelbridge cache"):
        DiskCache(root).clear()
    (root / FOLDER).mkdir(mode=0o700)                       # a folder of that name, but not one we made
    (root / FOLDER / "mine.txt").write_text("keep")
    with pytest.raises(CacheRefusedError, match=f"is not a kernelbridge cache: its marker file {MARKER}"):
        DiskCache(root).prune(max_age_s=0)
    assert _cli("clear", cache=root).returncode == 1
    assert _tree(root) == {**before, f"{FOLDER}/mine.txt": b"keep"}


def test_entries_of_the_earlier_flat_layout_are_neither_read_nor_deleted(kernel):
    first = _compile(kernel)
    disk = DiskCache()
    key = first.metadata["key"]
    body = json.dumps({"format": 2, "key": key, "name": "copy_all", "contract": "{}", "metadata": {},
                       "ptx_sha256": hashlib.sha256(b"// old").hexdigest()}).encode()
    old = {f"{key}.json": b'{"entry_sha256": "' + hashlib.sha256(body).hexdigest().encode() + b'", "entry": '
           + body + b"}", f"{key}.ptx": b"// old"}
    for name, data in old.items():
        (disk.dir / name).write_bytes(data)
    assert _compile(kernel).contract_json == first.contract_json          # ours, not the old entry
    assert disk.clear() == 1
    assert {n: (disk.dir / n).read_bytes() for n in old} == old


# ------------------------------------------------------------------ finding 3: only what it sealed
def test_forged_entry_without_the_requires_is_a_miss_and_the_validator_still_refuses(kernel, tmp_path):
    good = _compile(kernel)
    assert json.loads(good.contract_json)["requires"] == ["len(a) == len(out)"]
    key, victim = good.metadata["key"], DiskCache()
    forged = json.loads(good.contract_json)
    del forged["requires"]
    forger = DiskCache(tmp_path / "forger")                 # every checksum right, but another cache's key
    forger.store(key, CacheEntry(good.ptx, good.name, json.dumps(forged), {"arch": "sm_90"}))
    planted = [p for p in forger.dir.rglob(f"*{key}*") if p.is_file()]
    assert planted
    for p in planted:
        dest = victim.dir / p.relative_to(forger.dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
    assert victim.load(key) is None
    again = _compile(kernel)
    assert again.metadata["cache"] == "miss" and again.contract_json == good.contract_json
    a, out = np.zeros(100, np.float32), np.zeros(8, np.float32)
    with pytest.raises(LaunchContractError, match=r"len\(a\) == len\(out\)"):
        host_launcher(again.contract_json, again.name).validate_only((a, out))
    assert _compile(kernel).metadata["cache"] == "disk"     # the rebuild replaced the forgery


# ------------------------------------------------------------------ trust: modes and owners
def test_umask_000_still_gives_folders_0700_and_files_0600(tmp_path):
    root = tmp_path / "new" / "cache"
    old = os.umask(0)
    try:
        DiskCache(root).store("k1", CacheEntry("// ptx\n", "k", "{}", {}))
        dirs = {str(p): _mode(p) for p in sorted(tmp_path.rglob("*")) if p.is_dir()}
        assert dirs and set(dirs.values()) == {0o700}, dirs
        DiskCache(root).store_pick("p1", {"key": "p1"})
    finally:
        os.umask(old)
    folder = root / FOLDER
    assert list(dirs) == [str(tmp_path / "new"), str(root), str(folder)]
    files = {p.name: _mode(p) for p in folder.iterdir()}
    assert files == {MARKER: 0o600, KEY_FILE: 0o600, "k1.kernel": 0o600, "p1.pick": 0o600}
    assert DiskCache(root).load("k1") is not None


@pytest.mark.parametrize("where", ["root", "folder"])
def test_cache_writable_by_group_or_others_is_not_used(tmp_path, where):
    root = tmp_path / "c"
    cache = _fill(root)
    os.chmod(root if where == "root" else cache.folder, 0o777)
    path = root if where == "root" else cache.folder
    with pytest.warns(CacheTrustWarning, match=f"{path} is writable by group or others"):
        assert cache.load("aaaa") is None
    cache.store("cccc", CacheEntry("// ptx\n", "x", "{}", {}))
    assert not (cache.folder / "cccc.kernel").exists()
    before = _tree(root)
    proc = _cli("clear", cache=root)
    assert proc.returncode == 1 and "is writable by group or others (mode 0777)" in proc.stderr
    assert "nothing was deleted" in proc.stderr and _tree(root) == before
    info = _cli("info", cache=root)
    assert info.returncode == 0 and f"DSL cache: {root} (from KB_CACHE_DIR): NOT USED: " in info.stdout


def test_doctor_warns_that_a_refused_cache_is_not_used(tmp_path, monkeypatch):
    from dsl.doctor import cache_section
    root = tmp_path / "c"
    _fill(root)
    monkeypatch.setenv("KB_CACHE_DIR", str(root))
    assert cache_section().warnings == []
    os.chmod(root, 0o770)
    (warning,) = cache_section().warnings
    assert warning.startswith(f"the DSL cache is not used, so every compile misses: the cache directory {root} "
                              "is writable by group or others (mode 0770)")


@ROOT_ONLY
@pytest.mark.parametrize("where", ["root", "folder", "key"])
def test_cache_owned_by_another_user_is_not_used(tmp_path, where):
    root = tmp_path / "c"
    cache = _fill(root)
    path = {"root": root, "folder": cache.folder, "key": cache.folder / KEY_FILE}[where]
    os.chown(path, 4242, 4242)
    with pytest.warns(CacheTrustWarning, match="belongs to another user"):
        assert cache.load("aaaa") is None
    with pytest.raises(CacheRefusedError, match=r"belongs to another user \(uid 4242"):
        cache.entries()
    before = _tree(root)
    assert _cli("prune", "--older-than", "0s", cache=root).returncode == 1 and _tree(root) == before


# ------------------------------------------------------------------ finding 4: bounded parsing
@pytest.mark.parametrize("kind", ["kernel", "pick"])
def test_body_of_deeply_nested_json_is_a_miss(tmp_path, kind):
    cache = _fill(tmp_path / "c")
    folder = open_folder(cache.dir)
    deep = b"[" * 200_000 + b"]" * 200_000
    body = deep + b"\n// ptx\n" if kind == "kernel" else deep
    name = f"dddd.{kind}"
    (folder.path / name).write_bytes(folder.seal(kind, name, body))        # sealed with the cache's key
    assert (cache.load("dddd") if kind == "kernel" else cache.load_pick("dddd")) is None
    assert sorted(e["key"] for e in cache.entries()) == ["aaaa", "bbbb"]      # not listed as an entry


# ------------------------------------------------------------------ killed writers
def test_prune_removes_stale_writer_temporaries_and_only_those(tmp_path):
    cache = _fill(tmp_path / "c", keys=("aaaa",))
    old = time.time() - STALE_TMP_SECONDS - 60
    names = {"stale": ".aaaa.kernel.x1y2z3_4.tmp", "fresh": ".bbbb.kernel.a1b2c3d4.tmp",
             "stale_pick": ".pppp.pick.q1w2e3r4.tmp", "not_ours": ".notes.txt.a1b2c3d4.tmp",
             "not_ours2": "aaaa.kernel.tmp"}
    for label, name in names.items():
        (cache.folder / name).write_bytes(b"partial")
        if label != "fresh":
            os.utime(cache.folder / name, (old, old))
    setup = cache.dir / f".{FOLDER}.k9j8h7g6.tmp"           # a cache folder whose publishing was killed
    setup.mkdir(mode=0o700)
    (setup / KEY_FILE).write_bytes(os.urandom(32))
    os.utime(setup, (old, old))
    assert cache.prune(max_age_s=1e9) == 0                  # no entry is that old
    left = {p.name for p in cache.folder.iterdir()}
    assert left == {MARKER, KEY_FILE, "aaaa.kernel", names["fresh"], names["not_ours"], names["not_ours2"]}
    assert not setup.exists() and cache.load("aaaa") is not None
