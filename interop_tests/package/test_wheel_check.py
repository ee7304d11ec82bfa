"""The wheel check CI runs (scripts/wheel_check.py, issue 31) and the cibuildwheel configuration agree,
and the check's gates can fail: a wrong file list, a manylinux tag newer than the bar, an import from
the checkout. The check itself (a wheel build, auditwheel, a fresh venv: 1-2 minutes) runs in .ci/run,
not here."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CIBW = PYPROJECT["tool"]["cibuildwheel"]


def _script():
    spec = importlib.util.spec_from_file_location("kb_wheel_check", ROOT / "scripts" / "wheel_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wc = _script()

GOOD = {
    "bridge/__init__.py": "", "bridge/py.typed": "", "dsl/__init__.py": "", "dsl/py.typed": "",
    "bridge/_native.cpython-311-x86_64-linux-gnu.so": "ELF",
    "bridge/cmake/kernelbridgeConfig.cmake": "", "bridge/cmake/kernelbridge.cmake": "",
    "bridge/include/kernelbridge/contract.hpp": "", "dsl/templates/project/pytest.ini.in": "",
    "bridge/kernels/saxpy.fatbin": "fatbin",
    "bridge/_build_info.json": json.dumps({"cpp_kernels": {"built": True, "modules": ["saxpy"]}}),
    "kernelbridge-0.1.0.dist-info/METADATA": "", "kernelbridge-0.1.0.dist-info/RECORD": "",
}


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "kernelbridge-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_cibuildwheel_builds_exactly_the_python_versions_the_classifiers_name():
    built = sorted(int(m) for sel in CIBW["build"] for m in re.findall(r"^cp3(\d+)-\*$", sel))
    classified = sorted(int(m) for c in PYPROJECT["project"]["classifiers"]
                        for m in re.findall(r"^Programming Language :: Python :: 3\.(\d+)$", c))
    assert len(built) == len(CIBW["build"]), CIBW["build"]
    assert built == classified == [10, 11, 12, 13]
    assert PYPROJECT["project"]["requires-python"] == f">=3.{built[0]}"


def test_cibuildwheel_uses_the_manylinux_2_28_image_and_skips_musllinux_and_pypy():
    assert CIBW["linux"]["manylinux-x86_64-image"] == "manylinux_2_28"
    assert "*-musllinux_*" in CIBW["skip"] and "pp*" in CIBW["skip"]
    assert wc.glibc_of("manylinux_2_28_x86_64") <= wc.glibc_of(wc.NEWEST_PLAT + "_x86_64")


def test_cibuildwheel_and_ci_run_the_same_installed_check():
    assert CIBW["test-command"] == "python {project}/scripts/wheel_check.py --installed"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\npython scripts/wheel_check.py\n" in ci
    assert ci.index("python scripts/wheel_check.py") > ci.index("python -m pytest"), "the wheel comes after the tests"


def test_the_script_checks_the_packages_the_wheel_is_built_from():
    assert list(wc.PACKAGES) == PYPROJECT["tool"]["scikit-build"]["wheel"]["packages"]


def test_the_install_page_states_both_tags_and_the_reason():
    page = (ROOT / "docs" / "install.md").read_text()
    assert wc.NEWEST_PLAT in page and "manylinux_2_28" in page and "scripts/wheel_check.py" in page
    assert "GLIBC_2.34" in page and "GLIBCXX_3.4.29" in page


def test_a_complete_wheel_has_no_problems(tmp_path):
    assert wc.wheel_problems(_wheel(tmp_path, GOOD)) == []


@pytest.mark.parametrize("change, expected", [
    ({"bridge/_native.cpython-311-x86_64-linux-gnu.so": None}, "missing bridge/_native.cpython-*.so"),
    ({"bridge/kernels/saxpy.fatbin": None}, "missing bridge/kernels/saxpy.fatbin"),
    ({"bridge/include/kernelbridge/contract.hpp": None}, "missing bridge/include/kernelbridge/contract.hpp"),
    ({"bridge/__pycache__/array.cpython-311.pyc": ""}, "unexpected bridge/__pycache__/array.cpython-311.pyc"),
    ({"dsl/stale.pyc": ""}, "unexpected dsl/stale.pyc"),
    ({"interop_tests/conftest.py": ""}, "unexpected interop_tests/conftest.py"),
    ({"kernelbridge.libs/libcuda-1a2b.so.1": ""}, "a library grafted by auditwheel"),
])
def test_the_file_list_names_what_is_missing_or_must_not_ship(tmp_path, change, expected):
    files = dict(GOOD)
    for name, text in change.items():
        if text is None:
            del files[name]
        else:
            files[name] = text
    problems = wc.wheel_problems(_wheel(tmp_path, files))
    assert len(problems) == 1 and expected in problems[0], problems


SHOW = """
kernelbridge-0.1.0-cp311-cp311-linux_x86_64.whl is consistent with the
following platform tag: "manylinux_2_35_x86_64".

The wheel references external versioned symbols in these
system-provided shared libraries: libc.so.6 with versions {'GLIBC_2.35'}
"""


def test_the_tag_auditwheel_shows_is_read_even_across_a_wrapped_line():
    assert wc.plat_of(SHOW) == "manylinux_2_35_x86_64"
    with pytest.raises(wc.WheelCheckError, match="no platform tag"):
        wc.plat_of("kernelbridge-0.1.0-cp311-cp311-linux_x86_64.whl is consistent with nothing")


def test_a_tag_newer_than_the_bar_fails_before_any_repair(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(wc, "_run", lambda argv, **kw: calls.append(argv) or SHOW)
    with pytest.raises(wc.WheelCheckError, match=r"only be tagged manylinux_2_35_x86_64; at most manylinux_2_34"):
        wc.tag_and_repair(tmp_path / "tools" / "bin" / "python", tmp_path / "k.whl", tmp_path / "out",
                          "manylinux_2_34")
    assert [Path(c[0]).name for c in calls] == ["auditwheel"] and calls[0][1] == "show"


def test_a_plain_linux_tag_is_not_accepted(tmp_path, monkeypatch):
    monkeypatch.setattr(wc, "_run", lambda argv, **kw: SHOW.replace("manylinux_2_35_x86_64", "linux_x86_64"))
    with pytest.raises(wc.WheelCheckError, match="only be tagged linux_x86_64"):
        wc.tag_and_repair(tmp_path / "tools" / "bin" / "python", tmp_path / "k.whl", tmp_path / "out",
                          "manylinux_2_34")


def test_a_work_folder_inside_the_checkout_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        wc.main(["--work", str(ROOT / "build" / "wheel_check")])
    assert exc.value.code == 2 and "--work: expected a folder outside the checkout" in capsys.readouterr().err


@pytest.mark.slow       # imports the package in a subprocess
def test_the_installed_check_refuses_a_package_imported_from_the_checkout(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "wheel_check.py"), "--installed"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"bridge was imported from {ROOT / 'bridge' / '__init__.py'}, not from" in p.stderr
    assert "kernelbridge demo" not in p.stdout, "the demo must not run once the import check failed"
