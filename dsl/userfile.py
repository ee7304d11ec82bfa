"""Running a user's Python file as a module: the one loader of the command-line tools that take a
file (`python -m dsl.aot module.py`, `python -m dsl.link export FILE.py::fn`).

The module is registered in `sys.modules` before it runs, so what its code looks itself up by (the
DSL's source lookup, dataclasses, pickling) finds it.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType


def load_user_file(path: str | os.PathLike, prefix: str) -> ModuleType:
    """Execute the Python file `path` as the module `<prefix><stem>` (the stem made an identifier).
    FileNotFoundError naming the path when there is no such file."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    stem = re.sub(r"\W", "_", path.stem)
    name = prefix + (stem if stem and not stem[0].isdigit() else f"_{stem}")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod
