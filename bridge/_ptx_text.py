"""PTX text read without CUDA: its comments and its `.entry` names. One reader for bridge.Module (which
names a module's kernels) and the foreign-kernel intake (which also reads their parameters,
bridge/foreign/ptx.py), so the two never disagree on what a PTX file holds."""
from __future__ import annotations

import re

__all__ = ["ENTRY", "entry_names", "strip_comments"]

# `.entry name` and, when present, its parenthesised parameter list (group 3)
ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*(\(([^)]*)\))?", re.S)


def strip_comments(text: str) -> str:
    """`text` without its `//` and `/* */` comments (C, CUDA and PTX share the syntax)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def entry_names(ptx: str | bytes) -> list[str]:
    """The names of the PTX text's `.entry` directives, in order; commented-out ones are not entries."""
    text = ptx.decode("latin-1") if isinstance(ptx, (bytes, bytearray)) else ptx
    return [m.group(1) for m in ENTRY.finditer(strip_comments(text))]
