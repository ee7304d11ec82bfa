"""Compile errors of the tile language: the SIMT front end's `dsl.DslCompileError` (file:line:col,
the source line, a caret, a hint), raised from tile IR locations through the one source/caret
convention (`dsl.source.error_position`)."""
from __future__ import annotations

from dsl.errors import DslCompileError
from dsl.ir.nodes import Loc


class TileCompileError(DslCompileError):
    """A mistake in a @tile.kernel body or its arguments, located in the source."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str = "") -> None:
        if loc is None:
            super().__init__(message, hint=hint)
            return
        from dsl.source import error_position
        super().__init__(message, hint=hint, **error_position(loc))
