"""Every exception class the DSL defines is a `dsl.DslError` on its branch of the tree that docs/dsl.md
draws ("The error tree"), and keeps its usual Python base, so one `except dsl.DslError` catches any DSL
failure while `except ValueError` code written before the tree still works.

The classes are found by importing every module under dsl/ and reading its namespace, and every
`class` statement is read from the sources, so a new exception class cannot stay off the tree: it
must be placed in TREE (with its branch) or in OUTSIDE (with the reason it is not a DslError)."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import bridge
import dsl
from dsl import f32, simt

DSL_DIR = Path(dsl.__file__).resolve().parent

BRANCHES = ("DslCompileStageError", "DslTargetError", "DslLinkError", "DslCacheError", "DslDeclarationError",
            "DslToolError", "DslSimulationError")

# class -> (its branch, the other classes it must still be): written from docs/dsl.md, not read from dsl/.
TREE: dict[str, tuple[str, tuple[type | str, ...]]] = {
    "DslCompileError": ("DslCompileStageError", (Exception,)),
    "TileCompileError": ("DslCompileStageError", ("DslCompileError",)),
    "AnnotationError": ("DslCompileStageError", ("DslCompileError", TypeError)),
    "TypeRuleError": ("DslCompileStageError", (Exception,)),
    "TileTypeError": ("DslCompileStageError", (Exception,)),
    "TypeVarMismatch": ("DslCompileStageError", (Exception,)),
    "IRVerifyError": ("DslCompileStageError", (Exception,)),
    "CodegenError": ("DslCompileStageError", (Exception,)),
    "LoweringError": ("DslCompileStageError", (Exception,)),
    "TargetError": ("DslTargetError", (ValueError,)),
    "PtxasNotFound": ("DslTargetError", (FileNotFoundError,)),
    "LibdeviceNotFound": ("DslTargetError", (FileNotFoundError,)),
    "PtxasError": ("DslTargetError", (RuntimeError,)),
    "LinkError": ("DslLinkError", (RuntimeError,)),
    "CacheRefusedError": ("DslCacheError", (PermissionError,)),
    "OptionError": ("DslDeclarationError", (Exception,)),
    "StageError": ("DslDeclarationError", (ValueError,)),
    "VocabularyError": ("DslDeclarationError", (ValueError,)),
    "TileOpError": ("DslDeclarationError", (ValueError,)),
    "CliError": ("DslToolError", (Exception,)),
    "CacheCliError": ("DslToolError", (ValueError,)),
    "AotError": ("DslToolError", (ValueError,)),
    "PortError": ("DslToolError", (Exception,)),
    "NoCompilerError": ("DslToolError", ("PortError",)),
    "SimulationError": ("DslSimulationError", (RuntimeError,)),
}

# Not DslErrors, and why.
OUTSIDE = {
    "_Bad": "private: an annotation refusal found without the source, always re-raised as AnnotationError",
    "_Refused": "private: the tuner's note that a configuration's launch contract refused it, caught in its loop",
    "NotAnArray": "a signal inside argument binding, always re-raised as bridge.ArgumentKindError (a launch "
                  "error: the runtime's, not the DSL's)",
    "CacheTrustWarning": "a warning category for warnings.warn, not an error that is raised",
}

# On the tree, but its class line lives in a file being moved now: it fails (strict xfail) until it
# takes its branch, and then must leave this list.
PENDING: dict[str, str] = {}


def _raise_on_import_error(name: str) -> None:
    raise ImportError(f"cannot import {name}: the walk would miss its classes")


@pytest.fixture(scope="module")
def classes() -> dict[str, type]:
    """Every exception class defined at the top of a module under dsl/, by name (names are unique)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(dsl.__path__, "dsl.", onerror=_raise_on_import_error):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                other = found.setdefault(obj.__name__, obj)
                assert other is obj, f"two exception classes named {obj.__name__}: {other} and {obj}"
    return found


def _resolve(base: type | str, classes: dict[str, type]) -> type:
    return classes[base] if isinstance(base, str) else base


def test_the_walk_sees_classes_of_every_floor(classes):
    """A self-check, so an empty or partial walk cannot pass the tests below."""
    for name in ("DslError", "DslCompileError", "TargetError", "SimulationError", "TileCompileError", "_Refused",
                 "CliError", "CacheTrustWarning"):
        assert name in classes, name
    assert len(classes) >= 30


def test_no_exception_class_hides_inside_a_function_or_class():
    """The walk reads module namespaces; a class defined in a function body would escape it."""
    hidden = []
    for path in sorted(DSL_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for outer in ast.walk(tree):
            if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for inner in ast.walk(outer):
                    if inner is not outer and isinstance(inner, ast.ClassDef) and any(
                            ast.unparse(b).endswith(("Error", "Exception", "Fault", "Warning")) for b in inner.bases):
                        hidden.append(f"{path.relative_to(DSL_DIR.parent)}:{inner.lineno} {inner.name}")
    assert not hidden, "exception classes the walk cannot see: " + ", ".join(hidden)


def test_every_exception_class_is_placed_on_the_tree_or_outside_it_for_a_reason(classes):
    placed = {"DslError", *BRANCHES, *TREE, *OUTSIDE}
    unplaced = sorted(set(classes) - placed)
    assert not unplaced, (f"exception classes neither on the error tree nor outside it: {unplaced}; give each a "
                          f"branch (dsl/errors.py, docs/dsl.md 'The error tree') and an entry in TREE")
    stale = sorted(placed - set(classes))
    assert not stale, f"placed here but defined nowhere under dsl/: {stale}"


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=PENDING[n])) if n in PENDING else n for n in TREE])
def test_each_class_is_a_dsl_error_on_its_branch_and_keeps_its_usual_base(classes, name):
    cls = classes[name]
    branch, usual = TREE[name]
    assert issubclass(cls, dsl.DslError), f"{name} is not a dsl.DslError: {cls.__mro__}"
    assert issubclass(cls, getattr(dsl, branch)), f"{name} is not on the {branch} branch: {cls.__mro__}"
    for base in usual:
        assert issubclass(cls, _resolve(base, classes)), f"{name} lost its base {base}: {cls.__mro__}"
    others = [b for b in BRANCHES if b != branch and issubclass(cls, getattr(dsl, b))]
    assert not others, f"{name} hangs from two branches: {branch} and {others}"


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_the_classes_outside_the_tree_are_not_dsl_errors(classes, name):
    assert not issubclass(classes[name], dsl.DslError)


def test_the_root_and_branches_are_exported_from_dsl_and_hang_from_the_root():
    assert "DslError" in dsl.__all__ and dsl.DslError.__bases__ == (Exception,)
    for name in BRANCHES:
        assert name in dsl.__all__, name
        assert getattr(dsl, name).__bases__ == (dsl.DslError,), name
    assert dsl.DslCompileError.__bases__ == (dsl.DslCompileStageError,)


def test_the_runtime_errors_the_dsl_reexports_stay_the_runtimes():
    assert dsl.KernelFault is bridge.KernelFault and dsl.ConfigurationError is bridge.ConfigurationError
    assert not issubclass(bridge.KernelFault, dsl.DslError)
    assert not issubclass(bridge.ConfigurationError, dsl.DslError)
    assert not issubclass(bridge.LaunchContractError, dsl.DslError)


def test_the_errors_module_is_a_ground_floor_that_imports_nothing_of_the_project():
    tree = ast.parse((DSL_DIR / "errors.py").read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [n for n in names if n.split(".")[0] in ("dsl", "bridge")] == []


# ---------------------------------------------------------------- real failures, caught as DslError
def scale(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


@simt.kernel
def writes_its_input(a: simt.Array[f32]):
    i = simt.thread.index_1d()
    a[i] = 1.0


def _args():
    a = np.arange(8, dtype=np.float32)
    return a, np.zeros_like(a), np.float32(2)


@pytest.mark.parametrize("arch", ["sm_12", "bogus", 12])
def test_a_bad_arch_is_caught_as_a_dsl_error_and_still_as_a_value_error(arch):
    kernel = simt.kernel(scale)
    with pytest.raises(dsl.DslError, match="arch: ") as info:
        kernel.ptx(*_args(), arch=arch)
    assert isinstance(info.value, dsl.DslTargetError) and isinstance(info.value, ValueError)


def test_a_bad_decorator_option_is_caught_as_a_dsl_error():
    with pytest.raises(dsl.DslError, match=r"block= \(0, 1, 1\): the x dimension must be in \[1, 1024\]") as info:
        simt.kernel(block=(0, 1, 1))(scale)
    assert isinstance(info.value, dsl.DslCompileError)     # located at the decorator


def test_a_bad_option_given_to_the_checker_is_a_declaration_error():
    from dsl.options import check_block
    with pytest.raises(dsl.DslDeclarationError, match="block= must be an int or a tuple of 1 to 3 ints"):
        check_block("wide")


def test_a_compile_error_in_the_body_is_caught_as_a_dsl_error():
    with pytest.raises(dsl.DslError, match="read-only") as info:
        writes_its_input.ptx(np.zeros(4, np.float32))
    assert isinstance(info.value, dsl.DslCompileStageError) and info.value.line > 0
