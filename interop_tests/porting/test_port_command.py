"""`python -m dsl port`: the package's four C++ kernels round-trip into DSL files whose signatures
validate against the C++ contracts, with a generated test that fails until the body is written (and,
on a GPU, passes once it computes what the C++ kernel computes)."""
from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bridge
from bridge import _native
from bridge import testing as T
from bridge.fatbin import embedded_contracts
from dsl.port import PortError, port_files, rewrite_relations
from interop_tests.porting.cpp_ports import PORTS

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 18 s of a full run on 2 cores: nvcc builds, generated tests run

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("saxpy", "transpose", "block_reduce_sum", "legacy_softmax")
# what the user writes for GRID when the C++ contract derives none: the grid the C++ application uses
GRIDS = {"legacy_softmax": 'lambda s: (max(1, s["x"][0]),)'}


def bare_pytest_env() -> dict:
    """The environment of a generated test's own pytest run: no plugin autoloading. The generated
    tests use none, and the ones installed here (hypothesis, xdist, benchmark) cost ~0.8 s of start-up
    per run."""
    return dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")


def dsl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsl", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd or ROOT)


def cpp_contract(name: str) -> _native.Contract:
    return _native.Contract(embedded_contracts(bridge.cpp_kernels.path(name).read_bytes())[name])


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ported(tmp_path_factory, nvcc) -> Path:
    out = tmp_path_factory.mktemp("ported")
    for name in KERNELS:
        proc = dsl("port", f"cpp/kernels/{name}.cu", "--kernel", name, "-o", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"wrote {out / (name + '_port.py')}" in proc.stdout
    return out


@pytest.mark.parametrize("name", KERNELS)
def test_ported_signature_validates_against_the_cpp_contract(ported, name):
    port = getattr(load(ported / f"{name}_port.py"), name)
    T.check_compatible(cpp_contract(name), port)          # both ways, through the validator
    T.check_compatible(port, cpp_contract(name))
    ours = T.contract_of(port)
    theirs = cpp_contract(name)
    assert ours.block_exact == theirs.block_exact and ours.max_threads == theirs.max_threads
    assert ours.min_cc == theirs.min_cc == 80 and ours.domain == theirs.domain


def test_ported_files_say_what_they_are(ported):
    text = (ported / "saxpy_port.py").read_text()
    assert "THE BODY IS YOURS TO WRITE" in text
    assert "def saxpy(a: f32, x: simt.Array[f32], y: simt.DisjointSlice[f32]):" in text
    assert '@simt.kernel(launch_bounds=1024, min_cc=80, requires=["len(y) == len(x)"])' in text
    assert "#     if (i < n) y[i] = fmaf(a, x[i], y[i]);" in text        # the C++ body, quoted
    assert "# Note: 'n' is not an argument here: it is len(x)." in text
    transpose = (ported / "transpose_port.py").read_text()
    assert "def transpose(in_: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):" in transpose
    assert 'requires=["out.shape[0] == in_.shape[1]", "out.shape[1] == in_.shape[0]"]' in transpose
    softmax = (ported / "legacy_softmax_port.py").read_text()
    assert 'requires=["x.shape == y.shape", "x.shape[1] > 0"]' in softmax
    assert "takes its grid from the caller (no KB_GRID_FROM); set GRID in the test" in softmax


def test_generated_test_fails_until_the_body_is_written(ported):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           str(ported / "test_saxpy_port.py")], capture_output=True, text=True, timeout=600,
                          cwd=ported, env=bare_pytest_env())
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "PASSED test_saxpy_port.py::test_port_signature_matches_the_cpp_contract" in out
    assert "FAILED test_saxpy_port.py::test_port_is_written" in out
    assert "the body of saxpy is not written yet" in out
    if bridge.gpu_available():       # the stub computes nothing: the differential test fails
        assert "FAILED test_saxpy_port.py::test_port_matches_the_cpp_kernel" in out
    else:
        assert "SKIPPED" in out and "no CUDA device" in out


def fill_body(port_file: Path, name: str) -> None:
    """Do what the user does: write the body (here: the one of interop_tests/porting/cpp_ports.py) and
    delete the PORT_TODO line."""
    src = inspect.getsource(PORTS[name][0].pyfunc).splitlines()
    body = "\n".join(src[next(k for k, line in enumerate(src) if line.startswith("def ")) + 1:])
    text = port_file.read_text()
    text = re.sub(r"    # --- body: yours to write ---\n.*    # --- end of body ---\n", lambda _: body + "\n", text,
                  flags=re.S)
    text = re.sub(r"# Delete this line.*\nPORT_TODO = .*\n", "", text)
    text = text.replace("from dsl import", "WARPS = 8\nNEG_INF = float('-inf')\nfrom dsl import i32,", 1)
    port_file.write_text(text)


def give_grid(test: Path, name: str) -> None:
    """Do what the generated GRID comment asks when the C++ contract derives no grid."""
    text = test.read_text()
    text = re.sub(r"GRID = None   # PORT_TODO: .*\n", lambda _: f"GRID = {GRIDS[name]}\n", text)
    test.write_text(text)


def run_pytest(test: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(test)],
                          capture_output=True, text=True, timeout=600, cwd=test.parent, env=bare_pytest_env())


def run_written_port(ported: Path, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    for f in (f"{name}_port.py", f"test_{name}_port.py"):
        (tmp_path / f).write_text((ported / f).read_text())
    fill_body(tmp_path / f"{name}_port.py", name)
    test = tmp_path / f"test_{name}_port.py"
    tol = {"block_reduce_sum": "rtol=1e-4, atol=5e-2", "legacy_softmax": "ulps=4"}.get(name)
    if tol:                                            # what the generated comment says to do
        test.write_text(test.read_text().replace("trials=5,", f"trials=5, {tol},"))
    if name in GRIDS:
        give_grid(test, name)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(test)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=bare_pytest_env())


@pytest.mark.parametrize("name", KERNELS)
def test_a_written_port_passes_its_generated_test(ported, tmp_path, name):
    proc = run_written_port(ported, tmp_path, name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PASSED test_{name}_port.py::test_port_is_written" in proc.stdout
    assert f"PASSED test_{name}_port.py::test_port_signature_matches_the_cpp_contract" in proc.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("name", KERNELS)
def test_a_written_port_matches_the_cpp_kernel_through_its_generated_test_on_the_gpu(ported, tmp_path, name):
    proc = run_written_port(ported, tmp_path, name)
    assert f"PASSED test_{name}_port.py::test_port_matches_the_cpp_kernel" in proc.stdout, proc.stdout


def test_port_from_a_built_module_needs_no_compiler(tmp_path):
    fatbin = bridge.cpp_kernels.path("transpose")
    proc = dsl("port", str(fatbin), "--kernel", "transpose", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "transpose_port.py").read_text()
    assert "(no C++ source was given: pass the .cu file to quote its body here)" in text
    port = load(tmp_path / "transpose_port.py").transpose
    T.check_compatible(cpp_contract("transpose"), port)
    rel = os.path.relpath(fatbin.resolve(), tmp_path.resolve())   # relative to the test, however far
    assert f"CPP = HERE / {rel!r}" in (tmp_path / "test_transpose_port.py").read_text()
    proc = run_pytest(tmp_path / "test_transpose_port.py")        # reads the contract from the fatbin
    assert "PASSED test_transpose_port.py::test_port_signature_matches_the_cpp_contract" in proc.stdout, proc.stdout


@pytest.mark.parametrize("name", KERNELS)
def test_generated_test_holds_no_absolute_path_and_no_frozen_contract(ported, name):
    text = (ported / f"test_{name}_port.py").read_text()
    literals = [n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    absolute = [v for v in literals if os.path.isabs(v) or v.startswith("~")]
    assert not absolute, absolute                    # nothing of the machine that made it: the C++
    # file is named relative to the test, however far away it is
    assert f"CPP = HERE / {os.path.relpath(ROOT / 'cpp' / 'kernels' / f'{name}.cu', ported)!r}" in text
    assert '"version"' not in text and '"requires"' not in text and "CPP_CONTRACT" not in text
    assert f'load_cpp_contract(CPP, "{name}", includes=INCLUDES)' in text       # read when the test runs
    assert "assert_equivalent(cpp, port, trials=5, grid=GRID)" in text         # the grid, explicitly
    if name == "legacy_softmax":
        assert "GRID = None   # PORT_TODO: the grid the C++ application launches legacy_softmax with" in text
    else:
        assert "The C++ contract derives it from" in text and "\nGRID = None\n" in text


def test_generated_test_follows_its_project_and_reads_the_cpp_contract_when_it_runs(tmp_path, nvcc):
    app = tmp_path / "app"
    (app / "kernels").mkdir(parents=True)
    (app / "kernels" / "saxpy.cu").write_text((ROOT / "cpp" / "kernels" / "saxpy.cu").read_text())
    proc = dsl("port", str(app / "kernels" / "saxpy.cu"), "--kernel", "saxpy", "-o", str(app / "tests"))
    assert proc.returncode == 0, proc.stderr
    moved = tmp_path / "elsewhere" / "app"          # the project moves (or is checked out on another machine)
    moved.parent.mkdir()
    app.rename(moved)
    test = moved / "tests" / "test_saxpy_port.py"
    proc = run_pytest(test)
    assert "PASSED test_saxpy_port.py::test_port_signature_matches_the_cpp_contract" in proc.stdout, proc.stdout
    src = moved / "kernels" / "saxpy.cu"            # the C++ contract changes after the port was made
    src.write_text(src.read_text().replace('"len(y) == n")', '"len(y) == n", "n % 4 == 0")'))
    proc = run_pytest(test)
    assert "FAILED test_saxpy_port.py::test_port_signature_matches_the_cpp_contract" in proc.stdout, proc.stdout
    assert "n % 4 == 0" in proc.stdout


def test_a_port_of_a_kernel_without_grid_from_fails_until_its_grid_is_given(ported, tmp_path):
    for f in ("legacy_softmax_port.py", "test_legacy_softmax_port.py"):
        (tmp_path / f).write_text((ported / f).read_text())
    fill_body(tmp_path / "legacy_softmax_port.py", "legacy_softmax")
    test = tmp_path / "test_legacy_softmax_port.py"
    proc = run_pytest(test)
    assert "FAILED test_legacy_softmax_port.py::test_launch_grid_is_known" in proc.stdout, proc.stdout
    assert ("GRID is None, but the C++ contract has no grid_from (KB_GRID_FROM), so no grid can be derived: set "
            "GRID to the grid the C++ application launches legacy_softmax with") in proc.stdout
    give_grid(test, "legacy_softmax")
    proc = run_pytest(test)
    assert "PASSED test_legacy_softmax_port.py::test_launch_grid_is_known" in proc.stdout, proc.stdout


def test_port_files_take_relative_paths_only():
    contract = bridge.cpp_kernels.path("saxpy").read_bytes()
    with pytest.raises(PortError, match=r"cpp_path: expected a path relative to the test file's folder, got the "
                                        r"absolute '/opt/k.fatbin'"):
        port_files(embedded_contracts(contract)["saxpy"], None, None, "/opt/k.fatbin")


def test_port_refuses_unknown_kernels_and_overwriting_a_port(tmp_path, nvcc):
    proc = dsl("port", "cpp/kernels/saxpy.cu", "--kernel", "nope", "-o", str(tmp_path))
    assert proc.returncode == 2
    assert "error: no kernel 'nope' with a contract: cpp/kernels/saxpy.cu has saxpy" in proc.stderr
    assert dsl("port", "cpp/kernels/saxpy.cu", "--kernel", "saxpy", "-o", str(tmp_path)).returncode == 0
    (tmp_path / "saxpy_port.py").write_text("# my port\n")
    proc = dsl("port", "cpp/kernels/saxpy.cu", "--kernel", "saxpy", "-o", str(tmp_path))
    assert proc.returncode == 2 and "would overwrite" in proc.stderr and "--force" in proc.stderr
    assert (tmp_path / "saxpy_port.py").read_text() == "# my port\n"          # nothing lost
    assert dsl("port", "cpp/kernels/saxpy.cu", "--kernel", "saxpy", "-o", str(tmp_path), "--force").returncode == 0
    proc = dsl("port", str(tmp_path / "missing.cu"), "--kernel", "k")
    assert proc.returncode == 2 and "error: no such file:" in proc.stderr


def test_relations_are_rewritten_without_the_size_scalars():
    contract = _native.Contract(json.dumps({
        "version": 1, "kernel": "k", "args": [
            {"name": "x", "kind": "array", "dtype": "f32", "ndim": 2},
            {"name": "out", "kind": "array", "dtype": "f32", "ndim": 1, "access": "write"},
            {"name": "n", "kind": "scalar", "dtype": "i32"}, {"name": "m", "kind": "scalar", "dtype": "i64"},
            {"name": "k", "kind": "scalar", "dtype": "i32"}],
        "requires": ["x.shape[0] == n and x.shape[1] == m", "len(out) == (n + 1) * m", "0 < k <= n",
                     "x.shape == (n, m)"]}))
    requires, dropped = rewrite_relations(contract)
    assert dropped == {"n": "x.shape[0]", "m": "x.shape[1]"}
    assert requires == ["len(out) == (x.shape[0] + 1) * x.shape[1]", "0 < k", "k <= x.shape[0]"]


def test_a_dtype_the_dsl_lacks_is_a_port_error():
    contract = json.dumps({"version": 1, "kernel": "k", "args": [
        {"name": "z", "kind": "array", "dtype": "c64", "ndim": 1, "access": "write"}]})
    with pytest.raises(PortError, match=r"k: argument 'z' \(#0\): the DSL has no c64 type"):
        port_files(contract, None, None, "k.fatbin")
