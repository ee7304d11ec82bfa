"""Errors of the DSL front end. Compile errors point at the user's source: file:line:col, the source
line, a caret under the offending construct, and a hint saying what to write instead."""
from __future__ import annotations


class DslCompileError(Exception):
    """A kernel or device function cannot be compiled; the message says where and what to do instead."""

    def __init__(self, message: str, *, file: str = "<unknown>", line: int = 0, col: int = 0,
                 source_line: str = "", end_col: int | None = None, hint: str = "") -> None:
        self.message, self.file, self.line, self.col = message, file, line, col
        self.source_line, self.hint = source_line, hint
        self.end_col = end_col if end_col is not None and end_col > col else col + 1
        super().__init__(self.render())

    @property
    def caret_line(self) -> str:
        """`^~~~` under the construct (columns are 1-based; tabs are kept so the caret aligns)."""
        if not self.source_line or self.col <= 0:
            return ""
        prefix = "".join(c if c == "\t" else " " for c in self.source_line[: self.col - 1])
        width = max(1, min(self.end_col, len(self.source_line) + 1) - self.col)
        return prefix + "^" + "~" * (width - 1)

    def render(self) -> str:
        lines = [f"{self.file}:{self.line}:{self.col}: error: {self.message}"]
        if self.source_line:
            lines += ["    " + self.source_line, "    " + self.caret_line]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)
