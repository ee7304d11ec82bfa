"""Tile kernels go through the one house: simulate() refuses what a GPU launch refuses (the same native
validator, the same class and text), poisoned outputs stay untouched, the disk cache serves a fresh
process without the tile front end or LLVM, and KB_SIMULATE has one meaning for both models."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tile_kernels_lib as K

import bridge
from dsl import tile

POISON = -7.25


def poisoned(n):
    return np.full(n, POISON, np.float32)


def refusal(fn, cls):
    with pytest.raises(cls) as info:
        fn()
    return str(info.value)


def test_an_aliasing_array_and_partition_are_refused_and_nothing_is_written(rng):
    buf = poisoned(200)
    a = buf[:100]
    out = tile.partition(buf[50:150], (32,))          # overlaps `a`
    msg = refusal(lambda: K.add.simulate(a, a, out), bridge.AliasingError)
    assert msg.startswith("add: argument 'out' (#2): expected memory disjoint from argument 'a' (#0)")
    assert np.all(buf == POISON)


def test_a_read_only_partition_is_refused_and_nothing_is_written(rng):
    a = rng.standard_normal(100).astype(np.float32)
    out = poisoned(100)
    out.flags.writeable = False
    msg = refusal(lambda: K.add.simulate(a, a, tile.partition(out, (32,))), bridge.ReadOnlyError)
    assert msg == ("add: argument 'out' (#2): expected writable array (access 'write'), got a read-only array")
    assert np.all(out == POISON)


def test_a_dtype_mismatch_is_refused_and_nothing_is_written(rng):
    a = rng.standard_normal(100).astype(np.float32)
    out = poisoned(100)
    msg = refusal(lambda: K.add.simulate(a, a.astype(np.float64), tile.partition(out, (32,))), bridge.DTypeError)
    assert msg == "add: argument 'b' (#1): expected f32 array, got float64 array of shape (100,)"
    assert np.all(out == POISON)


def test_partitions_of_different_tile_grids_are_refused_by_the_validator(rng):
    a = rng.standard_normal(100).astype(np.float32)
    o1, o2 = poisoned(100), poisoned(50)

    @tile.kernel
    def two(a: tile.Array[tile.f32], o1: tile.Partition[tile.f32], o2: tile.Partition[tile.f32]):
        v = tile.load(a, tile.bid(0), o1.tile_shape)
        o1.store(v)
        o2.store(v * 2.0)
    refusal(lambda: two.simulate(a, tile.partition(o1, (16,)), tile.partition(o2, (16,))),
            bridge.ShapeRelationError)
    assert np.all(o1 == POISON) and np.all(o2 == POISON)


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_kb_simulate_means_the_same_for_tile_and_simt_kernels(monkeypatch, rng, value):
    monkeypatch.setenv("KB_SIMULATE", value)
    a = rng.standard_normal(50).astype(np.float32)
    out = poisoned(50)
    K.add(a, a, tile.partition(out, (32,)))
    np.testing.assert_array_equal(out, 2 * a)


def test_tile_kernels_have_ir_and_inspect_like_simt_kernels():
    a = np.zeros(100, np.float32)
    args = (a, a, tile.partition(np.zeros(100, np.float32), (128,)))
    text = K.add.ir(*args)
    assert "add" in text and text.count("\n") > 3
    from dsl.backend.ptxas import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not installed: inspect() needs it")
    info = K.add.inspect(*args, arch="sm_80")
    assert info["resources"]["registers"] > 0
    assert info["contract_dict"]["grid_from"] == {"arg": "out", "tile": [128]}


@pytest.mark.slow
def test_a_fresh_process_is_served_by_the_disk_cache_without_frontend_or_llvm(tmp_path):
    script = textwrap.dedent("""
        import json, sys, time
        sys.path.insert(0, %r)
        import numpy as np
        from dsl import tile
        import tile_kernels_lib as K
        a = np.zeros(100, np.float32)
        t0 = time.perf_counter()
        ck = K.softmax.compile((np.zeros((4, 100), np.float32),
                                tile.partition(np.zeros((4, 100), np.float32), (1, 128))), "sm_90")
        dt = time.perf_counter() - t0
        print(json.dumps({"cache": ck.metadata["cache"], "seconds": dt,
                          "frontend": "dsl.tile.frontend" in sys.modules,
                          "llvm": "llvmlite.binding" in sys.modules, "ptx": len(ck.ptx)}))
    """ % os.path.dirname(K.__file__))
    env = {**os.environ, "KB_CACHE_DIR": str(tmp_path), "KB_CACHE": "1"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["cache"] == "miss" and runs[0]["llvm"]
    assert runs[1]["cache"] == "disk" and not runs[1]["frontend"] and not runs[1]["llvm"]
    assert runs[1]["ptx"] == runs[0]["ptx"]
