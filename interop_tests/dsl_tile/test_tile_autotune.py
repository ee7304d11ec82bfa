"""tile.autotune without a GPU: candidates checked at construction, pruned by the compiler before
any timing, the fastest picked (an injected timer stands in for CUDA events), the pick kept in the
disk cache for later processes, KB_AUTOTUNE=0 deterministic, and the simulator running the first
configuration. A pick on disk is a sealed cache entry: one the cache did not write is re-tuned."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile
from dsl.cache import DiskCache

CONFIGS = [tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32}),
           tile.Config(tiles={"c": (128, 128)}, constants={"bk": 32}),
           tile.Config(tiles={"c": (3, 5)}, constants={"bk": 32})]       # not a power of two: no compile


def gemm_args(m=300, k=200, n=176):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, np.full((m, n), np.nan, np.float32)


class FakeTimer:
    """ms per configuration (by tile shape); records every call."""

    def __init__(self, ms: dict):
        self.ms, self.calls = ms, []

    def __call__(self, config, call):
        self.calls.append(config)
        return self.ms[config.tiles["c"]]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KB_AUTOTUNE", raising=False)
    monkeypatch.delenv("KB_CACHE", raising=False)
    return tmp_path


def picks(cache) -> list:
    """The pick files of the cache under `cache` (sealed entries in its own folder)."""
    return sorted(DiskCache(cache).folder.glob("*.pick"))


def test_the_fastest_compiling_configuration_is_picked(cache):
    timer = FakeTimer({(64, 64): 2.0, (128, 128): 1.0})
    tuned = tile.Tuned(K.gemm, CONFIGS, reps=3, timer=timer)
    pick = tuned.select(*gemm_args(), arch="sm_90")
    assert pick == CONFIGS[1]
    assert timer.calls == CONFIGS[:2]            # the one that does not compile was never timed
    assert tuned.timing_runs == 6
    (why,) = tuned.pruned.values()
    assert list(why) == [CONFIGS[2].text()] and "does not compile" in why[CONFIGS[2].text()]
    assert len(picks(cache)) == 1


def test_a_later_process_reuses_the_pick_without_timing(cache):
    tile.Tuned(K.gemm, CONFIGS, timer=FakeTimer({(64, 64): 1.0, (128, 128): 3.0})).select(*gemm_args(), arch="sm_90")

    def no_timing(config, call):
        raise AssertionError("timed although the pick is on disk")
    later = tile.Tuned(K.gemm, CONFIGS, timer=no_timing)     # a new object: what a fresh process has
    assert later.select(*gemm_args(), arch="sm_90") == CONFIGS[0]
    assert later.timing_runs == 0


def test_shape_buckets_share_a_pick_and_other_buckets_or_archs_do_not(cache):
    tuned = tile.Tuned(K.gemm, CONFIGS[:2], timer=FakeTimer({(64, 64): 1.0, (128, 128): 2.0}))
    k1 = tuned.key(gemm_args(300, 200, 176), "sm_90")
    assert k1 == tuned.key(gemm_args(500, 256, 200), "sm_90")        # same powers of two
    assert k1 != tuned.key(gemm_args(600, 200, 176), "sm_90")
    assert k1 != tuned.key(gemm_args(300, 200, 176), "sm_80")
    assert k1 != tile.Tuned(K.gemm, CONFIGS[:1]).key(gemm_args(), "sm_90")   # another candidate list


def test_autotune_off_takes_the_first_viable_configuration_and_stores_nothing(cache, monkeypatch):
    monkeypatch.setenv("KB_AUTOTUNE", "0")
    timer = FakeTimer({(64, 64): 9.0, (128, 128): 1.0})
    tuned = tile.Tuned(K.gemm, [CONFIGS[2], *CONFIGS[:2]], timer=timer)
    assert tuned.select(*gemm_args(), arch="sm_90") == CONFIGS[0]
    assert timer.calls == [] and tuned.timing_runs == 0
    assert not picks(cache)


def test_a_damaged_pick_on_disk_is_retuned(cache):
    tile.Tuned(K.gemm, CONFIGS[:2], timer=FakeTimer({(64, 64): 1.0, (128, 128): 2.0})).select(*gemm_args(),
                                                                                           arch="sm_90")
    (path,) = picks(cache)
    path.write_text("{not json")
    timer = FakeTimer({(64, 64): 5.0, (128, 128): 2.0})
    tuned = tile.Tuned(K.gemm, CONFIGS[:2], timer=timer)
    assert tuned.select(*gemm_args(), arch="sm_90") == CONFIGS[1] and len(timer.calls) == 2


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_place_of_a_pick_is_a_miss_not_a_hang(cache):
    import os
    tile.Tuned(K.gemm, CONFIGS[:2], timer=FakeTimer({(64, 64): 1.0, (128, 128): 2.0})).select(*gemm_args(),
                                                                                           arch="sm_90")
    (path,) = picks(cache)
    path.unlink()
    os.mkfifo(path)                              # a reader that opened it blocking would wait forever
    timer = FakeTimer({(64, 64): 5.0, (128, 128): 2.0})
    tuned = tile.Tuned(K.gemm, CONFIGS[:2], timer=timer)
    assert tuned.select(*gemm_args(), arch="sm_90") == CONFIGS[1] and len(timer.calls) == 2


def test_a_pick_this_cache_did_not_write_is_retuned(cache, tmp_path):
    """A pick sealed by another cache (another key), naming the slow configuration, planted over the
    real one: not trusted, so the kernel is timed again and the fastest one kept."""
    args = gemm_args()
    tuned = tile.Tuned(K.gemm, CONFIGS[:2], timer=FakeTimer({(64, 64): 5.0, (128, 128): 1.0}))
    key = tuned.key(args, "sm_90")
    assert tuned.select(*args, arch="sm_90") == CONFIGS[1]
    forger = DiskCache(tmp_path / "forger")
    forger.store_pick(key, {"kernel": "gemm", "pick": 0, "configs": [c.text() for c in CONFIGS[:2]]})
    (path,) = picks(cache)
    shutil.copyfile(forger.folder / path.name, path)
    timer = FakeTimer({(64, 64): 5.0, (128, 128): 1.0})
    later = tile.Tuned(K.gemm, CONFIGS[:2], timer=timer)
    assert later.select(*args, arch="sm_90") == CONFIGS[1] and len(timer.calls) == 2


def test_simulate_runs_the_first_configuration_against_numpy(cache):
    a, b, c = gemm_args(70, 40, 50)
    tile.autotune(K.gemm, CONFIGS[:2]).simulate(a, b, c)       # f32 operands: tf32 products, as on the GPU
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2, atol=5e-3 * np.sqrt(40))


@pytest.mark.parametrize("configs,text", [
    ([], "give at least one configuration"),
    ([tile.Config(tiles={"a": (64, 64)}, constants={"bk": 32})], "tiles['a']: not a tile.Partition parameter"),
    ([tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32, "zz": 1})], "constants['zz']: not a tile.Constant"),
    ([tile.Config(tiles={"c": (64, 64)})], "gives no value for the constant(s) bk"),
])
def test_bad_candidate_lists_are_refused_naming_the_problem(configs, text):
    with pytest.raises(ValueError, match=text.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        tile.autotune(K.gemm, configs)


def test_only_tile_kernels_and_positive_reps_are_accepted():
    with pytest.raises(TypeError, match="expected a @tile.kernel"):
        tile.autotune(lambda: None, CONFIGS)
    with pytest.raises(ValueError, match="reps must be an int >= 1"):
        tile.autotune(K.gemm, CONFIGS, reps=0)


def test_plain_dicts_are_accepted_as_configurations(cache):
    tuned = tile.Tuned(K.gemm, [{"tiles": {"c": (64, 64)}, "constants": {"bk": 32}}],
                       timer=FakeTimer({(64, 64): 1.0}))
    assert tuned.select(*gemm_args(), arch="sm_90") == CONFIGS[0]


class OptionTimer:
    """ms per configuration's (num_warps, persistent); records the kernel object each one ran on."""

    def __init__(self, tuned, ms: dict):
        self.tuned, self.ms, self.kernels = tuned, ms, []

    def __call__(self, config, call):
        self.kernels.append(self.tuned.kernel_for(config))
        return self.ms[(config.num_warps, config.persistent)]


OPTION_CONFIGS = [tile.Config(tiles={"c": (128, 128)}, constants={"bk": 32}),
                  tile.Config(tiles={"c": (128, 128)}, constants={"bk": 32}, num_warps=4),
                  tile.Config(tiles={"c": (128, 128)}, constants={"bk": 32}, persistent=True)]


@pytest.mark.slow
def test_configurations_may_differ_in_num_warps_and_persistence(cache):
    """Each option set runs on its own kernel object with those options; the pick is the fastest and
    its call runs on that object."""
    tuned = tile.Tuned(K.gemm, OPTION_CONFIGS)
    timer = OptionTimer(tuned, {(None, None): 3.0, (4, None): 2.0, (None, True): 1.0})
    tuned._timer = timer
    assert tuned.select(*gemm_args(), arch="sm_90") == OPTION_CONFIGS[2]
    plain, four, persistent = timer.kernels
    assert plain is K.gemm and four.num_warps == 4 and not four.persistent and persistent.persistent
    assert tuned.kernel_for(OPTION_CONFIGS[1]) is four            # one object per option set
    ck = four.compile(tuned.call_args(OPTION_CONFIGS[1], gemm_args()), "sm_90")
    assert ck.threads == 128
    ck = persistent.compile(tuned.call_args(OPTION_CONFIGS[2], gemm_args()), "sm_90")
    assert "max_blocks_per_sm" in ck.contract_json


@pytest.mark.slow
def test_a_pick_with_options_is_reused_by_a_later_process_without_timing(cache):
    first = tile.Tuned(K.gemm, OPTION_CONFIGS)
    first._timer = OptionTimer(first, {(None, None): 3.0, (4, None): 1.0, (None, True): 2.0})
    first.select(*gemm_args(), arch="sm_90")

    def no_timing(config, call):
        raise AssertionError("timed although the pick is on disk")
    later = tile.Tuned(K.gemm, OPTION_CONFIGS, timer=no_timing)
    pick = later.select(*gemm_args(), arch="sm_90")
    assert pick == OPTION_CONFIGS[1] and later.kernel_for(pick).num_warps == 4 and later.timing_runs == 0


def test_configurations_without_options_keep_their_earlier_text():
    """Picks stored before options existed still match their candidate lists."""
    assert CONFIGS[0].text() == '{"constants": {"bk": 32}, "tiles": {"c": [64, 64]}}'
    assert '"options": {"num_warps": 4}' in OPTION_CONFIGS[1].text()


@pytest.mark.parametrize("opts,text", [({"num_warps": 3}, "num_warps= must be a power of two"),
                                       ({"persistent": "yes"}, "persistent")])
def test_bad_kernel_options_in_a_configuration_are_refused_naming_it(opts, text):
    with pytest.raises(ValueError, match=text) as err:
        tile.autotune(K.gemm, [tile.Config(tiles={"c": (64, 64)}, constants={"bk": 32}, **opts)])
    assert "configuration {" in str(err.value)


def test_a_known_pick_costs_a_lookup_not_the_tuning_key(cache, monkeypatch):
    """Once a shape bucket has its pick, later calls of that bucket find it by the arguments' signature: the
    tuning key (the kernel's source fingerprint and the candidates' texts, ~300 us a call on a 2-core CPU,
    longer than a 50-us kernel) is not computed again. Another bucket, another dtype or another arch is a new
    lookup (and its own pick), and the key's fixed parts are computed once per Tuned."""
    import importlib
    autotune = importlib.import_module("dsl.tile.autotune")
    fingerprints = []
    real = autotune.source_fingerprint
    monkeypatch.setattr(autotune, "source_fingerprint", lambda fn: fingerprints.append(fn) or real(fn))
    tuned = tile.Tuned(K.gemm, CONFIGS, reps=1, timer=FakeTimer({(64, 64): 2.0, (128, 128): 1.0}))
    keys = []
    key = tuned.key
    monkeypatch.setattr(tuned, "key", lambda args, arch: keys.append(arch) or key(args, arch))
    args = gemm_args()
    for _ in range(3):
        assert tuned.select(*args, arch="sm_90") == CONFIGS[1]
    assert keys == ["sm_90"] and len(fingerprints) == 1
    tuned.select(*gemm_args(m=700), arch="sm_90")             # 700 rows: bucket 1024, not 512
    tuned.select(*args, arch="sm_80")
    a, b, c = args
    tuned.select(a.astype(np.float16), b.astype(np.float16), c, arch="sm_90")
    assert keys == ["sm_90", "sm_90", "sm_80", "sm_90"] and len(fingerprints) == 1
    assert len(tuned.picks) == 4
