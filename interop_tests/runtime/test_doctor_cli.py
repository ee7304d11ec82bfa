"""The doctors tell the truth: `python -m bridge doctor` (runtime half, no DSL import) and
`python -m dsl doctor` / `kernelbridge doctor` (full). They always run to one verdict and exit 0 on a
machine without a GPU; `--json` gives the same report as data; `--help` / `--version` run no report.

Key lines are pinned against a controlled environment: fake tools named by KB_* overrides, and facts
read without the code under test (the llvmlite version, whether nvcc is on this machine).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bridge
from bridge.doctor import Section, compatibility_section, coverage

HAVE_NVCC = bool(shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"))
SECTIONS = {"format", "doctor", "kernelbridge", "driver", "toolkit", "compatibility", "cpp_kernels", "llvm",
            "cache", "overrides", "peers", "foreign", "problems", "warnings", "verdict", "exit_status"}
ITEMS = {"nvcc", "ptxas", "cuobjdump", "nvdisasm", "compute-sanitizer", "libdevice", "cuda-include",
         "nvjitlink"}


def _run(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else dict(os.environ))


def _fake_nvcc(tmp_path: Path, release: str = "12.4") -> Path:
    fake = tmp_path / "fakebin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.99'\n")
    fake.chmod(0o755)
    return fake


def _verdict(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert len(lines) == 1, out
    return lines[0]


# Each doctor run imports the peer libraries it reports on (torch, jax: most of its ~2 s), so the report
# tests share runs: one child runs the runtime doctor both ways (`python -m bridge doctor` and the
# `kernelbridge-doctor` entry point, bridge.doctor.main) under every override the tests below pin, and
# one child runs `python -m dsl doctor` and `python -m dsl doctor --json`. Each run's stdout, stderr,
# exit status and the dsl modules imported by then are reported separately; each test asserts its own.
_DOCTOR_RUNS = r"""
import contextlib, io, json, runpy, sys
runs = json.loads(sys.argv[1])
results = []
for module, argv in runs:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if module == "bridge.doctor:main":
                from bridge.doctor import main
                code = main(argv)
            else:                                    # what `python -m <module> <argv>` runs
                sys.argv = [module, *argv]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
        except SystemExit as exc:
            code = exc.code
    results.append({"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                    "dsl": sorted(m for m in sys.modules if m == "dsl" or m.startswith("dsl."))})
sys.__stdout__.write(json.dumps(results) + "\n")
"""


def _doctor_runs(runs: list[tuple[str, list[str]]], env: dict) -> list[tuple[subprocess.CompletedProcess, list]]:
    """Run each (module, argv) doctor in order in ONE fresh interpreter; one CompletedProcess-like
    result per run (args, returncode, stdout, stderr) plus the dsl modules imported after it."""
    proc = _run("-c", _DOCTOR_RUNS, json.dumps(runs), env=env)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    return [(subprocess.CompletedProcess([m, *a] if ":" in m else [sys.executable, "-m", m, *a], r["rc"],
                                         r["stdout"], r["stderr"] + proc.stderr), r["dsl"])
            for (m, a), r in zip(runs, results)]


@pytest.fixture(scope="module")
def bridge_doctor(tmp_path_factory) -> dict:
    """The runtime doctor, as `python -m bridge doctor` and as bridge.doctor.main([]) (the console
    script), with a fake nvcc, a missing ptxas and a misspelt setting: {"cli": ..., "main": ...}."""
    fake = _fake_nvcc(tmp_path_factory.mktemp("doctor"))
    env = dict(os.environ, KB_NVCC=str(fake), KB_PTXAS="/nonexistent/ptxas", KB_NVCCC="/x")
    (main, dsl_after_main), (cli, _) = _doctor_runs([("bridge.doctor:main", []), ("bridge", ["doctor"])], env)
    return {"fake": fake, "cli": cli, "main": main, "dsl_after_main": dsl_after_main}


@pytest.fixture(scope="module")
def dsl_doctor() -> dict:
    """`python -m dsl doctor` and `python -m dsl doctor --json`: {"text": ..., "json": ...}."""
    (text, _), (as_json, _) = _doctor_runs([("dsl", ["doctor"]), ("dsl", ["doctor", "--json"])],
                                           dict(os.environ))
    return {"text": text, "json": as_json}


@pytest.mark.slow
def test_bridge_doctor_reports_tools_as_the_locator_finds_them(bridge_doctor):
    fake, proc = bridge_doctor["fake"], bridge_doctor["cli"]
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"nvcc: {fake} (found by KB_NVCC; release 12.4, V12.4.99)" in out
    assert "ptxas: not found: KB_PTXAS=/nonexistent/ptxas is not an executable; to get it: " in out
    assert f"  KB_NVCC={fake} (nvcc executable)" in out
    assert "driver vs toolkit: toolkit CUDA 12.4 (nvcc); no driver to compare" in out or bridge.gpu_available()
    verdict = _verdict(out)
    assert "ptxas not found (KB_PTXAS=/nonexistent/ptxas is not an executable)" in verdict
    if bridge.gpu_available():
        assert "GPU 0:" in out and verdict.startswith("verdict: GPU ready, with problems:")
    else:
        assert "CUDA driver: none (" in out and verdict.startswith("verdict: no GPU")
    assert "run `python -m dsl doctor`" in out           # points to the full doctor


@pytest.mark.slow
def test_bridge_doctor_never_imports_the_dsl(bridge_doctor):
    proc = bridge_doctor["main"]                         # bridge.doctor.main([]) in a fresh interpreter
    assert proc.returncode == 0, proc.stderr
    assert bridge_doctor["dsl_after_main"] == [], "dsl imported"
    assert "verdict:" in proc.stdout


@pytest.mark.slow
def test_full_doctor_pins_nvptx_cpp_kernels_and_cache(kb_test_cache_dir, dsl_doctor):
    import llvmlite
    proc = dsl_doctor["text"]
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"LLVM NVPTX: llvmlite {llvmlite.__version__}, LLVM " in out
    nvptx = next(line for line in out.splitlines() if line.startswith("LLVM NVPTX:"))
    assert ": NVPTX ok (PTX for sm_75, sm_80" in nvptx and "sm_90" in nvptx
    assert f"DSL cache: {kb_test_cache_dir} (from KB_CACHE_DIR)" in out
    if HAVE_NVCC:
        modules = sorted(["block_reduce_sum", "legacy_softmax", "saxpy", "transpose", *bridge.cpp_kernels.LLM_KERNELS])
        assert f"C++ kernels installed: {', '.join(modules)}" in out
        assert "  saxpy: SASS sm_80, sm_90; PTX compute_90" in out
    else:
        assert "C++ kernels NOT built: " in out and "C++ kernels not built" in _verdict(out)
    assert "(the DSL's part" not in out                  # this IS the full doctor


@pytest.mark.slow
def test_unknown_kb_setting_is_flagged_as_a_possible_typo(bridge_doctor):
    proc = bridge_doctor["cli"]
    assert proc.returncode == 0, proc.stderr
    assert "  KB_NVCCC=/x (not a setting kernelbridge knows: a typo?)" in proc.stdout
    assert "warning: KB_NVCCC is set but kernelbridge does not read it" in proc.stdout


@pytest.mark.slow
def test_doctor_json_schema(kb_test_cache_dir, dsl_doctor):
    proc = dsl_doctor["json"]
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == SECTIONS
    assert report["format"] == 1 and report["doctor"] == "full" and report["exit_status"] == 0
    assert report["kernelbridge"]["version"] == bridge.__version__ and report["kernelbridge"]["native"]["ok"]
    assert set(report["toolkit"]) == ITEMS
    for name, entry in report["toolkit"].items():
        assert set(entry) == {"path", "found_by", "problem", "hint", "version"}, name
        assert (entry["path"] is None) == (entry["found_by"] == "not found"), name
        assert (entry["hint"] is None) == (entry["path"] is not None), name
    assert isinstance(report["driver"]["available"], bool) and isinstance(report["driver"]["gpus"], list)
    assert report["driver"]["available"] == bridge.gpu_available()
    assert report["compatibility"]["status"] in ("ok", "toolkit newer (minor)", "toolkit newer (major)",
                                                 "no driver", "unknown")
    assert isinstance(report["cpp_kernels"]["installed"], bool) and report["cpp_kernels"]["installed"] == HAVE_NVCC
    if HAVE_NVCC:
        assert report["cpp_kernels"]["modules"]["saxpy"]["sass"] == [80, 90]
        assert report["cpp_kernels"]["modules"]["saxpy"]["ptx"] == [90]
        assert report["cpp_kernels"]["build_info"]["cpp_kernels"]["built"] is True
    assert report["llvm"]["nvptx"] is True
    assert report["llvm"]["archs"]["sm_90"] == {"ok": True, "ptx_isa": "8.4", "error": None}
    assert report["cache"]["dir"] == str(kb_test_cache_dir) and report["cache"]["from"] == "KB_CACHE_DIR"
    assert report["overrides"]["KB_CACHE_DIR"] == {"value": str(kb_test_cache_dir),
                                                   "meaning": "DSL disk cache directory"}
    assert set(report["peers"]) >= {"torch", "cupy", "jax", "numba", "cuda.bindings"}
    assert isinstance(report["problems"], list) and report["verdict"]


# The command lines that run no report, in one child too (runtime-only ones first: the demo's check is
# that nothing up to it imported the DSL).
_CLI_RUNS = [("bridge", ["doctor", "--help"]), ("bridge", ["doctor", "--version"]), ("bridge", ["demo"]),
             ("bridge", ["frobnicate"]), ("dsl", ["doctor", "--help"]), ("dsl.cli", ["doctor", "--help"]),
             ("dsl", ["doctor", "--version"]), ("dsl.cli", ["--version"])]


@pytest.fixture(scope="module")
def cli_runs() -> dict:
    """(module, *argv) -> (result, dsl modules imported by then) of every command line in _CLI_RUNS."""
    return {(m, *a): r for (m, a), r in zip(_CLI_RUNS, _doctor_runs(_CLI_RUNS, dict(os.environ)))}


@pytest.mark.parametrize("cmd", [("-m", "bridge", "doctor"), ("-m", "dsl", "doctor"), ("-m", "dsl.cli", "doctor")])
def test_help_exits_zero_without_running_the_report(cmd, cli_runs):
    proc, _ = cli_runs[(*cmd[1:], "--help")]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ") and "--json" in proc.stdout and "--version" in proc.stdout
    assert "verdict:" not in proc.stdout and "CUDA driver:" not in proc.stdout


@pytest.mark.parametrize("cmd", [("-m", "bridge", "doctor"), ("-m", "dsl", "doctor"), ("-m", "dsl.cli",)])
def test_version_is_the_package_version(cmd, cli_runs):
    proc, _ = cli_runs[(*cmd[1:], "--version")]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"kernelbridge {bridge.__version__}"
    assert importlib.metadata.version("kernelbridge") == bridge.__version__   # pyproject reads the same


def test_bridge_demo_points_to_the_full_program_without_importing_dsl(cli_runs):
    proc, dsl_modules = cli_runs[("bridge", "demo")]
    assert dsl_modules == [], "dsl imported"
    assert proc.returncode == 2
    assert "run `kernelbridge demo` or `python -m dsl demo`" in proc.stderr


def test_unknown_subcommand_is_a_usage_error(cli_runs):
    proc, _ = cli_runs[("bridge", "frobnicate")]
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# --------------------------------------------------------------------- rules, on synthetic data
def _driver(api: int | None) -> Section:
    return Section("driver", {"available": api is not None, "api_version": api,
                              "version": f"{api // 1000}.{api % 1000 // 10}" if api else None, "gpus": []})


def _tools(release: str | None) -> Section:
    v = f"release {release}, V{release}.1" if release else None
    return Section("toolkit", {"ptxas": {"version": v}, "nvcc": {"version": None}})


@pytest.mark.parametrize("api, release, status, problem", [
    (13000, "13.0", "ok", False),
    (13020, "13.0", "ok", False),
    (13000, "13.5", "toolkit newer (minor)", False),
    (12080, "13.0", "toolkit newer (major)", True),
    (None, "13.0", "no driver", False),
    (13000, None, "unknown", False),
])
def test_driver_vs_toolkit_compatibility(api, release, status, problem):
    s = compatibility_section(_driver(api), _tools(release))
    assert s.data["status"] == status
    assert bool(s.problems) == problem
    assert s.lines[0].startswith("driver vs toolkit: ")


@pytest.mark.parametrize("cc, expected", [
    ((9, 0), "SASS sm_90"), ((8, 6), "SASS sm_80"), ((8, 0), "SASS sm_80"),
    ((10, 0), "PTX compute_90 (JIT)"), ((12, 0), "PTX compute_90 (JIT)"), ((7, 5), "NOT loadable"),
])
def test_fatbin_coverage_rules(cc, expected):
    assert coverage([80, 90], [90], cc) == expected


@pytest.mark.parametrize("api, isa", [(13000, 90), (12040, 84), (12060, 85), (12070, 85), (12080, 87),
                                      (14000, 90), (10020, 0)])
def test_driver_ptx_isa_table(api, isa):
    from dsl.doctor import driver_ptx_isa
    assert driver_ptx_isa(api) == isa


@pytest.mark.gpu
def test_full_doctor_on_the_gpu_machine_is_ready():
    """H200, driver 580 (CUDA 13.0), toolkit 13.0: everything must line up."""
    proc = _run("-m", "dsl", "doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    gpu = report["driver"]["gpus"][0]
    cc = gpu["cc"][0] * 10 + gpu["cc"][1]
    assert report["llvm"]["gpus"]["0"]["ok"] is True, report["llvm"]["gpus"]
    assert report["compatibility"]["status"] == "ok", report["compatibility"]
    assert report["cpp_kernels"]["modules"]["saxpy"]["gpus"]["0"] == f"SASS sm_{cc}"
    assert report["toolkit"]["nvjitlink"]["path"] is not None
    assert report["verdict"].startswith("ready: "), report["problems"]
