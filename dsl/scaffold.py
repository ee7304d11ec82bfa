"""`python -m dsl new NAME`: a small mixed CUDA C++ + DSL project that builds and passes its tests at once.

Why these files: they are the porting workflow in miniature. A CUDA C++ kernel with its KB_CONTRACT,
built by CMake with kernelbridge_add_cuda_module; the same kernel in the DSL (SIMT or tile); a pipeline
running both on one CuPy or torch stream; tests that check the DSL kernel against NumPy on the
simulator (no GPU) and against the C++ kernel on a GPU. The files are rendered from dsl/templates/project.
"""
from __future__ import annotations

import keyword
from pathlib import Path
from typing import Any

from dsl.port import PortError, render_template

FILES = {                      # written path -> template (under dsl/templates/project/)
    "README.md": "README.md.in",
    "CMakeLists.txt": "CMakeLists.txt.in",
    "kernels/scale_add.cu": "kernels/scale_add.cu.in",
    "pipeline.py": "pipeline.py.in",
    "pytest.ini": "pytest.ini.in",
    "requirements-test.txt": "requirements-test.txt.in",   # pytest: not in kernelbridge's base install
    "tests/conftest.py": "tests/conftest.py.in",
    "tests/test_project.py": "tests/test_project.py.in",
}
OPTIONS = {"simt": "{}", "tile": '{"tile_shapes": {"out": (dsl_kernels.TILE,)}}'}


def create(name: str, directory: Path | str = ".", arrays: str = "cupy", model: str = "simt") -> Path:
    """Create project `name` under `directory`; returns its root. Refuses to touch an existing path."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise PortError(f"project name: expected a Python identifier (letters, digits, _), got {name!r}")
    if arrays not in ("cupy", "torch"):
        raise PortError(f"--arrays: expected cupy or torch, got {arrays!r}")
    if model not in ("simt", "tile"):
        raise PortError(f"--model: expected simt or tile, got {model!r}")
    root = Path(directory) / name
    if root.exists():
        raise PortError(f"{root} already exists; choose another name or directory")
    run = render_template(f"project/run.{arrays}.py.in", {}).rstrip("\n")
    values = {"NAME": name, "ARRAYS": {"cupy": "CuPy", "torch": "torch"}[arrays],
              "MODEL": {"simt": "SIMT", "tile": "tile"}[model], "RUN": run, "OPTIONS": OPTIONS[model]}
    texts = {path: render_template(f"project/{tmpl}", values) for path, tmpl in FILES.items()}
    texts["dsl_kernels.py"] = render_template(f"project/dsl_kernels.{model}.py.in", values)
    for path, text in texts.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def cmd_new(args: Any) -> int:
    """The `python -m dsl new` subcommand."""
    root = create(args.name, args.dir, args.arrays, args.model)
    print(f"created {root} ({args.model} DSL kernel, {args.arrays} pipeline)")
    print(f"next: cd {root} && python -m pip install -r requirements-test.txt && cmake -S . -B build "
          f"-Dkernelbridge_DIR=\"$(python -c 'import bridge; print(bridge.cmake_dir())')\" && "
          f"cmake --build build && python -m pytest")
    return 0
