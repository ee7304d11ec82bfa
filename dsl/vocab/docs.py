"""The documentation's math lists and launch-feature table, generated from the math table
(dsl/vocab/math.py) and the launch table (dsl/vocab/launch.py).

docs/dsl.md and docs/tile.md hold blocks between `<!-- vocab:NAME -->` and `<!-- /vocab:NAME -->`
lines; `sync(text)` rewrites each block from the table and interop_tests/vocab checks that the files
are in sync. After adding a row, run `python -m dsl.vocab.docs` (rewrites the files in place).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable

from dsl.vocab import launch as launch_vocab
from dsl.vocab import math as vocab

DOC_FILES = ("docs/dsl.md", "docs/tile.md")
_TYPING_TEXT = {vocab.FLOAT: "float", vocab.PREDICATE: "bool", vocab.ROUNDING: "float (integral)"}


def _signature(row: vocab.MathIntrinsic) -> str:
    return f"{row.name}({', '.join(row.params)})"


def math_table() -> str:
    """The reference table of every built-in row (docs/dsl.md)."""
    lines = ["| function | result | Python `math` name | lowering (f32 / f64) | meaning |",
             "| --- | --- | --- | --- | --- |"]
    for row in vocab.rows(builtin_only=True):
        aliases = ", ".join(f"`math.{a}`" for a in row.python) or "—"
        lines.append(f"| `{_signature(row)}` | {_TYPING_TEXT[row.typing]} | {aliases} | "
                     f"{row.lowering.describe()} | {row.doc} |")
    return "\n".join(lines)


def name_list(prefix: str) -> str:
    """`prefix.sqrt rsqrt ...`: the built-in names in table order, as one inline code span."""
    return f"`{prefix}." + " ".join(r.name for r in vocab.rows(builtin_only=True)) + "`"


BLOCKS: dict[str, Callable[[], str]] = {
    "math-table": math_table,
    "simt-math": lambda: f"Math functions: {name_list('simt')}.",
    "tile-math": lambda: f"Math functions: {name_list('tile')}.",
    "launch-table": launch_vocab.docs_table,
}
_BLOCK = re.compile(r"(<!-- vocab:([a-z-]+) -->\n)(.*?)(<!-- /vocab:\2 -->)", re.S)


def sync(text: str) -> str:
    """`text` with every vocab block regenerated (unknown block names raise KeyError)."""
    return _BLOCK.sub(lambda m: m.group(1) + BLOCKS[m.group(2)]() + "\n" + m.group(4), text)


def blocks_in(text: str) -> list[str]:
    return [m.group(2) for m in _BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the blocks of DOC_FILES under the repository root (argument, default: cwd)."""
    root = Path((argv or sys.argv[1:] or ["."])[0])
    for rel in DOC_FILES:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = sync(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
