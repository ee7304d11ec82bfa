"""The suite split into shards of whole files (interop_tests/shard.py, KB_TEST_SHARD=i/n), for a GPU
check whose suite no longer fits one 10-minute device call: every test in exactly one shard, files
never split, and every process computing the same partition."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.shard import in_shard, parse_by, parse_shard, shard_of_files, shard_of_tests

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


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shards_of_single_tests_hold_every_test_once_and_split_a_files_variants(count):
    member = [in_shard(NODEIDS, i, count, "tests") for i in range(1, count + 1)]
    for k, nodeid in enumerate(NODEIDS):
        assert sum(m[k] for m in member) == 1, nodeid
    sizes = [sum(m) for m in member]
    assert max(sizes) - min(sizes) <= 1                 # round-robin: even to one test
    big = {shard_of_tests(NODEIDS, count)[n] for n in NODEIDS if n.startswith("a/test_big.py")}
    assert len(big) == min(count, 9)                    # one file's 9 tests spread over every shard
    assert shard_of_tests(NODEIDS[::-1], count) == shard_of_tests(NODEIDS, count)


def test_the_shard_unit_is_files_or_tests_and_anything_else_is_refused_naming_the_variable():
    assert parse_by(None) == parse_by("") == parse_by("files") == "files"
    assert parse_by(" tests ") == "tests"
    with pytest.raises(ValueError, match=r"KB_TEST_SHARD_BY='test': expected one of files, tests"):
        parse_by("test")


def _collect(shard: str | None, by: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KB_TEST_SHARD", "KB_TEST_SHARD_BY")}
    if shard is not None:
        env["KB_TEST_SHARD"] = shard
    if by is not None:
        env["KB_TEST_SHARD_BY"] = by
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


@pytest.mark.slow
def test_the_conftest_runs_shards_of_single_tests_that_make_the_whole_folder():
    whole = _collect(None)
    parts = [_collect(f"{i}/3", "tests") for i in (1, 2, 3)]
    assert all(p.returncode == 0 for p in parts), parts[0].stderr
    ids = [_ids(p) for p in parts]
    assert all(ids) and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert ids[0] | ids[1] | ids[2] == _ids(whole)
    assert all(len({i.split("::")[0] for i in part} & {i.split("::")[0] for i in ids[0]}) for part in ids[1:])


@pytest.mark.slow
def test_the_conftest_refuses_a_malformed_shard_unit_before_running_anything():
    proc = _collect("1/2", "rows")
    assert proc.returncode != 0 and "KB_TEST_SHARD_BY='rows': expected one of files, tests" in proc.stdout + proc.stderr
    assert not _ids(proc)
