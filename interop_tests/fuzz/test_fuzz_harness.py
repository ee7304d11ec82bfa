"""The fuzz harness itself: a crash, an abort, an exit, a hang, a disallowed exception, an oracle failure
and a memory blow-up are each a finding that names the target, seed, index and input; the worker is
restarted and the run goes on; inputs replay from (seed, index); a run counts inputs, not seconds, and
only a stuck run meets its wall-clock limit."""
from __future__ import annotations

import pickle
import subprocess
import sys
import time

import pytest

from interop_tests.fuzz import harness, t_selftest
from interop_tests.fuzz.harness import REPO, Runner, input_rng, target_seed
from interop_tests.fuzz.targets import DEFAULT_INPUTS, SUITE, TARGETS, load

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): about 20 s on 2 cores: workers that crash, hang and restart

SPECS = [("ok", 0), ("segv",), ("ok", 1), ("abort",), ("ok", 2), ("exit", 3), ("hang",), ("ok", 3), ("bad",),
         ("allowed",), ("oracle",), ("print_then_segv",), ("ok", 4)]


@pytest.fixture(scope="module")
def misbehaving_run():
    return Runner("selftest", specs=SPECS, seed=1234).run()


def test_every_kind_of_misbehaviour_is_a_finding_at_its_own_index(misbehaving_run):
    r = misbehaving_run
    got = {f.index: (f.kind, f.title) for f in r.findings}
    assert set(got) == {1, 3, 5, 6, 8, 10, 11}
    assert got[1] == ("crash", "worker killed by SIGSEGV (rc -11)")
    assert got[3] == ("crash", "worker killed by SIGABRT (rc -6)")
    assert got[5] == ("crash", "worker exited with status 3")
    assert got[6][0] == "hang" and f"no result within {t_selftest.TIMEOUT:g}s" in got[6][1]
    assert got[8] == ("exception", "IndexError: an untyped error")
    assert got[10] == ("oracle", "wrong answer: 2 + 2 == 5")
    assert r.allowed == {"ValueError": 1}


def test_the_run_goes_on_after_each_crash_with_a_fresh_worker(misbehaving_run):
    r = misbehaving_run
    assert r.inputs == len(SPECS) and r.ok == 5       # every input after a crash still ran
    assert r.restarts == 5                            # segv, abort, exit, hang, segv


def test_a_failure_message_names_target_seed_index_replay_and_the_input(misbehaving_run):
    text = misbehaving_run.failure_text()
    assert "[selftest] crash: worker killed by SIGSEGV (rc -11)" in text
    assert "seed=1234 index=1" in text
    assert "replay: KB_FUZZ_SEED=1234 python -m interop_tests.fuzz.replay selftest 1" in text
    assert "input: ('segv',)" in text
    assert "2 input(s) like this one" in text             # the two segfaults are one distinct finding


def test_the_crashing_inputs_own_stderr_is_in_the_finding(misbehaving_run):
    f = next(f for f in misbehaving_run.findings if f.index == 11)
    assert "last words before the crash" in f.detail and "Segmentation fault" in f.detail
    hang = next(f for f in misbehaving_run.findings if f.index == 6)
    assert "t_selftest.py" in hang.detail                  # faulthandler's stack of the hung input


def test_peak_memory_growth_of_one_input_is_a_finding(monkeypatch):
    monkeypatch.setenv("KB_FUZZ_RSS_MB", "64")
    r = Runner("selftest", specs=[("memory", 200), ("ok", 1), ("memory", 8)]).run()
    assert [(f.index, f.kind) for f in r.findings] == [(0, "memory")]
    assert "peak memory grew by" in r.findings[0].title and r.ok == 2 and r.restarts == 1


def test_inputs_are_a_function_of_target_seed_and_index():
    from interop_tests.fuzz import t_modules
    for name in SUITE:
        if name == "modules" and not t_modules.bases():
            continue                  # nothing to mutate here (no nvcc, no installed fatbins)
        t = load(name)
        a = [t.generate(input_rng(name, 99, i)) for i in range(12)]
        b = [t.generate(input_rng(name, 99, i)) for i in range(12)]
        assert repr(a) == repr(b), name
        assert repr(t.generate(input_rng(name, 100, 0))) != repr(a[0]), name
        assert repr(pickle.loads(pickle.dumps(a))) == repr(a), name      # they cross the pipe


def test_seed_defaults_per_target_and_is_overridable(monkeypatch):
    monkeypatch.delenv("KB_FUZZ_SEED", raising=False)
    assert target_seed("contract") != target_seed("modules")
    assert target_seed("contract") == target_seed("contract")
    monkeypatch.setenv("KB_FUZZ_SEED", "0x2a")
    assert target_seed("contract") == target_seed("modules") == 42
    monkeypatch.setenv("KB_FUZZ_SEED", "random")
    assert target_seed("contract") == target_seed("contract")        # one fresh seed per target per run


def test_a_run_counts_inputs_so_a_loaded_machine_is_slower_never_short_of_inputs(monkeypatch):
    """The per-commit run used to be 2 s a target, start-up included: on a loaded 2-core machine a target
    got through 0-64 inputs and failed as 'too little to count'. Here every input takes 40 ms longer
    (a slow generator stands for a loaded machine): all 60 still run, with no time budget at all."""
    monkeypatch.delenv("KB_FUZZ_SECONDS", raising=False)
    fast = t_selftest.generate

    def slow(rng):
        time.sleep(0.04)
        return fast(rng)
    monkeypatch.setattr(t_selftest, "generate", slow)
    r = Runner("selftest", inputs=60, seed=7).run()
    assert (r.inputs, r.ok, r.wanted, r.seconds, r.limited) == (60, 60, 60, None, False), r.summary()
    assert r.elapsed >= 60 * 0.04 and not r.findings
    assert load("selftest").INPUTS == DEFAULT_INPUTS == Runner("selftest").inputs   # no INPUTS: the default


def test_kb_fuzz_seconds_keeps_a_run_going_past_its_count(monkeypatch):
    monkeypatch.setenv("KB_FUZZ_SECONDS", "1.5")
    assert harness.budget_seconds() == 1.5
    r = Runner("selftest", inputs=5).run()
    assert r.seconds == 1.5 and r.inputs > 20 and r.ok == r.inputs and not r.findings and not r.limited
    assert 1.5 <= r.elapsed < 1.5 + 5.0
    for bad in ("0", "-3", "soon", "inf", "nan"):
        monkeypatch.setenv("KB_FUZZ_SECONDS", bad)
        with pytest.raises(ValueError, match=f"KB_FUZZ_SECONDS must be a positive number of seconds, got '{bad}'"):
            harness.budget_seconds()


def test_the_wall_clock_limit_stops_only_a_stuck_run_and_says_so(monkeypatch):
    monkeypatch.delenv("KB_FUZZ_SECONDS", raising=False)
    assert Runner("selftest").limit == harness.LIMIT_SECONDS
    r = Runner("selftest", inputs=10**9, limit=0.5).run()       # a count it can never reach
    assert r.limited and 0 < r.inputs < r.wanted and r.ok == r.inputs and r.elapsed < 0.5 + 5.0
    assert f"{r.inputs} inputs (of {10**9}) in" in r.summary()
    assert "STOPPED at its 0.5s wall-clock limit" in r.summary()
    from interop_tests.fuzz.test_fuzz_targets import check
    with pytest.raises(AssertionError, match="stopped at its wall-clock limit, unfinished"):
        check(r)


def test_replay_regenerates_and_runs_one_input():
    proc = subprocess.run([sys.executable, "-m", "interop_tests.fuzz.replay", "selftest", "7", "--seed", "5"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    spec = load("selftest").generate(input_rng("selftest", 5, 7))
    assert f"--- selftest seed=5 index=7\ninput: {spec!r}\nok: ok {spec[1]}" in proc.stdout


def test_the_suite_runs_every_registered_target_but_the_selftest_and_the_gpu_ones():
    """Registering a target is its line in targets.TARGETS: the suite and its test pick it up."""
    from interop_tests.fuzz import test_fuzz_targets
    assert set(SUITE) == set(TARGETS) - {"selftest", "differential_gpu"}
    marks = test_fuzz_targets.test_every_input_ends_in_a_checked_result_or_a_typed_refusal.pytestmark
    assert [tuple(m.args[1]) for m in marks if m.name == "parametrize"] == [SUITE]
    assert all(load(name).INPUTS > 0 for name in SUITE)


def test_a_worker_past_its_memory_budget_is_replaced_without_a_finding(monkeypatch):
    monkeypatch.setenv("KB_FUZZ_RECYCLE_MB", "1")          # every worker is over it after one input
    r = Runner("selftest", specs=[("ok", k) for k in range(4)]).run()
    assert (r.ok, r.findings, r.restarts) == (4, [], 3)   # replaced before inputs 1, 2 and 3
