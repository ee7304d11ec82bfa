"""The check of a tile kernel's compile-time refusal that the tests of atomics and arrivals share: the
error, and every argument (partitions' arrays included) unchanged after it."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import DslCompileError, tile


def _array(x):
    return x.array if isinstance(x, tile.Partition) else x


def assert_refused_untouched(kernel, args: tuple, needle: str) -> None:
    before = [np.array(_array(x), copy=True) for x in args]
    with pytest.raises(DslCompileError, match=needle):
        kernel.simulate(*args)
    for b, x in zip(before, args):
        assert np.array_equal(b, _array(x))
