"""The Python source of a kernel: its AST, real file positions, and compile errors that point into it.

The one source/location/caret convention of both front ends (SIMT and tile): `get_source` reads and
parses a function once; `Source.loc` / `Source.span` give positions in the user's file (1-based line
and column, the indentation of nested definitions included); `compile_error(message, loc)` builds the
`DslCompileError` (file:line:col, the real source line, a `^~~~` caret under the construct, a hint)
from any such position, so an error raised where only the IR location is known looks exactly like one
raised at the AST node.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable, NoReturn

from dsl.errors import DslCompileError
from dsl.ir.nodes import Loc


@dataclass(frozen=True)
class Span(Loc):
    """A Loc that also knows where its construct ends on the line (1-based, exclusive), so a caret
    rendered later from the IR location covers the whole construct."""
    end_col: int | None = None


def _line_text(file: str, line: int) -> str:
    return linecache.getline(file, line).rstrip("\n")


def error_position(loc: Loc) -> dict:
    """DslCompileError's position fields for `loc` (a Loc or Span from `Source.loc`/`Source.span`):
    the real source line read from the file, and the caret's end when the Span knows it."""
    return {"file": loc.file, "line": loc.line, "col": loc.col, "source_line": _line_text(loc.file, loc.line),
            "end_col": getattr(loc, "end_col", None)}


def compile_error(message: str, loc: Loc | None, hint: str = "") -> DslCompileError:
    """The compile error at `loc` (None: without a position)."""
    return DslCompileError(message, hint=hint) if loc is None else \
        DslCompileError(message, hint=hint, **error_position(loc))


@dataclass
class Source:
    """AST of one function plus the offsets mapping AST positions back to the user's file."""
    file: str
    tree: ast.FunctionDef
    line_offset: int          # add to AST line numbers
    col_offset: int           # add to AST columns (the dedented indent)

    def line_text(self, line: int) -> str:
        return _line_text(self.file, line)

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset + 1
        return Loc(self.file, line, col, self.line_text(line).strip())

    def span(self, node: ast.AST | None) -> Span:
        """The position of `node` (the function header when None) with its end on the same line."""
        node = node if node is not None else self.tree
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset + 1
        end_col = None
        if getattr(node, "end_lineno", None) == getattr(node, "lineno", None) and \
                getattr(node, "end_col_offset", None) is not None:
            end_col = node.end_col_offset + self.col_offset + 1  # type: ignore[union-attr]
        return Span(self.file, line, col, self.line_text(line).strip(), end_col)

    def error(self, node: ast.AST | None, message: str, hint: str = "") -> NoReturn:
        """Raise a DslCompileError at `node` (the function header when node is None)."""
        raise compile_error(message, self.span(node), hint or DEFAULT_HINT)


DEFAULT_HINT = "docs/dsl.md lists the statements, types and intrinsics kernels support"
_CACHE: dict[Callable, Source] = {}   # documented cache: parsed source per Python function object


def assigned_names(stmts: list[ast.stmt]) -> set[str]:
    """The names that statements `stmts` assign, nested statements included (both front ends ask whether a
    region rebinds a name a condition or an index reads)."""
    names: set[str] = set()
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names


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
    return _CACHE.setdefault(pyfunc, src)     # atomic: the first parse wins, every thread gets one tree
