"""The tile lowering's error, in a module of its own so that every lowering module can raise it
without importing the Lowerer (dsl/tile/lower/kernel.py imports them all: the imports stay a DAG)."""
from __future__ import annotations

from dsl.errors import DslCompileStageError


class LoweringError(DslCompileStageError):
    """The tile program needs something this lowering does not do (says what)."""
