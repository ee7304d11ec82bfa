"""Every `KB_*` value is checked where it is read (bridge/settings.py): a value a setting does not accept
is a ConfigurationError (a ValueError, the same class from `bridge` and `dsl`) naming the variable, the
value and what it accepts, raised before anything the setting governs is done; never a stray
ValueError / FileExistsError from inside a compile, and never silently the default. On/off switches
have one spelling. (KB_LIBDEVICE and KB_CUDA_HOME: interop_tests/toolkit/test_libdevice_setting.py;
KB_MAX_SPECIALISATIONS: interop_tests/observe/test_logging_records.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge
import dsl
from bridge import settings
from dsl import f32, simt, tile
from dsl.runmode import simulating

REPO = Path(__file__).resolve().parents[2]
PROBE = "KB_TEST_SWITCH"     # a name no code reads (test_configuration_table.py scans for literal reads)
SWITCH = r"expected one of 1, true, yes, on \(on\) or 0, false, no, off \(off\), any case"


@simt.kernel(block=64)
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


@tile.kernel
def tcopy(a: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(a, tile.bid(0), out.tile_shape))


def test_configuration_error_is_one_value_error_class_exported_by_bridge_and_dsl():
    assert bridge.ConfigurationError is dsl.ConfigurationError is settings.ConfigurationError
    assert issubclass(bridge.ConfigurationError, ValueError)
    assert not issubclass(bridge.ConfigurationError, bridge.LaunchContractError)


@pytest.mark.parametrize("raw, default, expected", [
    ("1", False, True), ("TRUE", False, True), (" yes ", False, True), ("On", False, True),
    ("0", True, False), ("false", True, False), ("NO", True, False), (" off", True, False),
    ("", True, True), ("", False, False), ("  ", False, False)])
def test_a_switch_has_one_spelling_for_every_variable(monkeypatch, raw, default, expected):
    monkeypatch.setenv(PROBE, raw)
    assert settings.env_switch(PROBE, default) is expected


@pytest.mark.parametrize("raw", ["2", "maybe", "enabled", "o", "\u0661"])
def test_a_switch_refuses_any_other_value_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(PROBE, raw)
    with pytest.raises(bridge.ConfigurationError, match=rf"^{PROBE}={raw!r}: {SWITCH}") as err:
        settings.env_switch(PROBE, True)
    assert (err.value.variable, err.value.value) == (PROBE, raw)


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("off", False), ("no", False), ("0", False)])
def test_kb_simulate_reads_as_a_switch(monkeypatch, value, on):
    """`off` and `no` used to turn the simulator ON (any value but "" and "0" did)."""
    monkeypatch.setenv("KB_SIMULATE", value)
    assert simulating() is on


def test_kb_simulate_with_another_value_refuses_the_call_before_anything_runs(monkeypatch):
    monkeypatch.setenv("KB_SIMULATE", "maybe")
    a, out = np.ones(64, np.float32), np.full(64, -1.0, np.float32)
    with pytest.raises(bridge.ConfigurationError, match=rf"^KB_SIMULATE='maybe': {SWITCH}"):
        copy(a, out)
    assert (out == -1.0).all()


@pytest.mark.parametrize("kernel", ["simt", "tile"])
def test_kb_dump_naming_an_unknown_stage_is_a_configuration_error_from_every_compile(monkeypatch, kernel):
    monkeypatch.setenv("KB_DUMP", "ptx,bogus")
    a = np.ones(64, np.float32)
    with pytest.raises(bridge.ConfigurationError, match=r"^KB_DUMP='ptx,bogus': expected a comma-separated list of "
                                                        r"frontend, tile_frontend, tile_lower, verify, llvm_ir, "
                                                        r"optimize, ptx, ir, llvm, opt, "
                                                        r"all \(unknown: 'bogus'\)") as err:
        if kernel == "simt":
            copy.ptx(a, a, arch="sm_80")
        else:
            tcopy.ptx(a, tile.partition(np.ones(64, np.float32), (64,)), arch="sm_80")
    assert err.value.variable == "KB_DUMP"


def test_kb_dump_dir_that_is_a_file_is_a_configuration_error_and_the_file_is_kept(monkeypatch, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    monkeypatch.setenv("KB_CACHE", "0")
    monkeypatch.setenv("KB_DUMP", "ptx")
    monkeypatch.setenv("KB_DUMP_DIR", str(a_file))
    a = np.ones(64, np.float32)
    with pytest.raises(bridge.ConfigurationError, match=rf"^KB_DUMP_DIR='{a_file}': expected a directory \(this "
                                                        r"path exists and is not one\)") as err:
        copy.ptx(a, a, arch="sm_80")
    assert err.value.variable == "KB_DUMP_DIR" and a_file.read_text() == "mine"
    monkeypatch.setenv("KB_DUMP_DIR", str(a_file / "below"))             # below a file: cannot be made
    with pytest.raises(bridge.ConfigurationError, match=r"^KB_DUMP_DIR='.*below': expected a usable directory"):
        copy.ptx(a, a, arch="sm_80")


def test_kb_cache_dir_that_is_a_file_is_a_configuration_error_and_the_file_is_kept(monkeypatch, tmp_path):
    a_file = tmp_path / "package.json"
    a_file.write_text("{}")
    monkeypatch.setenv("KB_CACHE_DIR", str(a_file))
    a = np.ones(64, np.float32)
    with pytest.raises(bridge.ConfigurationError, match=rf"^KB_CACHE_DIR='{a_file}': expected a directory") as err:
        copy.ptx(a, a.copy(), arch="sm_80")
    assert err.value.variable == "KB_CACHE_DIR" and a_file.read_text() == "{}"


def test_kb_dump_dir_is_created_and_receives_the_dumps(monkeypatch, tmp_path):
    monkeypatch.setenv("KB_CACHE", "0")
    monkeypatch.setenv("KB_DUMP", "ptx")
    monkeypatch.setenv("KB_DUMP_DIR", str(tmp_path / "new" / "dumps"))
    a = np.ones(64, np.float32)
    ptx = copy.ptx(a, a, arch="sm_80")
    assert (tmp_path / "new" / "dumps" / "copy.ptx.txt").read_text() == ptx


def test_kb_tile_gemm_pipeline_other_than_sync_or_ws_is_refused_not_taken_as_sync(monkeypatch):
    from dsl.tile.compile import gemm_pipeline
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", " WS ")
    assert gemm_pipeline() == "ws"
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "fast")
    with pytest.raises(bridge.ConfigurationError, match=r"^KB_TILE_GEMM_PIPELINE='fast': expected one of sync, ws"):
        gemm_pipeline()


@pytest.mark.parametrize("variable", ["KB_CACHE", "KB_LINEINFO", "KB_TILE_TC_MATMUL", "KB_AUTOTUNE"])
def test_the_dsl_switches_refuse_a_value_they_do_not_know(monkeypatch, variable):
    from dsl.cache import cache_enabled
    from dsl.options import check_lineinfo
    from dsl.tile.autotune import tuning_enabled
    from dsl.tile.compile import tc_matmul_enabled
    read = {"KB_CACHE": cache_enabled, "KB_LINEINFO": lambda: check_lineinfo(None),
            "KB_TILE_TC_MATMUL": tc_matmul_enabled, "KB_AUTOTUNE": tuning_enabled}[variable]
    monkeypatch.setenv(variable, "nah")
    with pytest.raises(bridge.ConfigurationError, match=rf"^{variable}='nah': {SWITCH}"):
        read()
    monkeypatch.setenv(variable, "No")
    assert read() is False


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO),
                          env={**os.environ, **env})


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["KB_NVTX", "KB_FAST_INTAKE"])
def test_the_native_switches_are_checked_when_bridge_is_imported(variable):
    r = _python("import bridge", **{variable: "bogus"})
    assert r.returncode != 0
    assert f"bridge.errors.ConfigurationError: {variable}='bogus': expected one of 1, true, yes, on" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("value", ["no", " OFF "])
def test_kb_fast_intake_has_the_one_spelling_too(value):
    """`no` and ` OFF ` used to leave the fast paths on: only "0", "off" and "false" were read."""
    pytest.importorskip("torch")
    r = _python("import torch, bridge\nfrom bridge import _native\n_native.intake_view(torch.zeros(3))\n"
                "print(_native.fast_intake_status()['torch'])", KB_FAST_INTAKE=value)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "('off', 'KB_FAST_INTAKE disables it')"


@pytest.mark.slow
@pytest.mark.parametrize("value, on", [("1", True), ("Yes", True), ("off", False), ("0", False)])
def test_kb_nvtx_turns_the_ranges_on_at_import_with_the_one_spelling(value, on):
    """`off` used to turn the ranges ON (any value but "" and "0" did)."""
    r = _python("import bridge\nst = bridge.nvtx_status()\nprint(st['compiled'], st['on'])", KB_NVTX=value)
    assert r.returncode == 0, r.stderr[-2000:]
    compiled, got = r.stdout.split()
    assert got == str(on and compiled == "True")
