"""tile.autotune on the GPU: the tuned call computes the right product and leaves the caller's inputs
alone (tuning runs write scratch copies), and a second process takes the pick from the disk cache
with no timing runs; KB_AUTOTUNE=0 launches the first configuration without timing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

import bridge
from dsl import tile
from dsl.cache import DiskCache

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIGS = [tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32}),
           tile.Config(tiles={"c": (128, 128)}, constants={"bk": 64}),
           tile.Config(tiles={"c": (128, 256)}, constants={"bk": 64})]

CHILD = r"""
import json, sys
import numpy as np, ml_dtypes
sys.path.insert(0, sys.argv[1])
import bridge, tile_kernels_lib as K
from dsl import tile
rng = np.random.default_rng(3)
a = rng.standard_normal((1000, 520)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((520, 700)).astype(ml_dtypes.bfloat16)
c = bridge.full((1000, 700), np.nan, "float32")
tuned = tile.autotune(K.gemm, [tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32}),
                               tile.Config(tiles={"c": (128, 128)}, constants={"bk": 64}),
                               tile.Config(tiles={"c": (128, 256)}, constants={"bk": 64})], reps=5)
tuned(bridge.from_host(a), bridge.from_host(b), c)
err = float(np.abs(c.to_host() - a.astype(np.float64) @ b.astype(np.float64)).max())
(pick,) = tuned.picks.values()
print(json.dumps({"timing_runs": tuned.timing_runs, "pick": pick.text(), "err": err}))
"""


def run_child(cache: Path, **env: str) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "KB_AUTOTUNE"}
    e.update({"KB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), **env})
    p = subprocess.run([sys.executable, "-c", CHILD, str(HERE)], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_tuned_gemm_is_right_and_leaves_its_inputs_alone(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KB_AUTOTUNE", raising=False)
    m, k, n = 300, 200, 176
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    ad, bd = bridge.from_host(a), bridge.from_host(b)
    c = bridge.full((m, n), np.nan, "float32")
    tuned = tile.autotune(K.gemm, CONFIGS, reps=3)
    tuned(ad, bd, c)
    assert tuned.timing_runs == 3 * len(CONFIGS)
    np.testing.assert_allclose(c.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2)
    assert np.array_equal(ad.to_host().view(np.uint16), a.view(np.uint16))
    assert np.array_equal(bd.to_host().view(np.uint16), b.view(np.uint16))
    tuned(ad, bd, c)                                  # the pick of this process: no more timing
    assert tuned.timing_runs == 3 * len(CONFIGS)


def test_a_second_process_launches_the_stored_pick_without_timing(tmp_path):
    first = run_child(tmp_path)
    assert first["timing_runs"] == 15 and first["err"] < 0.05, first
    second = run_child(tmp_path)
    assert second["timing_runs"] == 0 and second["pick"] == first["pick"] and second["err"] < 0.05, second


def test_autotune_off_launches_the_first_configuration_without_timing(tmp_path):
    out = run_child(tmp_path, KB_AUTOTUNE="0")
    assert out["timing_runs"] == 0 and out["err"] < 0.05
    assert out["pick"] == CONFIGS[0].text()
    assert [e for e in DiskCache(tmp_path).entries() if e["kind"] == "tuning pick"] == []   # no pick stored
