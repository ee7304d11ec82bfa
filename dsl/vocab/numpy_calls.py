"""What to tell a kernel that calls a NumPy function (`np.sqrt(x)`): its DSL spelling, from the math table.

NumPy functions run on the host, on arrays; a kernel body is compiled, so both front ends refuse them.
The useful part of the refusal is the name to write instead: `simt.sqrt(x)` / `math.sqrt(x)` in a SIMT
kernel, `tile.sqrt(x)` in a tile kernel, looked up in dsl/vocab/math.py (rows registered at run time
included), or the list of math functions when the table has no such row. Array libraries that copy
NumPy's names (CuPy, torch, JAX) get the same answer. Imports nothing but the math table.
"""
from __future__ import annotations

import math as _pymath
import re
from typing import Any

from dsl.vocab import math as vocab

LIBRARIES = {"numpy": "NumPy", "cupy": "CuPy", "torch": "torch", "jax": "JAX"}   # module root -> name
# NumPy names that differ from the row's name (the rest are looked up as they are)
ROW_ALIASES = {"power": "pow", "float_power": "pow", "absolute": "fabs"}
# NumPy functions that are Python builtins inside kernels
BUILTIN_SPELLINGS = {"minimum": "min(x, y)", "maximum": "max(x, y)"}


def array_library(obj: Any) -> str | None:
    """'NumPy' (or 'CuPy', 'torch', 'JAX') when `obj` is a function of that library, else None."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = getattr(type(obj), "__module__", None)     # ufunc-like objects without __module__
    if not isinstance(module, str):
        return None
    return LIBRARIES.get(module.partition(".")[0])


def dsl_spelling(name: str, model: str) -> str | None:
    """How a kernel of `model` ('simt' or 'tile') writes the NumPy function `name`, or None."""
    if name in BUILTIN_SPELLINGS:
        return f"the builtin {BUILTIN_SPELLINGS[name]}"
    row = vocab.get(ROW_ALIASES.get(name, name))
    if row is None:
        return None
    params = ", ".join(row.params)
    spelling = f"{model}.{row.name}({params})"
    aliases = [a for a in row.python if hasattr(_pymath, a)]
    if model == "simt" and aliases:
        spelling += f" or math.{aliases[0]}({params})"
    return spelling


def numpy_call_hint(obj: Any, model: str) -> tuple[str, str] | None:
    """(message, hint) for a kernel calling `obj` when it is an array library's function, else None."""
    library = array_library(obj)
    if library is None:
        return None
    name = getattr(obj, "__name__", None) or repr(obj)
    if isinstance(obj, type):                              # np.float32(x): a scalar type, not a cast
        match = re.fullmatch(r"(float|u?int)(8|16|32|64)", name)
        cast = f"{match[1][0]}{match[2]}(x)" if match else "f32(x), i32(x)"
        return (f"'{name}' is a {library} type, not a kernel type",
                f"cast with the dsl type: {cast} (from dsl.types)")
    message = f"'{name}' is a {library} function: {library} functions do not run in kernels"
    spelling = dsl_spelling(name, model)
    if spelling is not None:
        return message, f"write {spelling}"
    known = " ".join(vocab.names())
    return message, (f"the kernel math functions are {model}.<name> for <name> in: {known} "
                     f"(docs/dsl.md, 'Math functions'); write a loop for the rest")
