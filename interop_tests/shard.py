"""Split the suite into n shards of whole files (KB_TEST_SHARD=i/n), so a run too long for one
10-minute GPU call runs in several (scripts/gpu_check.py --shard i/n).

Whole files stay together (a module fixture is set up once); files go to the shard with the fewest
tests so far, largest first, ties broken by path, so every process of a run (each xdist worker
collects on its own) and every shard of the split computes the same partition from the same collection.

With KB_TEST_SHARD_BY=tests the shards are of single tests instead, dealt round-robin in node-id order
(parametrised variants of one slow test land in different shards): the sanitizer passes, where one file
(test_tile_gpu.py) holds 40 % of a pass's time, run as several processes that way (gpu_check.py).
"""
from __future__ import annotations

import re

ENV = "KB_TEST_SHARD"
BY_ENV = "KB_TEST_SHARD_BY"
BY = ("files", "tests")
_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' with 1 <= i <= n -> (i, n); anything else is a ValueError naming what was expected."""
    m = _FORM.match(text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"{ENV}={text!r}: expected 'i/n' with 1 <= i <= n (e.g. '1/2')")
    return int(m.group(1)), int(m.group(2))


def parse_by(text: str | None) -> str:
    """KB_TEST_SHARD_BY's value: 'files' (also when unset or empty) or 'tests'; else a ValueError."""
    by = (text or "files").strip()
    if by not in BY:
        raise ValueError(f"{BY_ENV}={text!r}: expected one of {', '.join(BY)}")
    return by


def shard_of_files(nodeids: list[str], count: int) -> dict[str, int]:
    """Each test file's shard (1..count): greedy, largest file first, into the lightest shard."""
    sizes: dict[str, int] = {}
    for nodeid in nodeids:
        path = nodeid.split("::", 1)[0]
        sizes[path] = sizes.get(path, 0) + 1
    load = [0] * count
    owner: dict[str, int] = {}
    for path in sorted(sizes, key=lambda p: (-sizes[p], p)):
        lightest = min(range(count), key=lambda s: (load[s], s))
        owner[path] = lightest + 1
        load[lightest] += sizes[path]
    return owner


def shard_of_tests(nodeids: list[str], count: int) -> dict[str, int]:
    """Each test's shard (1..count): round-robin over the node ids in sorted order."""
    return {nodeid: k % count + 1 for k, nodeid in enumerate(sorted(set(nodeids)))}


def in_shard(nodeids: list[str], index: int, count: int, by: str = "files") -> list[bool]:
    """Which of `nodeids` belong to shard `index` of `count`, shards of whole files or (`by` 'tests')
    of single tests."""
    if by == "tests":
        owner = shard_of_tests(nodeids, count)
        return [owner[n] == index for n in nodeids]
    owner = shard_of_files(nodeids, count)
    return [owner[n.split("::", 1)[0]] == index for n in nodeids]
