"""Free names of a kernel: globals, closure cells and builtins, resolved to Python objects at compile
time. Numbers among them are folded into the IR as constants (so their values key the cache)."""
from __future__ import annotations

import builtins
from typing import Any, Callable

from dsl.annotations import closure_vars

_MISSING = object()


class Scope:
    """Name lookup for one Python function: closure first, then module globals, then builtins."""

    def __init__(self, pyfunc: Callable) -> None:
        self.closure = closure_vars(pyfunc)
        self.globals: dict[str, Any] = getattr(pyfunc, "__globals__", {})

    def lookup(self, name: str) -> Any:
        """The object bound to `name`, or `MISSING`."""
        if name in self.closure:
            return self.closure[name]
        if name in self.globals:
            return self.globals[name]
        return getattr(builtins, name, _MISSING)

    def namespace(self) -> dict[str, Any]:
        """A dict for evaluating annotations (closure over globals)."""
        ns = dict(self.globals)
        ns.update(self.closure)
        return ns


MISSING = _MISSING
