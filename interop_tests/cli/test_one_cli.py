"""One command line: `kernelbridge` and `python -m dsl` are one program with every command (demo, doctor,
compile, port, new, cache, version); `python -m bridge` runs the runtime-only ones and, for a DSL command,
names the command line to use (exit 2, no DSL import); `--version` works on every entry point; and
`compile FILE::K` imports FILE without running its `__main__` block."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import bridge

ROOT = Path(__file__).resolve().parents[2]
ALL_COMMANDS = {"demo", "doctor", "compile", "port", "new", "cache", "version"}
RUNTIME_ONLY = {"doctor", "version"}
VERSION_LINE = f"kernelbridge {bridge.__version__}"


def _python(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=str(cwd),
                          env=env if env is not None else dict(os.environ))


def _commands(help_text: str) -> set[str]:
    """The command names in a parser's usage line `{a,b,c}`."""
    m = re.search(r"\{([a-z,]+)\}", help_text)
    assert m, help_text
    return set(m.group(1).split(","))


# --------------------------------------------------------------------- the entry points
def test_console_scripts_and_python_m_run_the_same_main():
    import bridge.__main__ as bridge_main
    import bridge.cli
    import bridge.doctor
    import dsl.__main__ as dsl_main
    import dsl.cli
    scripts = {ep.name: ep.load() for ep in entry_points(group="console_scripts")
               if ep.dist is not None and ep.dist.metadata["Name"] == "kernelbridge"}
    assert scripts == {"kernelbridge": dsl.cli.main, "kernelbridge-doctor": bridge.doctor.main}
    assert dsl_main.main is dsl.cli.main          # `python -m dsl` is the `kernelbridge` program
    assert bridge_main.main is bridge.cli.main


@pytest.mark.slow
@pytest.mark.parametrize("entry", [("-m", "dsl"), ("-m", "bridge"), ("-m", "dsl.cli")],
                         ids=["python -m dsl", "python -m bridge", "kernelbridge (dsl.cli)"])
@pytest.mark.parametrize("how", ["--version", "version"])
def test_every_entry_point_prints_the_package_version(entry, how):
    proc = _python(*entry, how)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == VERSION_LINE + "\n"
    assert re.fullmatch(r"kernelbridge \d+\.\d+\.\d+\S*", proc.stdout.strip())


@pytest.mark.slow
def test_the_installed_kernelbridge_script_prints_the_version():
    exe = shutil.which("kernelbridge")
    if exe is None:
        pytest.skip("the kernelbridge console script is not on PATH (its entry point is checked above)")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, VERSION_LINE + "\n"), proc.stderr


def test_kernelbridge_and_python_m_dsl_have_every_command(capsys):
    from dsl import cli
    for prog in ("kernelbridge", "python -m dsl"):
        with pytest.raises(SystemExit) as info:
            cli.main(["--help"], prog=prog)
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {prog} ") and _commands(out) == ALL_COMMANDS


def test_the_version_command_prints_the_version(capsys):
    from dsl import cli
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out == VERSION_LINE + "\n"


def test_bridge_knows_every_dsl_command_by_name(capsys):
    from bridge import cli
    assert set(cli.DSL_COMMANDS) | set(cli.RUNTIME_COMMANDS) == ALL_COMMANDS
    assert set(cli.RUNTIME_COMMANDS) == RUNTIME_ONLY
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert _commands(capsys.readouterr().out) == ALL_COMMANDS


# One child runs each DSL command through `python -m bridge` (with options only the DSL's parser knows)
# and reports the exit status, stderr and whether `dsl` was imported.
_BRIDGE_RUNS = r"""
import contextlib, io, json, runpy, sys
results = {}
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            sys.argv = ["bridge", *argv]
            runpy.run_module("bridge", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results[argv[0]] = {"rc": code, "stderr": err.getvalue(), "dsl": "dsl" in sys.modules}
print(json.dumps(results))
"""
DSL_ARGV = [["demo"], ["compile", "k.py::saxpy", "--arch", "sm_80"], ["port", "k.cu", "--kernel", "saxpy"],
            ["new", "proj", "--model", "tile"], ["cache", "list"]]


@pytest.mark.slow
def test_python_m_bridge_points_a_dsl_command_to_the_full_program():
    proc = _python("-c", _BRIDGE_RUNS, json.dumps(DSL_ARGV))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    assert set(results) == ALL_COMMANDS - RUNTIME_ONLY
    for cmd, r in results.items():
        assert r["rc"] == 2, (cmd, r)
        assert f"run `kernelbridge {cmd}` or `python -m dsl {cmd}`" in r["stderr"], (cmd, r)
        assert "invalid choice" not in r["stderr"] and "unrecognized" not in r["stderr"], (cmd, r)
        assert not r["dsl"], f"python -m bridge {cmd} imported the DSL"


# --------------------------------------------------------------------- compile FILE::K
USER_FILE = '''
import pathlib
from helper_consts import MARKER_NAME     # a neighbour of this file, importable as under `python FILE`
from dsl import f32, simt

@simt.kernel
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]

print("module body ran as", __name__)

if __name__ == "__main__":
    pathlib.Path(__file__).with_name(MARKER_NAME).write_text("the __main__ block ran")
'''


@pytest.fixture()
def user_file(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "helper_consts.py").write_text('MARKER_NAME = "MARKER"\n')
    (src / "user_kernels.py").write_text(USER_FILE)
    return src / "user_kernels.py"


@pytest.mark.slow
def test_compile_imports_the_file_without_running_its_main_block(user_file, tmp_path):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = dict(os.environ, KB_CACHE_DIR=str(tmp_path / "cache"))
    proc = _python("-m", "dsl", "compile", f"{user_file}::copy", "--arch", "sm_80", cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (user_file.parent / "MARKER").exists(), "compile ran the file's __main__ block"
    assert "module body ran as _kb_cli_user_kernels" in proc.stderr      # imported, under another name
    assert proc.stdout.startswith("//") and ".visible .entry" in proc.stdout
    assert "module body ran" not in proc.stdout                         # stdout is only the PTX
    # the control: run as a script, the same file does write the marker
    ran = _python(str(user_file), cwd=elsewhere, env=env)
    assert ran.returncode == 0, ran.stderr
    assert (user_file.parent / "MARKER").read_text() == "the __main__ block ran"


def test_the_user_file_loader_never_names_a_module_main(user_file):
    from dsl.userfile import module_name
    assert module_name(user_file, "_kb_cli_") == "_kb_cli_user_kernels"
    assert module_name("dir/2-main.py", "_kb_aot_") == "_kb_aot__2_main"
    with pytest.raises(ValueError, match="prefix must be non-empty"):
        module_name("__main__.py", "")
