"""docs/api.md is what scripts/gen_api_docs.py writes from the docstrings now: a docstring or signature
change without a regenerated page fails here (and so in CI)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_api_docs.py"
PAGE = REPO / "docs" / "api.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_api_docs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_checked_in_page_is_what_the_generator_writes(gen, tmp_path):
    out = tmp_path / "api.md"
    assert gen.main(["--output", str(out)]) == 0
    fresh = out.read_text(encoding="utf-8")
    assert fresh == PAGE.read_text(encoding="utf-8"), \
        "docs/api.md is stale: run `python scripts/gen_api_docs.py` and commit docs/api.md"


@pytest.mark.slow
def test_check_mode_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path):
    stale = tmp_path / "api.md"
    stale.write_text(PAGE.read_text(encoding="utf-8").replace("zero-copy", "zero copy", 1), encoding="utf-8")
    run = [sys.executable, str(SCRIPT), "--check", "--output"]
    bad = subprocess.run([*run, str(stale)], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert bad.returncode == 1 and "is stale: run python scripts/gen_api_docs.py" in bad.stderr
    good = subprocess.run([*run, str(PAGE)], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize("module", ["bridge", "bridge.testing", "dsl", "dsl.simt", "dsl.tile"])
def test_every_exported_name_has_an_entry(module):
    import importlib
    mod = importlib.import_module(module)
    page = PAGE.read_text(encoding="utf-8")
    missing = [n for n in mod.__all__ if f"`{module}.{n}" not in page]
    assert not missing, f"{module}: exported but not in docs/api.md: {missing}"


@pytest.mark.slow
def test_the_integrations_are_documented_without_importing_torch_or_jax():
    page = PAGE.read_text(encoding="utf-8")
    for entry in ("### `dsl.torch.custom_op(", "### `dsl.jax.kernel_call(", "### `dsl.jax.check_faults()"):
        assert entry in page
    code = ("import runpy, sys; sys.argv = ['gen', '--check']; "
            f"sys.path.insert(0, {str(REPO)!r})\n"
            "try:\n    runpy.run_path(" + repr(str(SCRIPT)) + ", run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('torch' in sys.modules, 'jax' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_signatures_never_carry_memory_addresses(gen):
    def f(x=object()):  # noqa: B008 - the point: a default whose repr carries an address
        return x
    assert gen.signature(f) == "(x=<object object>)"
    assert " at 0x" not in PAGE.read_text(encoding="utf-8")
