"""The disk cache seals whole entries: any flipped bit of an entry file (its metadata or its PTX) is a
miss (never a hit with a different contract, never a hard error) and the compile rebuilds it; a FIFO, a
device or a directory where an entry should be is a miss within a short time, never a hang."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsl.cache import DiskCache
from dsl.compiler import compile_kernel
from dsl.ir.types import F32, ArrayType

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 10 s of a full run on 2 cores: fresh interpreters, bit-flip sweeps

ROOT = Path(__file__).resolve().parents[2]

KERNEL_SRC = '''
from dsl import simt, f32

@simt.kernel(block=64)
def twice(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0
'''
SIG = [ArrayType(F32, 1, layout="C", aligned16=True), ArrayType(F32, 1, writable=True, layout="C", aligned16=True)]


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KB_CACHE", raising=False)
    monkeypatch.delenv("KB_DUMP", raising=False)
    path = tmp_path / "twice_mod.py"
    path.write_text(KERNEL_SRC)
    import importlib.util
    spec = importlib.util.spec_from_file_location("kbint_twice", path)   # the child uses this name too
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.twice, path


def _compile(k):
    return compile_kernel(k.pyfunc, SIG, k.options, "sm_90")


def _entry(disk: DiskCache) -> tuple[str, Path]:
    (entry,) = disk.folder.glob("*.kernel")
    return entry.stem, entry


def test_every_bit_flip_of_an_entry_is_a_miss(kernel):
    """Header, metadata (contract included) and PTX: one sealed file, every bit covered."""
    k, _ = kernel
    first = _compile(k)
    disk = DiskCache()
    key, entry = _entry(disk)
    original = entry.read_bytes()
    assert disk.load(key).contract_json == first.contract_json           # control: intact = hit
    hits = []
    for at in range(len(original)):
        for bit in range(8):
            m = bytearray(original)
            m[at] ^= 1 << bit
            entry.write_bytes(bytes(m))
            if disk.load(key) is not None:
                hits.append((at, bit))
    assert hits == [], f"{len(hits)} of {8 * len(original)} flips still loaded, first {hits[:5]}"


def test_contract_edited_in_the_cache_is_rebuilt_not_used(kernel):
    """The issue's case: `block.exact` 64 -> 65 inside an entry is valid JSON and a valid contract."""
    k, _ = kernel
    good = _compile(k)
    assert json.loads(good.contract_json)["block"] == {"exact": [64, 1, 1]}
    key, entry = _entry(DiskCache())
    raw = entry.read_bytes()
    assert raw.count(b'"exact\\":[64,1,1]') == 1
    entry.write_bytes(raw.replace(b'"exact\\":[64,1,1]', b'"exact\\":[65,1,1]'))
    again = _compile(k)
    assert again.metadata["cache"] == "miss" and again.contract_json == good.contract_json
    hit = _compile(k)
    assert hit.metadata["cache"] == "disk" and hit.contract_json == good.contract_json
    assert json.loads(entry.read_bytes().split(b"\n")[1])["contract"] == good.contract_json   # rewritten


def test_entry_that_is_not_a_regular_file_is_a_miss_and_is_rebuilt(kernel):
    k, _ = kernel
    good = _compile(k)
    disk = DiskCache()
    key, entry = _entry(disk)
    entry.unlink()
    entry.mkdir()                                       # a directory where the entry should be
    assert disk.load(key) is None
    again = _compile(k)                                 # store fails (a directory): still no error
    assert again.metadata["cache"] == "miss" and again.ptx == good.ptx


def _watchdog(code: str, cache_dir: Path, timeout: float = 60.0) -> list:
    """Run `code` in a child that prints one JSON line; a hang is killed after `timeout` and fails."""
    env = dict(os.environ, KB_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("KB_CACHE", None)
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cache blocked for more than {timeout} s on a special file")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo is POSIX only")
def test_fifo_named_like_a_cache_entry_is_a_miss_not_a_hang(kernel):
    k, src = kernel
    good = _compile(k)
    disk = DiskCache()
    key, entry = _entry(disk)
    entry.unlink()
    os.mkfifo(entry)
    got = _watchdog(f'''
        import importlib.util, json, time
        from dsl.cache import DiskCache
        t0 = time.perf_counter()
        miss = DiskCache().load({key!r}) is None
        seconds = time.perf_counter() - t0
        spec = importlib.util.spec_from_file_location("kbint_twice", {str(src)!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        from dsl.compiler import compile_kernel
        from dsl.ir.types import F32, ArrayType
        sig = [ArrayType(F32, 1, layout="C", aligned16=True),
               ArrayType(F32, 1, writable=True, layout="C", aligned16=True)]
        ck = compile_kernel(m.twice.pyfunc, sig, m.twice.options, "sm_90")
        print(json.dumps([miss, seconds, ck.metadata["cache"], ck.ptx == {good.ptx!r}]))
    ''', disk.dir)
    assert got[0] is True and got[1] < 5.0     # a blocking open would hang until the watchdog
    assert got[2] == "miss" and got[3] is True             # rebuilt ...
    assert entry.is_file()                                 # ... over the FIFO
    assert _compile(k).metadata["cache"] == "disk"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_entry_linked_to_a_device_is_a_miss_not_an_endless_read(kernel):
    k, _ = kernel
    _compile(k)
    disk = DiskCache()
    key, entry = _entry(disk)
    entry.unlink()
    entry.symlink_to("/dev/zero")
    got = _watchdog(f'''
        import json
        from dsl.cache import DiskCache
        print(json.dumps([DiskCache().load({key!r}) is None]))
    ''', disk.dir, timeout=30.0)
    assert got == [True]
