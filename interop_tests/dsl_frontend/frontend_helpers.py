"""Shared helpers of the front-end tests: IR queries and compile-error assertions."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

from dsl import DslCompileError
from dsl.ir import nodes as ir
from dsl.ir.verify import walk


def nodes_of(fn: ir.Function, cls: type) -> list:
    """Every node of class `cls` in the kernel body (device function bodies excluded)."""
    return [n for st in fn.body for n in walk(st) if isinstance(n, cls)]


def f32v(n: int = 37) -> np.ndarray:
    """A non-zero f32 vector whose length is not a multiple of any block size."""
    return (np.arange(n, dtype=np.float32) * 0.5 + 1.25)


def expect_compile_error(kernel, args, marker: str, token: str, *words: str,
                         file: str) -> DslCompileError:
    """Compile `kernel` for `args`; assert the DslCompileError points at `token` on the line that
    carries `marker`, shows that line with a caret under the token, and mentions every word."""
    with pytest.raises(DslCompileError) as info:
        kernel.ir(*args)
    e = info.value
    lines = [k for k in range(1, 5000) if marker in linecache.getline(file, k)]
    assert lines, f"marker {marker!r} not found in {file}"
    line = lines[0]
    text = linecache.getline(file, line).rstrip("\n")
    assert e.file == file
    assert e.line == line, str(e)
    assert e.col == text.index(token) + 1, str(e)
    rendered = str(e).splitlines()
    assert rendered[0].startswith(f"{file}:{line}:{e.col}: error: ")
    assert rendered[1] == "    " + text
    assert rendered[2] == "    " + " " * (e.col - 1) + "^" + "~" * (len(e.caret_line) - e.col), str(e)
    full = str(e)
    for w in words:
        assert w in full, f"{w!r} not in:\n{full}"
    assert "hint: " in full
    return e
