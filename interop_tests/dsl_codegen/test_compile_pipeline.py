"""The pipeline: named stages in order, dumps per stage (argument and KB_DUMP), entering mid-way, the
IR verifier rejecting malformed IR with the node and location, the IR printer, and the CLI."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsl.compiler import STAGE_NAMES, CompileContext, compile_ir, parse_dump, run_pipeline
from dsl.ir import nodes as N
from dsl.ir.printer import format_function
from dsl.ir.types import F32, I32, I64, INDEX
from dsl.ir.verify import IRVerifyError, verify_function
from dsl.options import KernelOptions
from interop_tests.dsl_codegen.codegen_kit import (LOC, C, R, arr, gid, guarded_store_1d, kernel,
                                                   load, params, require_ptxas, store)


def vecadd():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    return kernel("vadd", [a, out], guarded_store_1d(out, i, N.BinOp("add", load(a, [R(i)]),
                                                                     C(1.0, F32), F32)))


def test_stages_are_ordered_and_each_can_be_a_stop_point():
    assert STAGE_NAMES == ("frontend", "verify", "llvm_ir", "optimize", "ptx")
    ctx = CompileContext(None, [], KernelOptions(), "sm_90", kernel_name="vadd")
    ll = run_pipeline(vecadd(), ctx, start="verify", stop="llvm_ir")
    assert 'define ptx_kernel void @"vadd"' in ll
    mod = run_pipeline(ll, ctx, start="optimize", stop="optimize")     # enter mid-way from text
    ptx = run_pipeline(mod, ctx, start="ptx")
    assert ".entry vadd(" in ptx
    assert set(ctx.timings) == {"verify", "llvm_ir", "optimize", "ptx"}


def test_dump_argument_and_env_print_the_named_stages(capsys, monkeypatch, tmp_path):
    compile_ir(vecadd(), KernelOptions(), "sm_90", dump="ir,ptx", contract_json="{}")
    err = capsys.readouterr().err
    assert "stage verify" in err and "stage ptx" in err and "stage llvm_ir" not in err
    assert "kernel vadd(" in err and ".entry vadd(" in err
    monkeypatch.setenv("KB_DUMP", "llvm_ir")
    monkeypatch.setenv("KB_DUMP_DIR", str(tmp_path))
    compile_ir(vecadd(), KernelOptions(), "sm_90", contract_json="{}")
    assert "define ptx_kernel" in (tmp_path / "vadd.llvm_ir.txt").read_text()
    assert parse_dump("all") == frozenset(STAGE_NAMES)
    with pytest.raises(ValueError, match="unknown stage"):
        parse_dump("llvm,bogus")


def test_printer_shows_structure_types_and_sites():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i, k = N.Var("i", INDEX), N.Var("k", I64)
    fn = kernel("p", [a, out], [N.Assign(i, gid()), N.ForRange(k, C(0), C(4), C(1), [
        store(out, [R(k)], load(a, [R(i)], check="fault", site=1), mode="checked", site=2)])],
        fault_sites=[N.FaultSite(1, "a", LOC), N.FaultSite(2, "out", LOC)], exact_block=(64, 1, 1))
    text = format_function(fn)
    assert "kernel p(a: Array[f32, 1, any], out: DisjointSlice[f32, 1, any]) -> void  [block=(64, 1, 1)]:" in text
    assert "fault_site #1 a at k.py:3:5" in text
    assert "for k.1 in range(0:i64, 4:i64, 1:i64):" in text
    assert "    store.checked#2 %out[k.1] = load.fault#1 %a[i.0]:f32" in text


@pytest.mark.parametrize("case,message", [
    ("store_to_array", "store into a read-only Array"),
    ("wrong_index_count", "1-d array indexed with 2 indices"),
    ("undeclared_site", "fault site 7 is not declared"),
    ("mixed_operands", "add operands (f32, i32) do not match result type f32"),
    ("break_outside_loop", "break outside a loop"),
    ("kernel_returns_value", "return of f32 from a function returning void"),
])
def test_verifier_rejects_malformed_ir_naming_node_and_location(case, message):
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    body = {
        "store_to_array": [store(a, [C(0)], C(1.0, F32))],
        "wrong_index_count": [N.Assign(N.Var("x", F32), load(a, [C(0), C(1)]))],
        "undeclared_site": [N.Assign(N.Var("x", F32), load(a, [C(0)], check="fault", site=7))],
        "mixed_operands": [N.Assign(N.Var("x", F32), N.BinOp("add", C(1.0, F32), C(1, I32), F32, LOC))],
        "break_outside_loop": [N.Break(LOC)],
        "kernel_returns_value": [N.Return(C(1.0, F32), LOC)],
    }[case]
    with pytest.raises(IRVerifyError, match=re.escape(message)) as err:
        verify_function(kernel("bad", [a, out], [N.Assign(i, gid())] + body))
    assert "bad:" in str(err.value)
    if case in ("mixed_operands", "break_outside_loop", "kernel_returns_value"):
        assert str(err.value).startswith("k.py:3:5:")


CLI_KERNEL = '''
from dsl import simt, f32

@simt.kernel(block=128)
def saxpy(x: simt.Array[f32, 1], y: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1], s: f32):
    i = simt.thread.index_1d()
    out[i] = s * x[i] + y[i]
'''


def run_cli(*args, cache_dir):
    import os
    env = dict(os.environ, KB_CACHE_DIR=str(cache_dir), PYTHONPATH=str(Path.cwd()))
    return subprocess.run([sys.executable, "-m", "dsl", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_cli_compile_prints_ptx_and_resource_usage(tmp_path):
    require_ptxas()
    src = tmp_path / "kern.py"
    src.write_text(CLI_KERNEL)
    r = run_cli("compile", f"{src}::saxpy", "--arch", "sm_80", cache_dir=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert ".entry saxpy(" in r.stdout and ".target sm_80" in r.stdout and ".reqntid 128, 1, 1" in r.stdout
    assert "// ptxas sm_80 saxpy:" in r.stderr and "registers" in r.stderr
    out = tmp_path / "o.ptx"
    r = run_cli("compile", f"{src}::saxpy", "--arch", "sm_90", "--sig", "f32[:],f32[::1]@16,f32[::1]@16,f32",
                "-o", str(out), cache_dir=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and ".target sm_90" in out.read_text()
    assert "Array[f32, 1, any]" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["{src}::nothere"], "defines no 'nothere'"),
    (["{src}"], "expected FILE.py::KERNEL"),
    (["{src}::saxpy", "--arch", "sm_20"], "unsupported compute capability sm_20"),
    (["{src}::saxpy", "--sig", "f32[:],f32[:]"], "--sig gives 2 types but the kernel has 4 parameters"),
    (["{src}::saxpy", "--sig", "f32,f32[:],f32[:],f32"], "parameter 'x' is an array"),
    (["{src}::saxpy", "--sig", "q32[:],f32[:],f32[:],f32"], "unknown dtype 'q32'"),
])
@pytest.mark.slow
def test_cli_usage_errors_are_clear(tmp_path, args, message):
    src = tmp_path / "kern.py"
    src.write_text(CLI_KERNEL)
    r = run_cli("compile", *[a.format(src=src) for a in args], cache_dir=tmp_path / "c")
    assert r.returncode == 2 and message in r.stderr, r.stderr
