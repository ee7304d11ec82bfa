"""Errors of the code generator, in a module of their own so that `builder` and its mixins
(`exprs`, `memory`, `tile_codegen`) can all import them at the top without an import cycle."""
from __future__ import annotations

from dsl.errors import DslCompileStageError
from dsl.ir import nodes as N


class CodegenError(DslCompileStageError):
    """The IR holds something the code generator cannot lower (a frontend/verifier bug)."""

    def __init__(self, msg: str, loc: N.Loc = N.NOLOC):
        super().__init__(f"{loc}: {msg}" if loc is not N.NOLOC else msg)
        self.loc = loc
