"""Kernels generated from the math table: one SIMT and one tile kernel per row, plus one SIMT and one
tile kernel that call every row, written to a real file (kernels need inspectable source) and imported.

Generating them from the table is the point: a new row is covered by every test here without editing
a test."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from dsl.vocab import math as vocab

HEADER = """import dsl
from dsl import simt, tile, i32
T = dsl.TypeVar("T")
"""


def _call(prefix: str, row: vocab.MathIntrinsic, operands: list[str]) -> str:
    return f"{prefix}.{row.name}({', '.join(operands[: row.arity])})"


def source(rows: tuple[vocab.MathIntrinsic, ...]) -> str:
    out = [HEADER]
    for row in rows:
        pred = row.typing == vocab.PREDICATE
        out_t = "i32" if pred else "T"
        call = _call("simt", row, ["x[i]", "y[i]", "z[i]"])
        value = f"i32(1) if {call} else i32(0)" if pred else call
        out.append(f"""
@simt.kernel(block=(128, 1, 1))
def simt_{row.name}(x: simt.Array[T], y: simt.Array[T], z: simt.Array[T], out: simt.DisjointSlice[{out_t}]):
    i = simt.thread.index_1d()
    out[i] = {value}
""")
        loads = [f"tile.load({a}, tile.bid(0), out.tile_shape)" for a in "xyz"]
        call = _call("tile", row, loads)
        value = f"tile.where({call}, 1, 0)" if pred else call
        out.append(f"""
@tile.kernel
def tile_{row.name}(x: tile.Array[T], y: tile.Array[T], z: tile.Array[T], out: tile.Partition[{out_t}]):
    out.store({value})
""")
    out.append(_all_rows(rows))
    return "\n".join(out)


def _all_rows(rows: tuple[vocab.MathIntrinsic, ...]) -> str:
    """Kernels calling every row once (simt_all, simt_all_fast with fastmath, tile_all)."""
    simt_lines, tile_lines = [], []
    for row in rows:
        s = _call("simt", row, ["v", "y[i]", "z[i]"])
        t = _call("tile", row, ["v", "y", "z"])
        if row.typing == vocab.PREDICATE:
            simt_lines.append(f"    if {s}:\n        v = v + y[i]")
            tile_lines.append(f"    v = tile.where({t}, y, v)")
        else:
            simt_lines.append(f"    v = {s}")
            tile_lines.append(f"    v = {t}")
    body = "\n".join(simt_lines)
    tbody = "\n".join(tile_lines)
    simt_sig = "(x: simt.Array[T], y: simt.Array[T], z: simt.Array[T], out: simt.DisjointSlice[T])"
    return f"""
@simt.kernel(block=(128, 1, 1))
def simt_all{simt_sig}:
    i = simt.thread.index_1d()
    if i < len(out):
        v = x[i]
{_indent(body)}
        out[i] = v


@simt.kernel(block=(128, 1, 1), fastmath=True)
def simt_all_fast{simt_sig}:
    i = simt.thread.index_1d()
    if i < len(out):
        v = x[i]
{_indent(body)}
        out[i] = v


@tile.kernel
def tile_all(x: tile.Array[T], y_: tile.Array[T], z_: tile.Array[T], out: tile.Partition[T]):
    v = tile.load(x, tile.bid(0), out.tile_shape)
    y = tile.load(y_, tile.bid(0), out.tile_shape)
    z = tile.load(z_, tile.bid(0), out.tile_shape)
{tbody}
    out.store(v)
"""


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def load(tmp_dir: Path, rows: tuple[vocab.MathIntrinsic, ...], name: str = "vocab_generated"):
    """Write and import the generated module (a fresh module object per call)."""
    path = Path(tmp_dir) / f"{name}.py"
    path.write_text(source(rows), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 100.0, np.inf, -np.inf, np.nan]


def operands(rng: np.random.Generator, n: int, dtype) -> list[np.ndarray]:
    """Three operand arrays: specials first (each paired with every other special across x, y, z
    rotations), then random values of a few magnitudes."""
    out = []
    for shift in range(3):
        specials = np.roll(np.array(SPECIALS), shift * 5)
        rand = rng.standard_normal(n - len(SPECIALS)) * np.where(rng.random(n - len(SPECIALS)) < 0.5, 3, 300)
        out.append(np.concatenate([specials, rand]).astype(dtype))
    return out


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as values of the same dtype: NaN where NaN, the same bits (sign of zero too) elsewhere."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b))
    nan_a, nan_b = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(nan_a, nan_b) and np.array_equal(a.view(bits)[~nan_a], b.view(bits)[~nan_b]))
