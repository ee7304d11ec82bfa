"""The ONE type-variable binder of both models: launch signatures of SIMT kernels
(dsl/simt/signature.py) and tile kernels (dsl/tile/host.py) and the SIMT front end's parameter typing
(dsl/frontend/lower.py) bind a parameter's declared dtype through `bind_dtype`, so a TypeVar means
the same everywhere: bound by its first use, then required of every later one. Each caller turns a
TypeVarMismatch into its own typed error (a launch's DTypeError, a compile error at the parameter).
"""
from __future__ import annotations

from typing import Any

from dsl.errors import DslCompileStageError
from dsl.types import is_typevar


class TypeVarMismatch(DslCompileStageError):
    """A parameter was given `given` but its declaration requires `expected`: the declared dtype
    (`typevar` None) or what the TypeVar `typevar` was bound to by an earlier parameter."""

    def __init__(self, typevar: Any, expected: Any, given: Any) -> None:
        self.typevar, self.expected, self.given = typevar, expected, given
        what = f"type variable {typevar_name(typevar)} is bound to" if typevar is not None else "declared"
        super().__init__(f"{what} {expected}, given {given}")


def typevar_name(tv: Any) -> str:
    return getattr(tv, "__name__", None) or getattr(tv, "name", None) or "?"


def bind_dtype(bindings: dict, declared: Any, given: Any, *, exact: bool = True) -> Any:
    """The dtype a parameter declared `declared` must have when it is given `given`.

    `declared`: a concrete dtype (returned as is), a TypeVar (bound to `given` on its first use,
    recorded in `bindings`, and its binding returned afterwards) or None (any dtype: `given`).
    `exact`: the result must equal `given` (arrays, IR signatures), else TypeVarMismatch; with
    exact=False `given` only binds an unbound TypeVar (a scalar value converts to the result).
    """
    if declared is None:
        return given
    if is_typevar(declared):
        want = bindings.setdefault(declared, given)
        if exact and want != given:
            raise TypeVarMismatch(declared, want, given)
        return want
    if exact and declared != given:
        raise TypeVarMismatch(None, declared, given)
    return declared
