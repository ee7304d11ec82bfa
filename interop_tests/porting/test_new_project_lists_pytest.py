"""`python -m dsl new` projects run their tests with pytest, which kernelbridge's base install does not
bring (issue 31): the project lists it in its own requirements-test.txt, and both the printed next steps
and the project's README install that file before running pytest."""
from __future__ import annotations

import argparse
import re

from dsl.scaffold import cmd_new, create


def _requirements(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_new_project_lists_pytest_in_its_own_requirements(tmp_path):
    root = create("proj", tmp_path, arrays="torch", model="tile")
    reqs = _requirements((root / "requirements-test.txt").read_text())
    assert any(re.fullmatch(r"pytest(\s*[<>=!~].*)?", r) for r in reqs), reqs
    assert "torch" in (root / "requirements-test.txt").read_text()


def test_next_steps_install_the_requirements_before_running_pytest(tmp_path, capsys):
    args = argparse.Namespace(name="proj", dir=str(tmp_path), arrays="cupy", model="simt")
    assert cmd_new(args) == 0
    out = capsys.readouterr().out
    install = out.index("pip install -r requirements-test.txt")
    assert install < out.index("python -m pytest")


def test_readme_installs_the_requirements_before_running_pytest(tmp_path):
    readme = (create("proj", tmp_path) / "README.md").read_text()
    assert readme.index("pip install -r requirements-test.txt") < readme.index("python -m pytest")
