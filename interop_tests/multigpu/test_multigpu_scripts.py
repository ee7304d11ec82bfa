"""The multi-GPU example, torchrun example and benchmark: runnable everywhere (help, a plain 'no GPU' /
'needs 2 GPUs' message, kernels that compile), and on a machine with 2 or more GPUs they pass. The GPU
check reports multi-GPU steps it could not run as NOT RUN, never as passed."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge
from dsl import tile

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["examples/multi_gpu_split.py", "examples/torchrun_allreduce.py", "benchmarks/allreduce_pipeline.py"]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str((ROOT / path).parent))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str((ROOT / path).parent))
    return mod


@pytest.mark.parametrize("path", SCRIPTS)
@pytest.mark.slow
def test_help_runs(path):
    proc = run(path, "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


@pytest.mark.skipif(bridge.gpu_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("path", SCRIPTS[:2])
@pytest.mark.slow
def test_examples_say_plainly_that_there_is_no_gpu(path):
    proc = run(path, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{Path(path).stem} needs a CUDA GPU: ")


@pytest.mark.skipif(bridge.device_count() >= 2, reason="checks the message on a machine with fewer than 2 GPUs")
@pytest.mark.slow
def test_benchmark_says_it_needs_two_gpus_and_writes_its_json(tmp_path):
    out = tmp_path / "ar.json"
    proc = run("benchmarks/allreduce_pipeline.py", "--json", str(out), timeout=120)
    found = bridge.device_count()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"needs 2 GPUs, found {found}"
    data = json.loads(out.read_text())
    assert data["not_run"] == f"needs 2 GPUs, found {found}" and data["bars"] == [] and data["rows"] == []


def test_the_example_kernels_compile_and_simulate():
    split, allreduce = load("examples/multi_gpu_split.py"), load("examples/torchrun_allreduce.py")
    a = np.arange(1000, dtype=np.float32)
    x = np.zeros((4, 777), np.float32)
    assert ".entry" in split.half_square.ptx(a, a, arch="sm_90")
    assert ".entry" in split.row_softmax.ptx(x, tile.partition(x, (1, 1024)), arch="sm_90")
    y = np.zeros(1000, np.float32)
    allreduce.half_square.simulate(a, y)
    np.testing.assert_array_equal(y, 0.5 * a * a)
    z = np.zeros(2048, np.float32)
    allreduce.add_quarter.simulate(np.ones(2048, np.float32), tile.partition(z, (1024,)))
    np.testing.assert_array_equal(z, np.full(2048, 1.25, np.float32))
    allreduce.scale_into.simulate(z, y2 := np.zeros(2048, np.float32), np.float32(0.5))
    np.testing.assert_array_equal(y2, np.full(2048, 0.625, np.float32))


def test_the_single_gpu_reference_matches_the_steps_by_hand():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("the reference runs on a GPU with torch")
    allreduce = load("examples/torchrun_allreduce.py")
    x0, x1 = allreduce.rank_input(0, 8).astype(np.float64), allreduce.rank_input(1, 8).astype(np.float64)
    z = (0.5 * x0 * x0 + 0.25) + (0.5 * x1 * x1 + 0.25)
    z = 2 * (0.5 * (z / 2) ** 2 + 0.25)
    np.testing.assert_allclose(allreduce.reference(2, 8, 2, torch), z / 2, rtol=1e-6)


# --- scripts/gpu_check.py -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def summary(**steps) -> dict:
    base = {"tests": {"rc": 0, "seconds": 1, "passed": 10, "failed": 0, "errors": 0, "skipped": 13,
                      "not_run_multigpu": 13}}
    base.update(steps)
    return {"date": "d", "gpu": True, "gpus": 1, "doctor": [], "steps": base, "bars": []}


def test_multi_gpu_steps_on_one_gpu_are_reported_as_not_run_not_as_passed(gpu_check, capsys):
    why = {"rc": None, "not_run": "not run: needs 2 GPUs, found 1"}
    s = summary(**{"example:examples/multi_gpu_split.py": why, "bench:benchmarks/allreduce_pipeline.py": why})
    assert gpu_check.print_summary(s) == 0          # what could run passed; the rest is said plainly
    out = capsys.readouterr().out
    assert "  NOT RUN  example:examples/multi_gpu_split.py" in out and "not run: needs 2 GPUs, found 1" in out
    assert "skipped 13 (of which NOT RUN, needs 2 GPUs: 13)" in out
    last = out.strip().splitlines()[-1]
    assert last == ("VERDICT: PASS   performance bars met: 0/0   NOT RUN here (1 GPU(s)): 13 multigpu tests; "
                    "example:examples/multi_gpu_split.py; bench:benchmarks/allreduce_pipeline.py")
    assert " ok    example:examples/multi_gpu_split.py" not in out


def test_a_failed_multi_gpu_example_fails_the_check(gpu_check):
    bad = {"rc": 1, "seconds": 1, "pass_line": False}
    assert gpu_check.print_summary(summary(**{"example:examples/torchrun_allreduce.py": bad})) == 1


def test_junit_counts_multigpu_tests_that_did_not_run(gpu_check, tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite tests="3" failures="0" errors="0" skipped="2">'
                   '<testcase classname="m.t" name="ok"/>'
                   '<testcase classname="m.t" name="two"><skipped message="needs 2 GPUs, found 1"/></testcase>'
                   '<testcase classname="m.t" name="other"><skipped message="no torch"/></testcase>'
                   '</testsuite></testsuites>')
    c = gpu_check.junit_counts(xml)
    assert (c["passed"], c["skipped"], c["not_run_multigpu"]) == (1, 2, 1)


# --- on 2 or more GPUs: the examples and the benchmark pass ---------------------------------------

@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.nosanitize      # runs processes of its own
def test_multi_gpu_split_example_passes():
    proc = run("examples/multi_gpu_split.py", "--rows", "1000", "--cols", "333")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "PASS"
    assert lines[0].startswith(f"{bridge.device_count()} GPU(s): 1000 rows split into blocks of")


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.nosanitize
def test_torchrun_example_passes_on_every_gpu():
    pytest.importorskip("torch")
    n = bridge.device_count()
    proc = run("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
               "examples/torchrun_allreduce.py", "--steps", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert "PASS" in lines
    assert sum(f"/{n} on GPU" in line and line.endswith(" ok") for line in lines) == n


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.nosanitize
def test_allreduce_benchmark_reports_both_pipelines(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "ar.json"
    proc = run("benchmarks/allreduce_pipeline.py", "--quick", "--json", str(out), timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["rows"]]
    assert any(n.startswith("bridge pipeline per step") for n in names)
    assert any(n.startswith("torch-alone pipeline per step") for n in names)
    assert all(r["value"] > 0 for r in data["rows"][:2])
    assert len(data["bars"]) == 1 and data["bars"][0]["peer"] > 0
