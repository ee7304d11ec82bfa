"""tile.autotune's candidates compiled side by side (dsl/tile/parallel_compile.py): forked workers fill the
disk cache, the tuner's own compiles are then disk hits with the same PTX, a candidate that does not compile
is still pruned with the tuner's own reason, a worker that hangs or dies costs only its time, and
KB_AUTOTUNE_JOBS is checked where it is read."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
import tile_kernels_lib as K

import dsl.tile.parallel_compile as PC
from bridge.errors import ConfigurationError
from dsl import tile

CONFIGS = [tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32}),
           tile.Config(tiles={"c": (128, 128)}, constants={"bk": 32}),
           tile.Config(tiles={"c": (64, 128)}, constants={"bk": 16}),
           tile.Config(tiles={"c": (64, 64)}, constants={"bk": 3})]      # a k tile of 3: no compile
ARCH = "sm_90a"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="side compiles fork worker processes")


def gemm_args(m=300, k=200, n=176):
    rng = np.random.default_rng(7)
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32),
            np.full((m, n), np.nan, np.float32))


def first_is_fastest(config, call):
    return float(CONFIGS.index(config))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("KB_AUTOTUNE", "KB_CACHE", "KB_DUMP"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def fresh_gemm():
    """K.gemm as a new kernel object: nothing compiled in this process yet (its in-memory caches empty)."""
    return tile.kernel(K.gemm.pyfunc)


def tune(jobs: str, monkeypatch) -> tile.Tuned:
    monkeypatch.setenv("KB_AUTOTUNE_JOBS", jobs)
    tuned = tile.Tuned(fresh_gemm(), CONFIGS, reps=1, timer=first_is_fastest)
    assert tuned.select(*gemm_args(), arch=ARCH) == CONFIGS[0]
    return tuned


def compiled(tuned: tile.Tuned, config: tile.Config):
    return tuned.kernel_for(config).compile(tuned.call_args(config, gemm_args()), ARCH)


def test_workers_fill_the_disk_cache_so_the_tuners_compiles_are_hits_with_the_same_ptx(cache, monkeypatch):
    side = tune("2", monkeypatch)
    assert [compiled(side, c).metadata["cache"] for c in CONFIGS[:3]] == ["disk"] * 3
    monkeypatch.setenv("KB_CACHE_DIR", str(cache / "alone"))
    alone = tune("1", monkeypatch)                  # one process, as before: every compile a miss
    assert [compiled(alone, c).metadata["cache"] for c in CONFIGS[:3]] == ["miss"] * 3
    assert [compiled(side, c).ptx for c in CONFIGS[:3]] == [compiled(alone, c).ptx for c in CONFIGS[:3]]


def test_a_candidate_that_does_not_compile_is_pruned_with_the_tuners_own_reason(cache, monkeypatch):
    side = tune("2", monkeypatch)
    monkeypatch.setenv("KB_CACHE_DIR", str(cache / "alone"))
    alone = tune("1", monkeypatch)
    (why_side,), (why_alone,) = side.pruned.values(), alone.pruned.values()
    assert list(why_side) == [CONFIGS[3].text()] and why_side == why_alone
    assert "does not compile" in why_side[CONFIGS[3].text()]


def test_the_worker_reports_name_the_candidates_they_could_not_compile(cache):
    kernel = fresh_gemm()
    jobs = []
    for c in CONFIGS:
        tuned = tile.Tuned(kernel, [c], reps=1, timer=first_is_fastest)
        jobs.append((tuned.kernel_for(c), *tuned.kernel_for(c).specialisation(tuned.call_args(c, gemm_args())),
                     ARCH))
    failed = PC.compile_side_by_side(jobs)
    assert list(failed) == [3] and "TileCompileError" in failed[3] and "powers" in failed[3]   # bk 3 only


def test_a_hung_worker_stops_the_side_compile_and_the_tuner_compiles_alone(cache, monkeypatch):
    monkeypatch.setattr(PC, "IDLE_S", 2.0)
    monkeypatch.setattr(PC, "_compile_one", lambda i: time.sleep(60) or "")   # inherited by the forked workers
    start = time.monotonic()
    tuned = tune("2", monkeypatch)
    assert time.monotonic() - start < 45                          # not the workers' 60 s
    assert [compiled(tuned, c).metadata["cache"] for c in CONFIGS[:3]] == ["miss"] * 3
    assert list(next(iter(tuned.pruned.values()))) == [CONFIGS[3].text()]


def test_a_worker_that_dies_leaves_its_jobs_to_the_tuner(cache, monkeypatch):
    monkeypatch.setattr(PC, "_compile_one", lambda i: os._exit(3))
    tuned = tune("2", monkeypatch)
    assert [compiled(tuned, c).metadata["cache"] for c in CONFIGS[:3]] == ["miss"] * 3


@pytest.mark.parametrize("env,why", [({"KB_AUTOTUNE_JOBS": "1"}, "one job"), ({"KB_CACHE": "0"}, "no cache"),
                                     ({"KB_DUMP": "ptx"}, "dumping")])
def test_no_worker_is_forked_with_one_job_without_the_cache_or_while_dumping(cache, monkeypatch, env, why):
    def no_fork(*args, **kwargs):
        raise AssertionError(f"forked with {why}")
    monkeypatch.setattr(PC, "_run_workers", no_fork)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tuned = tile.Tuned(fresh_gemm(), CONFIGS, reps=1, timer=first_is_fastest)
    assert tuned.select(*gemm_args(), arch=ARCH) == CONFIGS[0]


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_a_bad_jobs_setting_is_a_configuration_error_naming_it_and_nothing_is_tuned(cache, monkeypatch, raw):
    monkeypatch.setenv("KB_AUTOTUNE_JOBS", raw)
    tuned = tile.Tuned(fresh_gemm(), CONFIGS, reps=1, timer=first_is_fastest)
    with pytest.raises(ConfigurationError, match="KB_AUTOTUNE_JOBS"):
        tuned.select(*gemm_args(), arch=ARCH)
    assert tuned.picks == {} and tuned.timing_runs == 0


def test_the_default_is_the_usable_cpus_up_to_the_cap_and_never_more_than_the_jobs(monkeypatch):
    monkeypatch.delenv("KB_AUTOTUNE_JOBS", raising=False)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert PC.jobs_setting(100) == min(cpus, PC.MAX_JOBS)
    assert PC.jobs_setting(1) == 1
    monkeypatch.setenv("KB_AUTOTUNE_JOBS", "32")
    assert PC.jobs_setting(5) == 5
