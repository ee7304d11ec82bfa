"""The code generator's mixins do not import `builder` (the former import circle builder ⇄ exprs /
memory over CodegenError): each imports alone in a fresh interpreter, and CodegenError is one class
wherever it is imported from."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 3 s of a full run on 2 cores: a fresh interpreter a test

MIXINS = ("dsl.backend.exprs", "dsl.backend.memory", "dsl.backend.tile_codegen", "dsl.backend.errors")


@pytest.mark.parametrize("module", MIXINS)
def test_backend_module_imports_without_the_builder(module):
    code = (f"import sys, {module}\n"
            "print('builder loaded' if 'dsl.backend.builder' in sys.modules else 'builder not loaded')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "builder not loaded"


def test_codegen_error_is_one_class_and_names_the_location():
    from dsl.backend import builder, errors, exprs, memory
    from dsl.ir.nodes import Loc
    assert builder.CodegenError is errors.CodegenError is exprs.CodegenError is memory.CodegenError
    err = errors.CodegenError("no code generation for statement Frob", Loc("k.py", 7, 3))
    assert str(err) == "k.py:7:3: no code generation for statement Frob"
    assert err.loc == Loc("k.py", 7, 3)
