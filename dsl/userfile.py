"""Importing a user's Python file as a module: the one loader of the command-line tools that take a
file (`kernelbridge compile FILE.py::K`, `python -m dsl.aot module.py`, `python -m dsl.link export
FILE.py::fn`).

The file is imported, not run as a script: its module name is `<prefix><stem>`, never `__main__`, so
an `if __name__ == "__main__":` block (a script's own demo or simulation) does not run; module-level
code does, as on any import. The module is registered in `sys.modules` before it runs, so what its
code looks itself up by (the DSL's source lookup, dataclasses, pickling) finds it, and the file's
directory is put on `sys.path`, as `python FILE` would, so it can import its neighbours.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType


def module_name(path: str | os.PathLike, prefix: str) -> str:
    """`<prefix><stem>`, the stem made an identifier; never "__main__" (the prefix is required)."""
    if not prefix:
        raise ValueError("load_user_file: prefix must be non-empty, e.g. '_kb_cli_'")
    stem = re.sub(r"\W", "_", Path(path).stem)
    return prefix + (stem if stem and not stem[0].isdigit() else f"_{stem}")


def load_user_file(path: str | os.PathLike, prefix: str) -> ModuleType:
    """Import the Python file `path` as the module `module_name(path, prefix)`.
    FileNotFoundError naming the path when there is no such file."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    name = module_name(path, prefix)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod
