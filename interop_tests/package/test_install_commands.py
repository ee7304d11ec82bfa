"""README command 2 installs the test tools without rebuilding the package (issue 31: `pip install -e
".[test]"` rebuilt the whole extension in a fresh isolated build environment, minutes on 2 cores), from
a requirements file that must stay the pyproject's `test` extra; CI runs the README's two commands as
written."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md must open with a bash block of set-up commands"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _requirements() -> list[str]:
    lines = (ROOT / "requirements-test.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_readme_command_two_installs_the_test_tools_without_reinstalling_the_package():
    cmd = _readme_commands()[1]
    assert "requirements-test.txt" in cmd and "pytest" in cmd, cmd
    assert not re.search(r"install\s+(-e\s+)?\.", cmd), f"command 2 must not rebuild the package: {cmd}"


def test_requirements_file_is_the_test_extra():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert _requirements() == extra


def test_ci_runs_both_readme_commands_as_written():
    ci = (ROOT / ".ci" / "run").read_text()
    one, two = _readme_commands()[:2]
    assert one in ci
    install, pytest_cmd = (part.strip() for part in two.split("&&"))
    assert install in ci and pytest_cmd in ci
    assert ci.index("jaxlib") < ci.index(one), "jax must be installed before command 1 builds the FFI handler"


def test_the_sdist_leaves_out_gpu_run_records_and_carries_the_sources(tmp_path):
    import subprocess
    import sys
    import tarfile
    code = ("import sys; from scikit_build_core.build import build_sdist; "
            "print(build_sdist(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    name = out.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        files = [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]
    assert not [f for f in files if f.startswith("docs/results")]
    for needed in ("pyproject.toml", "LICENSE", "README.md", "bridge/__init__.py", "dsl/__init__.py",
                   "cpp/include/kernelbridge/contract.hpp", "CMakeLists.txt"):
        assert needed in files, needed


def test_metadata_states_the_license_as_an_spdx_expression_and_has_classifiers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert any(c.startswith("Programming Language :: Python :: 3.12") for c in project["classifiers"])
