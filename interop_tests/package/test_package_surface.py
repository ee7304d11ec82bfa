"""What the distribution promises about itself: `from bridge import *` / `from dsl import *` export exactly
their `__all__`, every public object is in it and has a docstring, one version everywhere, the
Apache-2.0 LICENSE pyproject declares, and `py.typed` in both packages."""
from __future__ import annotations

import importlib.metadata
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import bridge
import dsl
import dsl.cache

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = (REPO / "pyproject.toml").read_text(encoding="utf-8")
# submodules `import bridge` loads as implementation, reachable by name but not re-exported
BRIDGE_IMPL_MODULES = {"profiling", "errors", "memory", "peer", "array", "device", "stream", "module", "kernel", "graph", "contract",
                       "settings"}


def _star(module: str) -> set[str]:
    ns: dict = {}
    exec(f"from {module} import *", ns)
    return {k for k in ns if k != "__builtins__"}


@pytest.mark.parametrize("mod", [bridge, dsl], ids=["bridge", "dsl"])
def test_star_import_exports_exactly_all_and_all_names_exist(mod):
    assert len(mod.__all__) == len(set(mod.__all__)), "a name is listed twice in __all__"
    assert _star(mod.__name__) == set(mod.__all__)
    assert [n for n in mod.__all__ if not hasattr(mod, n)] == []


@pytest.mark.parametrize("mod", [bridge, dsl], ids=["bridge", "dsl"])
def test_every_public_non_module_attribute_is_in_all(mod):
    stray = sorted(n for n, v in vars(mod).items()
                   if not n.startswith("_") and n != "annotations" and not isinstance(v, types.ModuleType)
                   and n not in mod.__all__)
    assert stray == [], f"{mod.__name__} has public names missing from __all__: {stray}"


def test_bridge_modules_outside_all_are_its_implementation_modules():
    """In a fresh interpreter (other tests import bridge.testing, bridge.doctor, ... as they go)."""
    code = ("import types, bridge; print(' '.join(sorted(n for n, v in vars(bridge).items() "
            "if isinstance(v, types.ModuleType) and not n.startswith('_') and n not in bridge.__all__)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == BRIDGE_IMPL_MODULES


def test_every_error_class_of_bridge_errors_is_exported():
    from bridge import errors
    classes = {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, Exception)
               and v.__module__ == "bridge.errors"}
    assert classes - set(bridge.__all__) == set()
    assert {"BlockSizeTypeError", "GridSizeTypeError"} <= set(bridge.__all__)


@pytest.mark.parametrize("mod", [bridge, dsl], ids=["bridge", "dsl"])
def test_every_exported_name_has_a_docstring(mod):
    undocumented = [n for n in mod.__all__ if not inspect.getdoc(getattr(mod, n))]
    assert undocumented == []


def test_one_version_everywhere():
    installed = importlib.metadata.version("kernelbridge")
    assert bridge.__version__ == dsl.__version__ == dsl.cache.DSL_VERSION == installed
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:[.-]?\w+)?", bridge.__version__)
    assert 'dynamic = ["version"]' in PYPROJECT
    assert 'metadata.version.input = "bridge/__init__.py"' in PYPROJECT
    literals = [str(p.relative_to(REPO)) for p in [*REPO.glob("bridge/**/*.py"), *REPO.glob("dsl/**/*.py")]
                if re.search(r"""^(__version__|\w*VERSION)\s*=\s*["']\d+\.\d+""", p.read_text(encoding="utf-8"), re.M)]
    assert literals == ["bridge/__init__.py"]


def test_the_license_file_is_the_apache_2_text_pyproject_declares():
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert re.search(r'^license = "Apache-2.0"', PYPROJECT, re.M)     # PEP 639 SPDX expression
    assert 'license-files = ["LICENSE"]' in PYPROJECT
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert (REPO / "cpp/include/kernelbridge/dlpack/LICENSE").is_file()   # the vendored header's own


def test_both_packages_are_marked_typed_and_shipped_whole():
    for pkg in ("bridge", "dsl"):
        assert (REPO / pkg / "py.typed").is_file(), f"{pkg}/py.typed missing"
    assert 'wheel.packages = ["bridge", "dsl"]' in PYPROJECT   # whole directories: py.typed included
    assert sys.modules["bridge"].__file__ and sys.modules["dsl"].__file__
