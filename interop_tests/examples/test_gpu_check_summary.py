"""scripts/gpu_check.py's summary: the verdict is correctness; missed performance bars are listed beside it;
a step that did not run (or a run without a GPU) fails the check."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def summary(**steps) -> dict:
    base = {"tests": {"rc": 0, "seconds": 1, "passed": 10, "failed": 0, "errors": 0, "skipped": 0},
            "sanitize_memcheck": {"rc": 0, "seconds": 1, "errors": 0, "api_errors": 0, "passed": 3, "failed": 0}}
    base.update(steps)
    return {"date": "d", "gpu": True, "doctor": ["GPU 0: H200"], "steps": base,
            "bars": [{"name": "launch", "ours": 5.0, "peer": 4.0, "ratio": 0.8, "bar": ">= 1x x", "pass": False},
                     {"name": "add", "ours": 4.3, "peer": 4.3, "ratio": 1.0, "bar": ">= 0.97x y", "pass": True}]}


def test_missed_bars_are_listed_but_do_not_fail_correctness(gpu_check, capsys):
    assert gpu_check.print_summary(summary()) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "VERDICT: PASS   performance bars met: 1/2 (missed: launch)"


def test_a_failed_test_or_a_sanitizer_error_fails_the_check(gpu_check, capsys):
    bad = {"rc": 1, "seconds": 1, "passed": 9, "failed": 1, "errors": 0, "skipped": 0}
    assert gpu_check.print_summary(summary(tests=bad)) == 1
    san = {"rc": 0, "seconds": 1, "errors": 2, "api_errors": 2, "passed": 3, "failed": 0}
    assert gpu_check.print_summary(summary(sanitize_memcheck=san)) == 1
    assert "errors 2 (API 2)" in capsys.readouterr().out


def test_a_selection_of_tests_is_said_in_the_step_and_the_verdict(gpu_check, capsys):
    """--tests runs a focused selection: it passes for what it ran, and says plainly it was not the suite."""
    picked = {"rc": 0, "seconds": 1, "passed": 7, "failed": 0, "errors": 0, "skipped": 0,
              "selection": ["interop_tests/dsl_tile/test_flash_attention.py", "interop_tests/x.py::test_y"]}
    assert gpu_check.print_summary(summary(tests=picked)) == 0
    out = capsys.readouterr().out
    assert "a SELECTION of 2 paths, not the whole suite" in out
    assert out.strip().splitlines()[-1].endswith("PARTIAL: the tests step ran a selection (--tests), not the whole suite")
    assert gpu_check.print_summary(summary()) == 0
    assert "PARTIAL" not in capsys.readouterr().out


def test_a_step_cut_by_the_time_budget_or_a_missing_gpu_fails(gpu_check, capsys):
    cut = {"rc": None, "note": "not run: the check's time budget ran out"}
    assert gpu_check.print_summary(summary(**{"bench:benchmarks/intake.py": cut})) == 1
    s = summary()
    s["gpu"] = False
    assert gpu_check.print_summary(s) == 1
    assert "NO GPU" in capsys.readouterr().out


def test_sanitizer_counts_are_read_from_the_tool_output(gpu_check):
    out = ("========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to \"invalid argument\"\n"
           "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 2 errors\n")
    assert gpu_check.sanitizer_errors(out) == 2 and gpu_check.sanitizer_api_errors(out) == 1
    assert gpu_check.sanitizer_errors("no summary here") is None


def test_an_example_whose_memcheck_run_timed_out_fails(gpu_check):
    ok = {"rc": 0, "seconds": 1, "pass_line": True, "memcheck_errors": 0, "memcheck_rc": 0}
    assert gpu_check.print_summary(summary(**{"example:e.py": ok})) == 0
    timed_out = {**ok, "memcheck_errors": None, "memcheck_rc": 124}
    assert gpu_check.print_summary(summary(**{"example:e.py": timed_out})) == 1
    no_pass = {**ok, "pass_line": False}
    assert gpu_check.print_summary(summary(**{"example:e.py": no_pass})) == 1


def test_junit_counts_name_the_failed_tests(gpu_check, tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
                   '<testcase classname="m.t" name="ok"/>'
                   '<testcase classname="m.t" name="bad"><failure message="x"/></testcase>'
                   '<testcase classname="m.t" name="skip"><skipped message="why"/></testcase>'
                   '</testsuite></testsuites>')
    c = gpu_check.junit_counts(xml)
    assert (c["passed"], c["failed"], c["skipped"]) == (1, 1, 1)
    assert c["failed_tests"] == ["m.t::bad"] and c["skipped_tests"] == ["m.t::skip: why"]


def test_each_recorded_step_is_printed_and_the_partial_summary_written_at_once(gpu_check, tmp_path, capsys):
    """A check cut short from outside keeps what it had: every step is on stdout and in
    results/gpu_check.json the moment it is recorded."""
    s: dict = {"date": "d"}
    path = tmp_path / "gpu_check.json"
    s["steps"] = gpu_check.Steps(s, path)
    s["steps"]["install"] = {"rc": 0, "seconds": 4.5}
    assert capsys.readouterr().out.strip() == "[gpu_check] install: rc 0, seconds 4.5"
    s["steps"]["tests"] = {"rc": 1, "seconds": 165.1, "passed": 2814, "failed": 2, "skipped": 49}
    import json
    assert json.loads(path.read_text())["steps"]["tests"]["failed"] == 2
    assert "tests: rc 1, seconds 165.1, passed 2814, failed 2" in capsys.readouterr().out


def test_pack_leaves_the_summary_and_one_archive_that_holds_everything_else(gpu_check, tmp_path):
    import tarfile
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "pytest.log").write_text("log text")
    (tmp_path / "sanitize_memcheck.xml").write_text("<testsuite/>")
    (tmp_path / "llm_kernels.json").write_text('{"rows": []}')
    (tmp_path / "gpu_check.json").write_text('{"steps": {}}')
    bundle = gpu_check.pack(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.json", "results.tgz"]
    with tarfile.open(bundle) as tar:
        assert sorted(tar.getnames()) == ["llm_kernels.json", "logs", "logs/pytest.log", "sanitize_memcheck.xml"]
        assert tar.extractfile("logs/pytest.log").read() == b"log text"


def test_a_part_that_skips_the_sanitizer_passes_still_memchecks_its_examples(gpu_check, monkeypatch, tmp_path):
    """The split check's examples part skips `sanitize` (the passes over the GPU tests); its examples
    must still run under memcheck, unless example_memcheck is skipped."""
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: "/usr/bin/compute-sanitizer")
    for skip, want in (("tests,sanitize,bench", True), ("tests,sanitize,example_memcheck,bench", False)):
        args = argparse.Namespace(budget=570.0, results=str(tmp_path / skip), skip=skip, quick=False, tests="",
                                  shard="")
        run = gpu_check._Run(args)
        names = [job[0] for job in run._example_jobs(100.0)]
        assert any(n.endswith("#memcheck") for n in names) == want, (skip, names)
        assert "examples/flash_attention_varlen.py" in names


def test_a_shard_of_the_suite_is_named_in_its_step_and_the_verdict(gpu_check, capsys):
    """--shard i/n: the step is 'tests i/n', it passes or fails like the suite, and the verdict says
    it was one part of the suite."""
    steps = summary()
    part = steps["steps"].pop("tests")
    steps["steps"]["tests 1/2"] = part
    assert gpu_check.print_summary(steps) == 0
    out = capsys.readouterr().out
    assert "tests 1/2" in out and "passed 10, failed 0" in out
    assert out.strip().splitlines()[-1].endswith("SHARD 1/2: one part of the suite")
    steps["steps"]["tests 1/2"] = {**part, "rc": 1, "failed": 1}
    assert gpu_check.print_summary(steps) == 1


def test_a_shard_sets_the_step_name_and_a_malformed_one_is_refused_before_anything_runs(gpu_check, tmp_path):
    args = argparse.Namespace(budget=570.0, results=str(tmp_path / "r"), skip="", quick=False, tests="",
                              shard="2/2")
    assert gpu_check._Run(args).tests_step == "tests 2/2"
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--shard", "0/2",
                           "--results", str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--shard: KB_TEST_SHARD='0/2': expected 'i/n'" in proc.stderr
    assert not (tmp_path / "bad").exists()


def _git(repo: Path, *args: str) -> None:
    import subprocess
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": "/usr/bin:/bin"})


def test_the_code_fingerprint_follows_the_code_not_the_docs_or_ignored_files(gpu_check, tmp_path):
    """Parts of one check, even from two sessions, must have run the same code: the fingerprint changes
    with any file that builds, runs or tests the product (tracked or not), and with nothing else."""
    import shutil as _shutil
    if _shutil.which("git") is None:
        pytest.skip("git not installed: the fingerprint's file list comes from git ls-files")
    repo = tmp_path / "repo"
    (repo / "dsl").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "dsl" / "a.py").write_text("x = 1\n")
    (repo / "docs" / "page.md").write_text("words\n")
    (repo / ".gitignore").write_text("build/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    base = gpu_check.code_fingerprint(repo)
    assert base == gpu_check.code_fingerprint(repo) and base["files"] == 1
    (repo / "docs" / "page.md").write_text("other words\n")              # docs: not code
    (repo / "build").mkdir()
    (repo / "build" / "out.py").write_text("generated\n")                # ignored by git
    assert gpu_check.code_fingerprint(repo) == base
    (repo / "dsl" / "new.py").write_text("y = 2\n")                      # untracked, not ignored: code
    grown = gpu_check.code_fingerprint(repo)
    assert grown["files"] == 2 and grown["sha256"] != base["sha256"]
    (repo / "dsl" / "new.py").unlink()
    (repo / "dsl" / "a.py").write_text("x = 2\n")                        # one byte of code
    assert gpu_check.code_fingerprint(repo)["sha256"] != base["sha256"]


def test_the_summary_names_the_code_it_ran(gpu_check, capsys):
    s = summary()
    s["code"] = {"sha256": "0123456789abcdef", "files": 740}
    gpu_check.print_summary(s)
    assert "code 0123456789abcdef (740 files)" in capsys.readouterr().out


def test_a_step_run_side_by_side_is_recorded_when_it_ends_not_when_the_slowest_does(gpu_check, tmp_path):
    """A check cut from outside keeps the steps that had ended (the sanitizer passes beside a suite
    that outlived the call)."""
    import sys
    import time
    seen: list[tuple[str, float]] = []
    slow = [sys.executable, "-c", "import time; time.sleep(5)"]
    fast = [sys.executable, "-c", "pass"]
    start = time.time()
    got = gpu_check.run_many([("slow", slow, tmp_path / "slow.log", 60, None),
                              ("fast", fast, tmp_path / "fast.log", 60, None)],
                             on_done=lambda name, res: seen.append((name, time.time() - start)))
    assert [name for name, _ in seen] == ["fast", "slow"]        # the fast one first, as it ended
    assert seen[0][1] < seen[1][1]
    assert got["fast"][0] == 0 and got["slow"][0] == 0


def test_the_gpu_tests_part_is_named_in_its_step_the_verdict_and_the_docs(gpu_check, capsys, tmp_path):
    """--gpu-tests: the step is 'tests gpu' (pytest -m gpu), it passes or fails like the suite, the verdict
    says the CPU tests are CI's, write_docs says what the part held; --shard with it is refused."""
    args = argparse.Namespace(budget=570.0, results=str(tmp_path / "r"), skip="", quick=False, tests="",
                              shard="", gpu_tests=True)
    assert gpu_check._Run(args).tests_step == "tests gpu"
    steps = summary()
    steps["steps"]["tests gpu"] = steps["steps"].pop("tests")
    assert gpu_check.print_summary(steps) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].endswith("GPU TESTS: the suite's GPU tests only (its CPU tests run in CI)")
    assert "SHARD" not in out
    steps["steps"]["tests gpu"] = {**steps["steps"]["tests gpu"], "rc": 1, "failed": 1}
    assert gpu_check.print_summary(steps) == 1
    spec = importlib.util.spec_from_file_location("write_docs", ROOT / "benchmarks" / "write_docs.py")
    docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs)
    assert docs.suite_coverage({"tests gpu": {}}) == ("the suite's GPU tests (-m gpu) in one part; its CPU tests "
                                                      "run in CI on every push")
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--shard", "1/2", "--gpu-tests",
                           "--results", str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--shard and --gpu-tests: one or the other" in proc.stderr
    assert not (tmp_path / "bad").exists()


def test_each_sanitizer_pass_runs_in_shards_of_single_tests(gpu_check, tmp_path):
    """--sanitize-shards n: every tool's pass is n processes, 'sanitize_<tool> i/n', each given
    KB_TEST_SHARD=i/n by single tests; 1 keeps one process a tool, with no shard in its environment."""
    args = argparse.Namespace(budget=570.0, results=str(tmp_path / "r"), skip="tests", quick=False, tests="",
                              shard="", sanitize_shards=3)
    jobs = gpu_check._Run(args).sanitizer_jobs(gpu_check.SANITIZER_TOOLS)
    assert [name for name, _, _ in jobs][:3] == ["sanitize_memcheck 1/3", "sanitize_memcheck 2/3",
                                                 "sanitize_memcheck 3/3"]
    assert len(jobs) == 3 * len(gpu_check.SANITIZER_TOOLS)
    for name, cmd, env in jobs:
        tool, shard = name.removeprefix("sanitize_").split(" ")
        assert cmd[:3] == ["compute-sanitizer", "--tool", tool] and env["KB_SANITIZER"] == tool
        assert env["KB_TEST_SHARD"] == shard and env["KB_TEST_SHARD_BY"] == "tests"
        assert "gpu and not nosanitize" in cmd
    args.sanitize_shards = 1
    jobs = gpu_check._Run(args).sanitizer_jobs(["memcheck"])
    assert [name for name, _, _ in jobs] == ["sanitize_memcheck"] and "KB_TEST_SHARD" not in jobs[0][2]


def test_a_sanitizer_shard_with_an_error_fails_the_check(gpu_check, capsys):
    steps = summary()
    san = steps["steps"].pop("sanitize_memcheck")
    steps["steps"]["sanitize_memcheck 1/3"] = san
    steps["steps"]["sanitize_memcheck 2/3"] = {**san, "errors": 1}
    assert gpu_check.print_summary(steps) == 1
    assert "FAIL  sanitize_memcheck 2/3" in capsys.readouterr().out


def test_a_benchmark_in_parts_runs_each_part_under_its_own_name_json_and_step(gpu_check, monkeypatch, tmp_path):
    """attention.py outgrew one step: its forward and each named part (BENCH_RUNS) run with their own
    arguments into their own JSON file, log and step, in the file's place, and --bench picks them by name."""
    ran = []

    def fake_sh(cmd, log, timeout, env=None):
        ran.append(cmd)
        return 0, 1.0, ""
    monkeypatch.setattr(gpu_check, "sh", fake_sh)
    args = argparse.Namespace(budget=570.0, results=str(tmp_path / "r"), skip="tests,sanitize,examples", quick=False,
                              tests="", shard="", bench="attention,attention_backward")
    run = gpu_check._Run(args)
    run.benchmarks()
    assert [(Path(c[1]).name, Path(c[3]).name, c[4:]) for c in ran] == [
        ("attention.py", "attention.json", ["--fwd-shapes", "4096x128,4096x64"]),
        ("attention.py", "attention_backward.json", ["--backward-only", "--bwd-head-dims", "128,64"])]
    steps = run.summary["steps"]
    assert steps["bench:benchmarks/attention.py"]["rc"] == 0
    assert steps["bench:benchmarks/attention.py (attention_backward)"]["rc"] == 0
    names = [n for n, _, _ in gpu_check.bench_runs(gpu_check.BENCHMARKS)]
    at = names.index("attention")
    assert names[at:at + 4] == ["attention", "attention_more", "attention_backward", "attention_gqa_varlen"]
    assert len(names) == len(set(names))


def test_an_unknown_benchmark_name_is_refused_before_anything_runs(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--bench", "attention,atention",
                           "--results", str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--bench: no benchmark named atention; expected names among" in proc.stderr
    assert "attention_backward" in proc.stderr
    assert not (tmp_path / "bad").exists()
