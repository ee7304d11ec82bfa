"""`logging` under the `kernelbridge` logger (dsl/observe.py): compiles, disk-cache hits and misses, and
specialisations are DEBUG records with their facts as attributes; more than KB_MAX_SPECIALISATIONS
specialisations of one kernel object is a WARNING naming the kernel and its last signatures; nothing
is logged for an in-memory hit, and a fresh process's disk-cache hit never imports `logging`."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import bridge
import bridge.device
import dsl
from dsl import f32, observe, simt, tile

REPO = Path(__file__).resolve().parents[2]
T = dsl.TypeVar("T")


def _scale(a: simt.Array[T], out: simt.DisjointSlice[T], s: T):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


def _tadd(a: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(a, t, out.tile_shape))


class _Owner:
    """Stands for a kernel object (weakly referenceable, hashed by identity)."""


def _records(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A cache directory of this test only (so the first compile is a miss) with the cache on."""
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KB_CACHE", "1")
    return tmp_path / "cache"


def test_a_simt_compile_logs_a_miss_then_a_fresh_kernel_object_logs_a_disk_hit(caplog, fresh_cache):
    caplog.set_level(logging.DEBUG, logger="kernelbridge")
    a = np.zeros(64, np.float32)
    simt.kernel(block=128)(_scale).compile(a, a, np.float32(2), arch="sm_80")
    (miss,) = _records(caplog, "kernelbridge.cache")
    (comp,) = _records(caplog, "kernelbridge.compile")
    assert miss.levelno == logging.DEBUG and miss.kb_cache == "miss" and miss.kb_kernel == "_scale"
    assert miss.getMessage().startswith("disk cache miss: simt kernel _scale for sm_80 (key ")
    assert comp.kb_arch == "sm_80" and comp.kb_cache == "miss" and comp.kb_seconds > 0
    assert comp.getMessage().startswith("compiled simt kernel _scale for sm_80 in ")
    assert comp.getMessage().endswith(" s (disk cache miss)")
    assert len(miss.kb_key) == 64 and miss.kb_key == comp.kb_key

    caplog.clear()
    again = simt.kernel(block=128)(_scale)           # a new object: its in-memory cache is empty
    again.compile(a, a, np.float32(2), arch="sm_80")
    (hit,) = _records(caplog, "kernelbridge.cache")
    assert hit.kb_cache == "disk" and hit.kb_key == miss.kb_key
    assert hit.getMessage().startswith("disk cache hit: simt kernel _scale for sm_80 (key ")
    assert _records(caplog, "kernelbridge.compile") == []   # a hit is not a compile

    caplog.clear()
    again.compile(a, a, np.float32(2), arch="sm_80")         # in-memory hit: nothing at all
    assert [r for r in caplog.records if r.name.startswith("kernelbridge")] == []


def test_a_compile_with_the_disk_cache_off_says_so_and_logs_no_cache_record(caplog, monkeypatch):
    monkeypatch.setenv("KB_CACHE", "0")
    caplog.set_level(logging.DEBUG, logger="kernelbridge")
    a = np.zeros(64, np.float32)
    simt.kernel(block=128)(_scale).compile(a, a, np.float32(2), arch="sm_90")
    (comp,) = _records(caplog, "kernelbridge.compile")
    assert comp.kb_cache == "off" and comp.kb_key is None
    assert comp.getMessage().endswith(" s (disk cache off)")
    assert _records(caplog, "kernelbridge.cache") == []


def test_a_tile_compile_logs_like_a_simt_compile(caplog, fresh_cache):
    caplog.set_level(logging.DEBUG, logger="kernelbridge")
    a = np.zeros(256, np.float32)
    args = (a, tile.partition(np.zeros(256, np.float32), (128,)))
    tile.kernel(_tadd).compile(args, "sm_90")
    (comp,) = _records(caplog, "kernelbridge.compile")
    assert comp.getMessage().startswith("compiled tile kernel _tadd for sm_90 in ")
    assert comp.kb_cache == "miss" and comp.kb_seconds > 0
    caplog.clear()
    tile.kernel(_tadd).compile(args, "sm_90")
    (hit,) = _records(caplog, "kernelbridge.cache")
    assert hit.getMessage().startswith("disk cache hit: tile kernel _tadd for sm_90 (key ")
    assert _records(caplog, "kernelbridge.compile") == []


def test_records_stay_below_the_default_warning_level():
    """Debug records must not reach a program that configured nothing: only the storm warning may."""
    assert logging.getLogger("kernelbridge").getEffectiveLevel() == logging.WARNING


# ------------------------------------------------------------------------------- specialisations
@pytest.fixture
def no_gpu_launcher(monkeypatch):
    """Lets a Dispatcher miss run on this machine: the device is an sm_90 stand-in and the module
    load returns a token instead of a Launcher (the compile, the signature and the hook are real)."""
    token = object()
    dev = SimpleNamespace(cc=(9, 0), arch="sm_90", ordinal=0)
    monkeypatch.setattr(bridge.device, "current_device", lambda *a: dev)
    monkeypatch.setattr(bridge, "current_device", lambda *a: dev)
    monkeypatch.setattr(bridge, "kernel_from_ptx", lambda ptx, name, contract, device=None: SimpleNamespace(launcher=token))
    return token


def test_each_dispatcher_miss_is_a_specialisation_record_and_the_one_past_the_limit_warns(
        caplog, monkeypatch, no_gpu_launcher):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", "2")
    caplog.set_level(logging.DEBUG, logger="kernelbridge")
    k = simt.kernel(block=128)(_scale)
    for dt in (np.float32, np.float64, np.int32, np.int64, np.float16):
        a = np.zeros(64, dt)
        assert k._miss((a, a, dt(1))) is no_gpu_launcher
    recs = _records(caplog, "kernelbridge.specialise")
    debug = [r for r in recs if r.levelno == logging.DEBUG]
    warns = [r for r in recs if r.levelno == logging.WARNING]
    assert [r.kb_count for r in debug] == [1, 2, 3, 4, 5]
    assert debug[0].getMessage() == ("kernel _scale: specialisation #1 for sm_90: (Array[f32, 1, C, a16], "
                                     "DisjointSlice[f32, 1, C, a16], f32)")
    assert [w.kb_count for w in warns] == [3, 5]            # N+1 and 2N+1, not every miss
    text = warns[0].getMessage()
    assert text.startswith("kernel _scale has specialised 3 times (more than KB_MAX_SPECIALISATIONS=2)")
    assert text.endswith("Last 3 signatures:\n  (Array[f32, 1, C, a16], DisjointSlice[f32, 1, C, a16], f32)\n"
                         "  (Array[f64, 1, C, a16], DisjointSlice[f64, 1, C, a16], f64)\n"
                         "  (Array[i32, 1, C, a16], DisjointSlice[i32, 1, C, a16], i32)")
    assert observe.specialisations(k) == 5
    assert observe.specialisations(simt.kernel(block=128)(_scale)) == 0   # counted per kernel object


def test_a_tile_dispatcher_miss_is_a_specialisation_naming_tile_shape_and_facts(
        caplog, monkeypatch, no_gpu_launcher):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", "1")
    caplog.set_level(logging.DEBUG, logger="kernelbridge.specialise")
    k = tile.kernel(_tadd)
    for n in (256, 250):
        a = np.zeros(n, np.float32)
        assert k._miss((a, tile.partition(np.zeros(n, np.float32), (128,)))) is no_gpu_launcher
    first, second, warn = _records(caplog, "kernelbridge.specialise")
    assert "PartitionParamType(dtype=f32, ndim=1, tile_shape=(128,))" in first.kb_signature
    assert "'div8': True" in first.kb_signature and "'div8': False" in second.kb_signature
    assert warn.levelno == logging.WARNING
    assert warn.getMessage().startswith("kernel _tadd has specialised 2 times (more than KB_MAX_SPECIALISATIONS=1)")


@pytest.mark.parametrize("raw, limit", [("7", 7), (" 0 ", 0), ("", 32)])
def test_max_specialisations_reads_the_environment(caplog, monkeypatch, raw, limit):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", raw)
    assert observe.max_specialisations() == limit
    assert [r for r in caplog.records if r.name == "kernelbridge.specialise"] == []


@pytest.mark.parametrize("raw", ["many", "-1", "3.5", "1e3", "\u0663"])   # the last: an Arabic-Indic 3
def test_a_bad_max_specialisations_is_a_configuration_error_before_anything_is_counted(monkeypatch, raw):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", raw)
    owner = _Owner()
    with pytest.raises(dsl.ConfigurationError, match=r"^KB_MAX_SPECIALISATIONS='.*': expected a non-negative "
                                                     r"integer") as err:
        observe.specialised(owner, "k", ("sig",), "sm_90")
    assert err.value.variable == "KB_MAX_SPECIALISATIONS" and isinstance(err.value, ValueError)
    assert observe.specialisations(owner) == 0


def test_zero_turns_the_warning_off(caplog, monkeypatch):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", "0")
    owner = _Owner()
    for i in range(40):
        observe.specialised(owner, "k", (f"sig{i}",), "sm_90")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert observe.specialisations(owner) == 40


def test_an_owner_that_cannot_be_weakly_referenced_is_logged_but_never_breaks_a_launch(caplog):
    caplog.set_level(logging.DEBUG, logger="kernelbridge.specialise")
    owner = SimpleNamespace()                 # no __weakref__
    assert observe.specialised(owner, "k", ("f32",), "sm_90") == 1
    assert observe.specialised(owner, "k", ("f32",), "sm_90") == 1
    assert observe.specialisations(owner) == 0
    assert [r.getMessage() for r in _records(caplog, "kernelbridge.specialise")] == \
        ["kernel k: specialisation #1 for sm_90: (f32)"] * 2


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, timeout=120, cwd=str(REPO))


@pytest.mark.slow
def test_the_storm_warning_reaches_stderr_in_a_program_that_configured_no_logging():
    proc = _run("""
        from dsl import observe
        class Owner: pass
        owner = Owner()
        for i in range(3):
            observe.specialised(owner, "hot_kernel", ("f32", f"shape{i}"), "sm_90")
    """, KB_MAX_SPECIALISATIONS="2")
    assert proc.returncode == 0, proc.stderr
    assert "kernel hot_kernel has specialised 3 times (more than KB_MAX_SPECIALISATIONS=2)" in proc.stderr
    assert "  (f32, shape2)" in proc.stderr
    assert "specialisation #1" not in proc.stderr        # debug records stay silent


@pytest.mark.slow
def test_a_disk_cache_hit_in_a_fresh_process_does_not_import_logging(tmp_path):
    kernel_file = tmp_path / "obs_kernel.py"
    kernel_file.write_text(textwrap.dedent("""
        from dsl import f32, simt
        @simt.kernel(block=64)
        def twice(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = a[i] * 2.0
    """))
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import numpy as np
        import obs_kernel
        a = np.zeros(8, np.float32)
        ck = obs_kernel.twice.compile(a, a, arch="sm_90")
        print(ck.metadata["cache"], "logging" in sys.modules)
    """
    env = {"KB_CACHE_DIR": str(tmp_path / "cache"), "KB_CACHE": "1"}
    first = _run(code, **env)
    assert first.returncode == 0, first.stderr
    second = _run(code, **env)
    assert second.returncode == 0, second.stderr
    assert first.stdout.split()[0] == "miss"
    assert second.stdout.split() == ["disk", "False"]


@pytest.mark.gpu
def test_real_launches_with_new_dtypes_specialise_and_warn_past_the_limit(caplog, monkeypatch):
    monkeypatch.setenv("KB_MAX_SPECIALISATIONS", "2")
    caplog.set_level(logging.DEBUG, logger="kernelbridge.specialise")
    k = simt.kernel(block=128)(_scale)
    for dt in (np.float32, np.float64, np.int32):
        x = bridge.from_host(np.arange(300, dtype=dt))
        out = bridge.empty((300,), np.dtype(dt).name)
        k(x, out, dt(3))
        k(x, out, dt(3))                                   # a hit: no new record
        np.testing.assert_array_equal(out.to_host(), np.arange(300, dtype=dt) * 3)
    recs = _records(caplog, "kernelbridge.specialise")
    assert [r.kb_count for r in recs if r.levelno == logging.DEBUG] == [1, 2, 3]
    (warn,) = [r for r in recs if r.levelno == logging.WARNING]
    assert warn.getMessage().startswith("kernel _scale has specialised 3 times")
    assert "Array[f64, 1, C, a16]" in warn.getMessage()
