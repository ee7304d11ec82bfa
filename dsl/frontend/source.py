"""The Python source of a kernel: its AST, real file positions, and compile errors that point into it."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable, NoReturn

from dsl.errors import DslCompileError
from dsl.ir.nodes import Loc


@dataclass
class Source:
    """AST of one function plus the offsets mapping AST positions back to the user's file."""
    file: str
    tree: ast.FunctionDef
    line_offset: int          # add to AST line numbers
    col_offset: int           # add to AST columns (the dedented indent)

    def line_text(self, line: int) -> str:
        return linecache.getline(self.file, line).rstrip("\n")

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset + 1
        return Loc(self.file, line, col, self.line_text(line).strip())

    def error(self, node: ast.AST | None, message: str, hint: str = "") -> NoReturn:
        """Raise a DslCompileError at `node` (the function header when node is None)."""
        node = node if node is not None else self.tree
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset + 1
        end_col = None
        if getattr(node, "end_lineno", None) == getattr(node, "lineno", None) and \
                getattr(node, "end_col_offset", None) is not None:
            end_col = node.end_col_offset + self.col_offset + 1  # type: ignore[union-attr]
        raise DslCompileError(message, file=self.file, line=line, col=col,
                              source_line=self.line_text(line), end_col=end_col,
                              hint=hint or DEFAULT_HINT)


DEFAULT_HINT = "docs/dsl.md lists the statements, types and intrinsics kernels support"
_CACHE: dict[Callable, Source] = {}   # documented cache: parsed source per Python function object


def get_source(pyfunc: Callable) -> Source:
    """Parse `pyfunc`'s source once (cached per function object; the code object never changes)."""
    src = _CACHE.get(pyfunc)
    if src is not None:
        return src
    try:
        lines, first = inspect.getsourcelines(pyfunc)
        file = inspect.getsourcefile(pyfunc) or inspect.getfile(pyfunc)
    except (OSError, TypeError) as exc:
        raise DslCompileError(f"cannot read the source of {getattr(pyfunc, '__qualname__', pyfunc)!r}"
                              f" ({exc})", hint="kernels must be defined in a .py file (not in "
                              "exec() strings or the interactive prompt without a file)") from None
    text = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    module = ast.parse(textwrap.dedent(text))
    fdefs = [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not fdefs:
        raise DslCompileError(f"{pyfunc.__qualname__}: a kernel must be a `def` function",
                              file=file, line=first)
    src = Source(file, fdefs[0], first - 1, indent)  # type: ignore[arg-type]
    if isinstance(fdefs[0], ast.AsyncFunctionDef):
        src.error(fdefs[0], "async functions cannot be kernels", "use a plain `def`")
    _CACHE[pyfunc] = src
    return src
