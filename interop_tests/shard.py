"""Split the suite into n shards of whole files (KB_TEST_SHARD=i/n), so a run too long for one
10-minute GPU call runs in several (scripts/gpu_check.py --shard i/n).

Whole files stay together (a module fixture is set up once); files go to the shard with the fewest
tests so far, largest first, ties broken by path, so every process of a run (each xdist worker
collects on its own) and every shard of the split computes the same partition from the same collection.
"""
from __future__ import annotations

import re

ENV = "KB_TEST_SHARD"
_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' with 1 <= i <= n -> (i, n); anything else is a ValueError naming what was expected."""
    m = _FORM.match(text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"{ENV}={text!r}: expected 'i/n' with 1 <= i <= n (e.g. '1/2')")
    return int(m.group(1)), int(m.group(2))


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


def in_shard(nodeids: list[str], index: int, count: int) -> list[bool]:
    """Which of `nodeids` belong to shard `index` of `count`."""
    owner = shard_of_files(nodeids, count)
    return [owner[n.split("::", 1)[0]] == index for n in nodeids]
