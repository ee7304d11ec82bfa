"""benchmarks/install_time.py measures issue 31's install and test-time bars into one JSON record, and
benchmarks/write_docs.py renders that record as the CPU section of docs/benchmarks.md. The real
measurement rebuilds the extension (minutes); here: its dry run, its steps with stand-in commands, the
PASS/FAIL rules, and the rendering of a hand-written record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BARS = {"cold_no_toolkit": 60, "cold_toolkit": 90, "command2_install": 30, "quick_tests": 180}   # issue 31


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


it = _bench("install_time")
wd = _bench("write_docs")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_steps_carry_the_bars_of_issue_31_and_the_cold_builds_come_before_the_tests():
    assert {name: bar for name, (_, _, _, bar) in it.STEPS.items()} == BARS
    assert list(it.STEPS) == ["cold_no_toolkit", "cold_toolkit", "command2_install", "quick_tests"]
    assert it.STEPS["cold_no_toolkit"][2] == {"KB_CUDA_HOME": "none"}


def test_the_build_folder_is_the_editable_installs_own(tmp_path):
    tag = it.build_dir()
    assert tag.parent == ROOT / "build" and tag.name.startswith(f"cp{sys.version_info.major}{sys.version_info.minor}-")
    if (ROOT / "build").is_dir() and any((ROOT / "build").glob("cp3*")):
        assert tag.is_dir(), f"{tag} is not among {sorted(p.name for p in (ROOT / 'build').iterdir())}"


@pytest.mark.slow       # a subprocess that runs git, cmake and c++ --version
def test_a_dry_run_prints_every_command_builds_nothing_and_marks_its_record(tmp_path):
    before = it.build_dir().stat().st_mtime_ns if it.build_dir().exists() else None
    out = tmp_path / "dry.json"
    p = _run("benchmarks/install_time.py", "--dry-run", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    record = json.loads(out.read_text())
    assert record["dry_run"] is True and record["kind"] == "cpu_install"
    assert [s["name"] for s in record["steps"]] == list(BARS)
    assert all(s["seconds"] is None and s["pass"] is None for s in record["steps"])
    commands = {s["name"]: s["command"] for s in record["steps"]}
    assert commands["cold_no_toolkit"].startswith(f"rm -rf build/{it.build_dir().name}; KB_CUDA_HOME=none python -m pip")
    assert commands["quick_tests"] == 'python -m pytest -m "not slow" -q'
    assert record["machine"]["cores"] == os.cpu_count() and "load average" in record["uptime_before"]
    assert (it.build_dir().stat().st_mtime_ns if it.build_dir().exists() else None) == before


def test_unknown_steps_are_refused_by_name():
    with pytest.raises(SystemExit) as exc:
        it.main(["--steps", "cold_toolkit,warm_install", "--dry-run"])
    assert exc.value.code == 2


@pytest.mark.parametrize("code, bar, passed, note", [
    ("print('x'); print('7 passed in 1.00s')", 180.0, True, ""),
    ("import sys; print('boom'); sys.exit(3)", 180.0, False, "exit code 3"),
    ("import time; time.sleep(0.3); print('7 passed in 1.00s')", 0.1, False, ""),    # over its bar
])
def test_a_step_passes_only_when_it_succeeds_within_its_bar(monkeypatch, code, bar, passed, note):
    monkeypatch.setitem(it.STEPS, "quick_tests", ("quick test subset", [sys.executable, "-c", code], {}, bar))
    step = it.run_step("quick_tests", dry=False)
    assert step["pass"] is passed and step["note"] == note and step["rc"] == (0 if passed or not note else 3)
    assert isinstance(step["seconds"], float) and step["seconds"] >= 0
    assert step["summary"] == ("boom" if note else "7 passed in 1.00s")
    assert ("output_tail" in step) == bool(note)


NVCC = {"nvcc": {"path": "/usr/local/cuda-13.0/bin/nvcc"}, "cpp_kernels": {"built": True}}
NO_NVCC = {"nvcc": {"path": None}, "cpp_kernels": {"built": False}}


@pytest.mark.parametrize("name, info, note", [
    ("cold_toolkit", NVCC, ""),
    ("cold_no_toolkit", NO_NVCC, ""),
    ("cold_no_toolkit", NVCC, "nvcc was found (/usr/local/cuda-13.0/bin/nvcc): not a build without a toolkit"),
    ("cold_toolkit", NO_NVCC, "the C++ kernels were not built: not a build with a toolkit"),
])
def test_a_build_counts_only_if_it_built_what_its_name_says(name, info, note):
    step = {"rc": 0, "seconds": 10.0, "bar_s": 60.0}
    it._judge(name, step, {"native": "/x/_native.so", "build_info": info})
    assert step["note"] == note and step["pass"] is (not note)
    assert step["cpp_kernels_built"] is info["cpp_kernels"]["built"]


def _record(**changes) -> dict:
    steps = [
        {"name": "cold_no_toolkit", "title": "cold install, no CUDA toolkit", "command": "rm -rf b; pip a",
         "bar_s": 60.0, "seconds": 37.1, "rc": 0, "pass": True, "note": "", "load_before": [0.05, 0.1, 0.2],
         "load_after": [1.52, 0.5, 0.3], "nvcc": None, "cpp_kernels_built": False},
        {"name": "quick_tests", "title": "quick test subset", "command": 'python -m pytest -m "not slow" -q',
         "bar_s": 180.0, "seconds": 201.5, "rc": 0, "pass": False, "note": "", "load_before": [0.4, 0.1, 0.2],
         "load_after": [2.0, 1.0, 0.5], "summary": "2101 passed, 40 skipped in 199.80s"},
    ]
    record = {"kind": "cpu_install", "format": 1, "dry_run": False, "date": "2026-12-04 03:00 UTC",
              "machine": {"cores": 2, "python": "3.11.7", "pip": "pip 23.2.1", "cmake": "cmake version 3.25.1",
                          "cxx": "c++ 12.2.0", "commit": "abc1234", "uncommitted_changes": False},
              "uptime_before": "03:00:00 up 1 day, load average: 0.05, 0.10, 0.20",
              "uptime_after": "03:05:00 up 1 day, load average: 2.00, 1.00, 0.50", "steps": steps, "restored": True}
    record.update(changes)
    return record


def test_the_rendered_section_has_one_row_per_step_with_its_bar_and_verdict():
    md = "\n".join(wd.install_section(_record(), "docs/results/cpu_install_x.json"))
    assert "## Install and test times (CPU machine, no GPU)" in md and "2 cores, commit abc1234;" in md
    assert "| cold install, no CUDA toolkit | `rm -rf b; pip a` | 37.1 | ≤ 60 | PASS | 0.05 → 1.52 |" in md
    assert "| nvcc: none; C++ kernels skipped |" in md
    assert "| quick test subset | `python -m pytest -m \"not slow\" -q` | 201.5 | ≤ 180 | FAIL |" in md
    assert "2101 passed, 40 skipped in 199.80s" in md
    assert "Install bars: some FAIL (1/2)." in md and "load average: 0.05, 0.10, 0.20" in md


def test_the_page_shows_the_newest_record_beside_it_and_refuses_a_dry_run(tmp_path):
    res, docs = tmp_path / "gpu", tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    res.mkdir()
    (res / "gpu_check.json").write_text(json.dumps({"date": "2026-12-02", "steps": {}, "bars": []}))
    (res / "bench.json").write_text(json.dumps({"info": {"gpu": "Fake GPU", "title": "t"}, "rows": []}))
    (docs / "results" / "cpu_install_2026-12-01_0100.json").write_text(json.dumps(_record(date="OLD")))
    (docs / "results" / "cpu_install_2026-12-04_0300.json").write_text(json.dumps(_record()))
    p = _run("benchmarks/write_docs.py", "--results", str(res), "--out", str(docs / "benchmarks.md"))
    assert p.returncode == 0, p.stdout + p.stderr
    md = (docs / "benchmarks.md").read_text()
    assert "2026-12-04 03:00 UTC" in md and "cpu_install_2026-12-04_0300.json" in md and "OLD" not in md
    p = _run("benchmarks/write_docs.py", "--results", str(res), "--out", str(tmp_path / "none.md"),
             "--install-record", "none")
    assert p.returncode == 0 and "Install and test times" not in (tmp_path / "none.md").read_text()
    dry = tmp_path / "dry.json"
    dry.write_text(json.dumps(_record(dry_run=True)))
    p = _run("benchmarks/write_docs.py", "--results", str(res), "--out", str(tmp_path / "d.md"),
             "--install-record", str(dry))
    assert p.returncode == 2 and "is a dry run" in p.stderr and not (tmp_path / "d.md").exists()
