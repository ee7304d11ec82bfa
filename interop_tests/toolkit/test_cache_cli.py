"""`python -m dsl cache info|list|clear|prune` over the DSL disk cache, and the test run's own cache.

Entries are written with DiskCache.store (synthetic PTX) into a per-test KB_CACHE_DIR; their ages are
set with os.utime, so pruning decisions are exact. (What the commands refuse and leave alone:
interop_tests/dsl_codegen/test_cache_ownership.py.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsl.cache import CacheEntry, DiskCache, cache_dir
from dsl.cache_cli import filesystem_of, network_warning, parse_age, parse_size
from dsl.cache_folder import KEY_FILE, MARKER

DAY = 86400.0


def _fill(directory: Path, ages_days: dict[str, float], ptx_bytes: int = 1000) -> DiskCache:
    cache = DiskCache(directory)
    now = time.time()
    for key, age in ages_days.items():
        cache.store(key, CacheEntry("x" * ptx_bytes, f"kernel_{key}", "{}", {"arch": "sm_90"}))
        os.utime(cache.folder / f"{key}.kernel", (now - age * DAY, now - age * DAY))
    return cache


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsl", "cache", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, KB_CACHE_DIR=str(cache)))


def test_test_run_uses_a_temporary_cache_never_the_users(kb_test_cache_dir):
    assert os.environ["KB_CACHE_DIR"] == str(kb_test_cache_dir)
    assert cache_dir() == kb_test_cache_dir
    assert kb_test_cache_dir.name.startswith("kb_test_cache_")
    home_cache = Path(os.path.expanduser("~")) / ".cache" / "kernelbridge"
    assert home_cache not in kb_test_cache_dir.parents


@pytest.mark.slow
def test_info_and_list_report_entries_newest_first(tmp_path):
    _fill(tmp_path / "c", {"aaaa": 3.0, "bbbb": 1.0})
    info = json.loads(_cli("info", "--json", cache=tmp_path / "c").stdout)
    assert info["dir"] == str(tmp_path / "c") and info["from"] == "KB_CACHE_DIR"
    assert info["exists"] is True and info["entries"] == 2 and info["bytes"] > 2000
    listed = json.loads(_cli("list", "--json", cache=tmp_path / "c").stdout)
    assert [e["key"] for e in listed] == ["bbbb", "aaaa"]
    assert [e["name"] for e in listed] == ["kernel_bbbb", "kernel_aaaa"] and listed[0]["arch"] == "sm_90"
    text = _cli("list", cache=tmp_path / "c")
    assert text.returncode == 0 and text.stdout.splitlines()[-1] == f"2 entries in {tmp_path / 'c'}"
    assert "sm_90   kernel_bbbb" in text.stdout


def test_info_on_a_cache_not_created_yet(tmp_path):
    proc = _cli("info", cache=tmp_path / "never")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"DSL cache: {tmp_path / 'never'} (from KB_CACHE_DIR): empty (not created yet)"
    assert not (tmp_path / "never").exists()


def test_clear_removes_every_entry(tmp_path):
    cache = _fill(tmp_path / "c", {"aaaa": 0.0, "bbbb": 0.0})
    proc = _cli("clear", cache=tmp_path / "c")
    assert proc.stdout.strip() == f"removed 2 entries from {tmp_path / 'c'}"
    assert sorted(p.name for p in cache.folder.iterdir()) == sorted([MARKER, KEY_FILE])   # the cache stays


def test_clear_and_prune_of_a_cache_not_created_yet_change_nothing(tmp_path):
    for command in (("clear",), ("prune",)):
        proc = _cli(*command, cache=tmp_path / "never")
        assert proc.returncode == 0 and proc.stdout.startswith(f"removed 0 entries from {tmp_path / 'never'}")
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_prune_older_than_keeps_recent_entries(tmp_path):
    cache = _fill(tmp_path / "c", {"old1": 40.0, "old2": 31.0, "new1": 2.0})
    proc = _cli("prune", cache=tmp_path / "c")                  # default: older than 30 days
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"removed 2 entries from {tmp_path / 'c'}; 1 entries, ")
    assert [e["key"] for e in cache.entries()] == ["new1"]
    assert cache.load("new1") is not None


def test_prune_max_size_keeps_the_newest_that_fit(tmp_path):
    cache = _fill(tmp_path / "c", {"k1": 1.0, "k2": 2.0, "k3": 3.0, "k4": 4.0})
    per_entry = cache.entries()[0]["bytes"]
    assert _cli("prune", "--max-size", str(2 * per_entry + 10), cache=tmp_path / "c").returncode == 0
    assert [e["key"] for e in cache.entries()] == ["k1", "k2"]


@pytest.mark.slow
def test_bad_prune_arguments_are_usage_errors(tmp_path):
    proc = _cli("prune", "--max-size", "lots", cache=tmp_path / "c")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --max-size: expected a size such as 500M or 2G, got 'lots'"
    proc = _cli("prune", "--older-than", "soon", cache=tmp_path / "c")
    assert proc.returncode == 2 and "--older-than: expected an age such as 30d" in proc.stderr
    assert _cli("frob", cache=tmp_path / "c").returncode == 2


@pytest.mark.parametrize("text, value", [("4096", 4096), ("100k", 100 * 1024), ("500M", 500 * 2**20),
                                         ("2G", 2 * 2**30), ("1.5GiB", int(1.5 * 2**30))])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text, value", [("30d", 30 * DAY), ("12h", 12 * 3600), ("90m", 5400), ("2w", 14 * DAY)])
def test_ages(text, value):
    assert parse_age(text) == value


def test_network_file_system_is_detected_and_warned_about(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {tmp_path / 'nfs'} nfs4 rw 0 0\n")
    (tmp_path / "nfs").mkdir()
    assert filesystem_of(tmp_path / "nfs" / "cache" / "dsl", str(mounts)) == "nfs4"
    assert filesystem_of(tmp_path / "local", str(mounts)) == "ext4"
    warning = network_warning({"network_fs": True, "dir": "/n/cache", "filesystem": "nfs4"})
    assert warning == ("the DSL cache /n/cache is on nfs4 (a network file system): cache hits pay a network "
                       "round trip; set KB_CACHE_DIR to a local disk")
    assert network_warning({"network_fs": False, "dir": "/c", "filesystem": "ext4"}) is None


def test_a_file_that_is_not_a_sealed_entry_is_counted_apart_and_never_pruned(tmp_path):
    cache = _fill(tmp_path / "c", {"good": 1.0})
    (cache.folder / "bad.kernel").write_text("{not an entry")
    assert [e["key"] for e in cache.entries()] == ["good"]
    info = json.loads(_cli("info", "--json", cache=tmp_path / "c").stdout)
    assert info["entries"] == 1 and info["other_files"] == 1 and info["refused"] is None
    text = _cli("info", cache=tmp_path / "c").stdout
    assert f"  1 other file(s) in {cache.folder} are not entries this cache wrote: never read or deleted" in text
    assert cache.prune(max_age_s=-1) == 1 and cache.entries() == []
    assert (cache.folder / "bad.kernel").read_text() == "{not an entry"


@pytest.mark.slow
def test_tuning_picks_are_listed_as_such_with_their_kernel(tmp_path):
    cache = _fill(tmp_path / "c", {"aaaa": 2.0})
    pick = {"kernel": "gemm_bf16", "pick": 0, "configs": ["bm=128"], "ms": {"0": 1.0}}
    cache.store_pick("k1", pick)                              # what tile.autotune stores
    listed = {e["key"]: e for e in json.loads(_cli("list", "--json", cache=tmp_path / "c").stdout)}
    assert listed["k1"]["kind"] == "tuning pick" and listed["k1"]["name"] == "gemm_bf16"
    assert listed["aaaa"]["kind"] == "kernel" and listed["aaaa"]["name"] == "kernel_aaaa"
    assert listed["k1"]["file"] == "k1.pick" and listed["aaaa"]["file"] == "aaaa.kernel"
    assert "gemm_bf16 (tuning pick)" in _cli("list", cache=tmp_path / "c").stdout
    assert cache.prune(max_age_s=-1) == 2 and cache.load_pick("k1") is None
