"""Many threads compiling ONE kernel object into an empty disk cache (issue 27, finding 6).

The kernel objects' specialisation caches used to be filled check-then-set: every thread that arrived
before the first one finished compiled the signature again (from LLVM, or by reading back the entry a
faster thread had just written) and published its own object, one in 33 runs under load ending in a
KeyError. Now the first thread compiles and publishes, the others wait for that one object. Each round
uses a fresh kernel object and an empty cache, with the interpreter switching threads every microsecond.
"""
from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import traceback

import numpy as np
import pytest

from dsl import tile

THREADS, ROUNDS = 8, 4
KERNEL_SRC = '''
from dsl import simt, tile, f32

@simt.device
def bump(x: f32) -> f32:
    return x * 3.0 + 1.0

@simt.kernel(block=128, requires=["len(a) == len(out)"])
def shifted(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = bump(a[i]) + a[(i + 1) % len(a)]

@tile.kernel
def added(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))
'''


@pytest.fixture
def switch_every_microsecond():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _fresh_module(tmp_path, n: int):
    path = tmp_path / f"race_kernels_{n}.py"
    path.write_text(KERNEL_SRC)
    spec = importlib.util.spec_from_file_location(f"kbrace_kernels_{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _all_at_once(call) -> tuple[list, list[str]]:
    """`call()` from THREADS threads released together; (results, formatted exceptions)."""
    barrier, results, errors = threading.Barrier(THREADS), [None] * THREADS, []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = call()
        except BaseException:       # noqa: BLE001 - every failure of every thread is reported
            errors.append(traceback.format_exc())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


@pytest.mark.parametrize("model", ["simt", "tile"])
def test_threads_compiling_one_kernel_object_into_an_empty_cache_share_one_compile(
        tmp_path, monkeypatch, caplog, switch_every_microsecond, model):
    caplog.set_level(logging.DEBUG, logger="kernelbridge")
    a = np.zeros(1000, np.float32)
    for r in range(ROUNDS):
        monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / f"cache{r}"))
        mod = _fresh_module(tmp_path, r)
        call = (lambda: mod.shifted.compile(a, a, arch="sm_90")) if model == "simt" else \
            (lambda: mod.added.compile((a, a, tile.partition(a, (256,))), "sm_90"))
        caplog.clear()
        results, errors = _all_at_once(call)
        assert errors == [], f"round {r}: {len(errors)} thread(s) failed; first:\n{errors[0]}"
        assert len({id(x) for x in results}) == 1, f"round {r}: threads got different compiled objects"
        assert results[0].metadata["cache"] == "miss"
        lookups = [rec.kb_cache for rec in caplog.records if rec.name == "kernelbridge.cache"]
        assert lookups == ["miss"], f"round {r}: disk-cache lookups {lookups} (one compile expected)"
