"""The suite split into shards of whole files (interop_tests/shard.py, KB_TEST_SHARD=i/n), for a GPU
check whose suite no longer fits one 10-minute device call: every test in exactly one shard, files
never split, and every process computing the same partition."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.shard import in_shard, parse_shard, shard_of_files

ROOT = Path(__file__).resolve().parents[2]

NODEIDS = ([f"a/test_big.py::test_{i}" for i in range(9)] + [f"a/test_mid.py::test_{i}" for i in range(5)]
           + [f"b/test_mid2.py::test_{i}" for i in range(4)] + ["b/test_one.py::test_x", "b/test_two.py::t[1]",
                                                                "b/test_two.py::t[2]"])


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_test_is_in_exactly_one_shard_and_files_are_never_split(count):
    member = [in_shard(NODEIDS, i, count) for i in range(1, count + 1)]
    for k, nodeid in enumerate(NODEIDS):
        assert sum(m[k] for m in member) == 1, nodeid
    owner = shard_of_files(NODEIDS, count)
    for nodeid in NODEIDS:
        assert 1 <= owner[nodeid.split("::")[0]] <= count


def test_shards_are_balanced_by_test_count_largest_file_first():
    """Files of 9, 5, 4, 2 and 1 tests in two shards: 9+2 and 5+4+1, the big file apart from the next."""
    owner = shard_of_files(NODEIDS, 2)
    sizes = [sum(1 for n in NODEIDS if owner[n.split("::")[0]] == s) for s in (1, 2)]
    assert sorted(sizes) == [10, 11]
    assert owner["a/test_big.py"] != owner["a/test_mid.py"]


def test_the_partition_does_not_depend_on_collection_order():
    shuffled = NODEIDS[::-1]
    assert shard_of_files(shuffled, 3) == shard_of_files(NODEIDS, 3)


@pytest.mark.parametrize("text", ["", "2", "0/2", "3/2", "1/0", "a/b", "1/2/3", "-1/2"])
def test_a_malformed_shard_is_refused_naming_the_variable(text):
    with pytest.raises(ValueError, match=r"KB_TEST_SHARD=.*expected 'i/n' with 1 <= i <= n"):
        parse_shard(text)


def test_a_well_formed_shard_parses():
    assert parse_shard("1/2") == (1, 2)
    assert parse_shard(" 3 / 4 ") == (3, 4)


def _collect(shard: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KB_TEST_SHARD"}
    if shard is not None:
        env["KB_TEST_SHARD"] = shard
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-n", "0", "-p", "no:cacheprovider",
                           "interop_tests/package"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _ids(proc: subprocess.CompletedProcess) -> set[str]:
    return {line for line in proc.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_conftest_runs_one_shard_and_the_two_shards_make_the_whole_folder():
    whole, first, second = _collect(None), _collect("1/2"), _collect("2/2")
    assert whole.returncode == first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert _ids(first) and _ids(second)
    assert not _ids(first) & _ids(second)
    assert _ids(first) | _ids(second) == _ids(whole)


@pytest.mark.slow
def test_the_conftest_refuses_a_malformed_shard_before_running_anything():
    proc = _collect("3/2")
    assert proc.returncode != 0
    assert "KB_TEST_SHARD='3/2': expected 'i/n'" in proc.stdout + proc.stderr
    assert not _ids(proc)
