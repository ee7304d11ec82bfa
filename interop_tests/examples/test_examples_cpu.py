"""The examples and benchmarks stay runnable: they compile, answer --help, say 'no GPU' clearly (and
write their JSON) on a machine without one, their CUDA C++ and DSL kernels compile, and the report
tools render a page and a figure from benchmark JSON files. Catches what CI would otherwise miss until
the GPU run."""
from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["mixed_pipeline.py", "torch_custom_op.py", "graph_capture.py", "jax_jit.py"]
BENCHMARKS = ["launch_overhead.py", "launch_breakdown.py", "elementwise.py", "simt_parity.py", "tile_ops.py", "gemm.py", "attention.py",
              "intake.py", "compile_time.py"]
TOOLS = ["plot.py", "write_docs.py"]
ALL = [f"examples/{f}" for f in EXAMPLES] + [f"benchmarks/{f}" for f in BENCHMARKS + TOOLS]
EVERY_PY = sorted(str(p.relative_to(ROOT)) for d in ("examples", "benchmarks") for p in (ROOT / d).rglob("*.py"))
NO_GPU = not bridge.gpu_available()


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def bench_module(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.parametrize("path", EVERY_PY)
def test_file_compiles(path, tmp_path):
    py_compile.compile(str(ROOT / path), cfile=str(tmp_path / "x.pyc"), doraise=True)


@pytest.mark.parametrize("path", ALL)
@pytest.mark.slow
def test_help_runs(path):
    p = run(path, "--help")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("usage:"), p.stdout[:500]


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU behaviour; a GPU is present")
@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.slow
def test_example_without_gpu_fails_loudly(name):
    p = run(f"examples/{name}")
    assert p.returncode == 1, p.stdout + p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert "needs a CUDA GPU" in last and "PASS" not in last


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU behaviour; a GPU is present")
@pytest.mark.parametrize("name", [b for b in BENCHMARKS if b != "compile_time.py"])
@pytest.mark.slow
def test_benchmark_without_gpu_writes_a_json_note(name, tmp_path):
    out = tmp_path / "r.json"
    p = run(f"benchmarks/{name}", "--json", str(out), "--quick")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no GPU" in p.stdout
    data = json.loads(out.read_text())
    assert data["bars"] == [] and data["rows"] == []
    assert any(n.startswith("no GPU") for n in data["notes"]), data["notes"]


@pytest.mark.slow
def test_compile_time_benchmark_writes_bars(tmp_path):
    out = tmp_path / "c.json"
    p = run("benchmarks/compile_time.py", "--json", str(out), "--quick", "--repeat", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    names = [b["name"] for b in data["bars"]]
    gpu = ["simt first launch (fresh process, warm cache)", "tile first launch (fresh process, warm cache)"]
    assert names == ["cold compile (fresh process)", "disk-cache hit (fresh process)",
                     "tile softmax: disk-cache hit (fresh process)"] + (gpu if bridge.gpu_available() else [])
    rows = [r["name"] for r in data["rows"]]
    assert "tile softmax: cold compile (fresh process)" in rows
    assert all(b["ours"] > 0 for b in data["bars"])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("module,symbol,kernels", [
    ("elementwise", "CPP_SRC", {"add4"}),
    ("simt_parity", "CPP_SRC", {"vecadd", "saxpy", "stencil5", "transpose", "block_sum", "histogram"}),
    ("_bench_kit", "FILL_SRC", {"kb_fill"}),
])
def test_benchmark_cpp_compiles_with_its_contracts(module, symbol, kernels, tmp_path):
    from bridge.fatbin import embedded_contracts
    from bridge.contract import native_contract
    cu = tmp_path / "k.cu"
    cu.write_text(getattr(bench_module(module), symbol))
    cubin = tmp_path / "k.cubin"
    subprocess.run(["nvcc", "-cubin", "-O3", "-std=c++17", "-arch=sm_90", "--fmad=false",
                    f"-I{bridge.cpp_kernels.include_dir()}", str(cu), "-o", str(cubin)], check=True)
    found = embedded_contracts(cubin.read_bytes())
    assert set(found) == kernels
    for name, text in found.items():
        native_contract(text, name)        # parses: a bad contract raises ContractDefinitionError


def test_elementwise_dsl_kernels_compile_to_vector_ptx():
    e = bench_module("elementwise")
    from dsl import tile
    a = np.zeros((1 << 20) + 5, np.float32)
    ptx = e.add_chunked.ptx(a, a, a.copy(), arch="sm_90")
    assert "ld.global.nc.v4" in ptx and "st.global.v4" in ptx
    for t in e.TILE_SHAPES:
        assert ".entry" in e.tile_add.ptx(a, a, tile.partition(a.copy(), (t,)), arch="sm_90")


def test_launch_overhead_dsl_kernel_has_no_runtime_checks():
    lo = bench_module("launch_overhead")
    a = np.zeros(1, np.float32)
    contract = json.loads(lo.dsl_add.compile(a, a, a.copy(), np.int32(1), arch="sm_90").contract_json)
    assert not contract.get("fault_sites")           # every access proven: no fault record parameter


def test_mixed_pipeline_kernels_agree_with_numpy_in_the_simulator(rng):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import mixed_pipeline as M
    finally:
        sys.path.remove(str(ROOT / "examples"))
    from dsl import tile
    rows, cols = 13, 77
    n = rows * cols
    y = rng.standard_normal(n).astype(np.float32)
    h = np.full(n, np.nan, np.float32)
    M.half_square.simulate(y, h, grid=(-(-n // 256),), block=256)
    p = np.full((rows, cols), np.nan, np.float32)
    M.row_softmax.simulate(h.reshape(rows, cols), tile.partition(p, (1, 128)))
    w = rng.random(cols).astype(np.float32)
    got = (p.astype(np.float64) * w).sum(axis=1)
    np.testing.assert_allclose(got, M.reference(np.zeros(n, np.float32), y, w, rows, cols), rtol=1e-5)


def _fabricated_results(folder: Path, gpu: str | None = "Fake GPU") -> None:
    """Benchmark JSONs shaped like a real run (written through _common.Report), with a GPU name."""
    common = bench_module("_common")
    specs = {
        "elementwise": [("DSL SIMT chunk_1d(4)", 4400.0, "GB/s"), ("torch.add(out=)", 4350.0, "GB/s")],
        "launch_overhead": [("bridge, CuPy arrays (validated)", 2.9, "us"), ("CuPy RawKernel", 4.4, "us")],
        "simt_parity": [("vecadd [DSL]", 0.21, "ms"), ("vecadd [C++ nvcc -O3]", 0.2, "ms")],
        "tile_ops": [("GEMM 8192^3 bf16: DSL tile gemm, tile 128x128x32", 510.0, "TFLOP/s"),
                     ("GEMM 8192^3 bf16: torch.matmul", 690.0, "TFLOP/s"),
                     ("sum 2^28 f32: cupy.sum", None, "GB/s")],
    }
    bars = []
    for stem, rows in specs.items():
        rep = common.Report(stem)
        for name, value, unit in rows:
            rep.row(name, value, unit)
        rep.bar(f"{stem} bar", rows[0][1], rows[1][1], higher_is_better=unit != "us", bar=0.97, peer_name="peer")
        rep.finish(str(folder / f"{stem}.json"))
        data = json.loads((folder / f"{stem}.json").read_text())
        data["info"].pop("gpu", None)
        if gpu:
            data["info"]["gpu"], data["info"]["cc"] = gpu, [9, 0]
        (folder / f"{stem}.json").write_text(json.dumps(data))
        bars += data["bars"]
    check = {"date": "2026-11-30 12:00:00 UTC", "quick": False, "doctor": ["CUDA driver: 580.00 (fabricated)"],
             "steps": {"tests": {"rc": 0, "seconds": 1.0, "passed": 3, "failed": 0, "errors": 0, "skipped": 0}},
             "bars": bars}
    (folder / "gpu_check.json").write_text(json.dumps(check))


def test_plot_draws_a_fabricated_run(tmp_path):
    pytest.importorskip("matplotlib")
    res, docs = tmp_path / "results", tmp_path / "docs"
    res.mkdir()
    _fabricated_results(res)
    p = run("benchmarks/plot.py", "--results", str(res), "--out", str(docs / "benchmarks.png"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (docs / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_docs_renders_a_fabricated_run(tmp_path):
    res, docs = tmp_path / "results", tmp_path / "docs"
    res.mkdir()
    docs.mkdir()
    _fabricated_results(res)
    (docs / "benchmarks.png").write_bytes(b"\x89PNG\r\n\x1a\n")   # the page links the figure when it exists
    p = run("benchmarks/write_docs.py", "--results", str(res), "--out", str(docs / "benchmarks.md"))
    assert p.returncode == 0, p.stdout + p.stderr
    md = (docs / "benchmarks.md").read_text()
    assert "Fake GPU (compute capability 9.0)" in md and "CUDA driver: 580.00 (fabricated)" in md
    assert "| vecadd [C++ nvcc -O3] | 0.2 | ms |" in md
    assert "![benchmarks](benchmarks.png)" in md
    assert "| sum 2^28 f32: cupy.sum | — | GB/s |" in md


def test_write_docs_merges_the_parts_of_a_split_run(tmp_path):
    """A check split over two device calls: the tests part and the benchmarks part, each in its folder."""
    tests, bench = tmp_path / "tests", tmp_path / "bench"
    tests.mkdir()
    bench.mkdir()
    _fabricated_results(bench)
    check = {"date": "2026-12-03 20:00:00 UTC", "quick": False, "doctor": ["CUDA driver: 580.00 (part one)"],
             "steps": {"sanitize_memcheck": {"rc": 0, "seconds": 2.0, "memcheck_errors": 0}}, "bars": []}
    (tests / "gpu_check.json").write_text(json.dumps(check))
    out = tmp_path / "benchmarks.md"
    p = run("benchmarks/write_docs.py", "--results", str(tests), str(bench), "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    md = out.read_text()
    assert "2026-12-03 20:00:00 UTC + 2026-11-30 12:00:00 UTC" in md and "run in 2 parts" in md
    assert "| sanitize_memcheck | 0 |" in md and "| tests | 0 |" in md       # steps of both parts
    assert "CUDA driver: 580.00 (part one)" in md
    assert "| vecadd [C++ nvcc -O3] | 0.2 | ms |" in md and "Bars: some FAIL (" in md


def _two_parts(tmp_path, edit) -> list[str]:
    """Two result folders of fabricated runs (a page needs a GPU run's numbers), each record changed by
    edit(record, part number)."""
    folders = []
    for i in (1, 2):
        folder = tmp_path / f"part{i}"
        folder.mkdir()
        _fabricated_results(folder)
        check = json.loads((folder / "gpu_check.json").read_text())
        edit(check, i)
        (folder / "gpu_check.json").write_text(json.dumps(check))
        folders.append(str(folder))
    return folders


def test_write_docs_says_whether_the_shards_of_a_split_suite_make_the_whole_suite(tmp_path):
    """gpu_check.py --shard i/n in separate parts: the page says 'the whole suite' only with every shard."""
    def shard(check: dict, i: int) -> None:
        check["steps"] = {f"tests {i}/2": {"rc": 0, "seconds": 300.0, "passed": 2500, "failed": 0, "errors": 0,
                                          "skipped": 3}}
    folders = _two_parts(tmp_path, shard)
    out = tmp_path / "benchmarks.md"
    p = run("benchmarks/write_docs.py", "--results", *folders, "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    md = out.read_text()
    assert "| tests 1/2 | 0 |" in md and "| tests 2/2 | 0 |" in md
    assert "the whole suite, in 2 shards of whole files" in md
    p = run("benchmarks/write_docs.py", "--results", folders[0], "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NOT the whole suite: shards 1/2 ran, 2/2 did not" in out.read_text()


@pytest.mark.parametrize("same", [True, False], ids=["same-code", "other-code"])
def test_write_docs_says_whether_the_parts_ran_the_same_code(tmp_path, same):
    """Parts of one check (gpu_check.py's code fingerprint in each record): one check only where they agree."""
    def code(check: dict, i: int) -> None:
        check["code"] = {"sha256": "aaaa1111bbbb2222" if same or i == 1 else "cccc3333dddd4444", "files": 740}
    folders = _two_parts(tmp_path, code)
    out = tmp_path / "benchmarks.md"
    p = run("benchmarks/write_docs.py", "--results", *folders, "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    md = out.read_text()
    if same:
        assert "- code: aaaa1111bbbb2222 (740 files), the same in all 2 parts" in md
    else:
        assert "- code: DIFFERENT in the parts, so they are not one check: part 1: aaaa1111bbbb2222 (740 files); " \
               "part 2: cccc3333dddd4444 (740 files)" in md


def test_write_docs_names_a_part_run_without_a_record_and_vouches_only_for_the_recorded_code(tmp_path):
    """A check's parts plus benchmark files run on their own (--partial): the fingerprint stands for the
    recorded parts only, and the page names the part that has none."""
    def code(check: dict, i: int) -> None:
        check["code"] = {"sha256": "aaaa1111bbbb2222", "files": 740}
    folders = _two_parts(tmp_path, code)
    alone = tmp_path / "alone"
    alone.mkdir()
    _fabricated_results(alone)
    (alone / "gpu_check.json").unlink()
    out = tmp_path / "benchmarks.md"
    p = run("benchmarks/write_docs.py", "--partial", "--results", *folders, str(alone), "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("- code: aaaa1111bbbb2222 (740 files), the same in the 2 parts that recorded it; part 3: benchmark "
            "files run on their own, with no gpu_check.py record of the code") in out.read_text()
    p = run("benchmarks/write_docs.py", "--partial", "--results", str(alone), "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "- code: not recorded (benchmark files run on their own)" in out.read_text()


def test_write_docs_says_a_tests_step_that_ran_a_selection(tmp_path):
    """gpu_check.py --tests: the page says the tests step ran a selection and which, never the suite."""
    folder = tmp_path / "part"
    folder.mkdir()
    _fabricated_results(folder)
    check = json.loads((folder / "gpu_check.json").read_text())
    check["steps"]["tests"] = {"rc": 0, "seconds": 9.0, "passed": 7, "failed": 0, "errors": 0, "skipped": 0,
                               "selection": ["interop_tests/dsl_tile/test_flash_attention.py"]}
    (folder / "gpu_check.json").write_text(json.dumps(check))
    out = tmp_path / "benchmarks.md"
    p = run("benchmarks/write_docs.py", "--results", str(folder), "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    row = next(line for line in out.read_text().splitlines() if line.startswith("| tests |"))
    assert "a SELECTION, not the whole suite: interop_tests/dsl_tile/test_flash_attention.py" in row


def test_write_docs_takes_a_later_run_of_some_cases_row_by_row():
    """A later `--only` run of one case replaces that case's rows and bars (rows from an old kernel
    included) and keeps the other cases', each row naming its run."""
    wd = bench_module("write_docs")
    old = {"info": {"date": "d1"}, "rows": [{"name": "05 bwd: ours old", "value": 1.0}, {"name": "05 bwd: Triton",
           "value": 2.0}, {"name": "06 fwd: ours", "value": 3.0}],
           "bars": [{"name": "05 bwd vs Triton", "ratio": 0.5}, {"name": "06 fwd vs Triton", "ratio": 0.7}]}
    new = {"info": {"date": "d2"}, "rows": [{"name": "05 bwd: ours new", "value": 4.0}, {"name": "05 bwd: Triton",
           "value": 2.1}], "bars": [{"name": "05 bwd vs Triton", "ratio": 1.9}]}
    got = wd.merge_bench(old, new)
    assert [(r["name"], r["value"], r["run"]) for r in got["rows"]] == [
        ("06 fwd: ours", 3.0, "d1"), ("05 bwd: ours new", 4.0, "d2"), ("05 bwd: Triton", 2.1, "d2")]
    assert sorted((b["name"], b["ratio"]) for b in got["bars"]) == [("05 bwd vs Triton", 1.9),
                                                                     ("06 fwd vs Triton", 0.7)]
    assert got["info"]["date"] == "d1 + d2"


def test_write_docs_takes_a_later_run_under_another_title_whole():
    """A benchmark whose title changed measures something else now: its later run replaces the earlier
    one, old bars included (a stale FAIL of the old version must not stay on the page)."""
    wd = bench_module("write_docs")
    old = {"info": {"date": "d1", "title": "chain on 2^20"}, "rows": [{"name": "chain, pdl", "value": 1.0}],
           "bars": [{"name": "chain: without / with", "ratio": 1.1, "pass": False}]}
    new = {"info": {"date": "d2", "title": "chain on 2^16-2^20"}, "rows": [{"name": "2^16: chain, pdl", "value": 2.0}],
           "bars": [{"name": "chain of small kernels: without / with", "ratio": 1.7, "pass": True}]}
    got = wd.merge_bench(old, new)
    assert [r["name"] for r in got["rows"]] == ["2^16: chain, pdl"]
    assert [b["name"] for b in got["bars"]] == ["chain of small kernels: without / with"]


def test_a_checkpointed_benchmark_is_rendered_as_partial_until_a_whole_run_replaces_it(tmp_path):
    """Report.checkpoint writes the finished cases with info "partial" (a benchmark killed by the check's
    deadline leaves them); the page says so; a later whole run of the same benchmark clears the flag."""
    common, wd = bench_module("_common"), bench_module("write_docs")
    rep = common.Report("tutorials")
    rep.row("01 add: ours", 4200.0, "GB/s")
    rep.bar("01 add vs Triton", 4200.0, 4100.0, higher_is_better=True, bar=1.0, peer_name="Triton")
    path = tmp_path / "tutorials.json"
    rep.checkpoint(str(path))
    part = json.loads(path.read_text())
    assert part["info"]["partial"] is True and [r["name"] for r in part["rows"]] == ["01 add: ours"]
    assert part["bars"][0]["pass"] is True
    assert any("**Partial:**" in line for line in wd.bench_section("tutorials", part))
    whole = {**part, "info": {k: v for k, v in part["info"].items() if k != "partial"}}
    merged = wd.merge_bench(part, whole)
    assert "partial" not in merged["info"]
    assert not any("**Partial:**" in line for line in wd.bench_section("tutorials", merged))
    rep.finish(str(path))
    assert "partial" not in json.loads(path.read_text())["info"]


def test_write_docs_refuses_results_without_a_gpu(tmp_path):
    _fabricated_results(tmp_path, gpu=None)
    p = run("benchmarks/write_docs.py", "--results", str(tmp_path), "--out", str(tmp_path / "b.md"))
    assert p.returncode == 2 and "reports a GPU" in p.stderr
    assert not (tmp_path / "b.md").exists()


def test_benchmark_check_refuses_a_poisoned_or_inexact_output():
    kit = bench_module("_bench_kit")
    ref = np.arange(10, dtype=np.float32)
    kit.check_close("exact", ref.copy(), ref)
    poisoned = ref.copy()
    poisoned[7] = np.nan
    with pytest.raises(AssertionError, match=r"exact \[x\]: 1 of 10 elements differ .*flat index 7"):
        kit.check_close("exact [x]", poisoned, ref)
    with pytest.raises(AssertionError, match="flat index 3"):
        kit.check_close("tol", ref + np.array([0, 0, 0, 1e-2] + [0] * 6, np.float32), ref.astype(np.float64),
                        rtol=1e-4, atol=1e-6)
    assert kit.input_sets(10 * 2**20) == 3 and kit.input_sets(1 << 30) == 1


def test_benchmark_check_takes_a_per_element_bound():
    """The f8 GEMM's check: each element within its own bound (2^-10 of sum_k |a||b|), named when not."""
    kit, gemm = bench_module("_bench_kit"), bench_module("gemm")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 300)), rng.standard_normal((300, 5))
    ref, bound = a @ b, gemm.f8_bound(a, b)
    assert np.all(bound > 0.1) and np.all(bound < 0.5)          # 2^-10 * ~190
    kit.check_close("f8", ref + 0.9 * bound, ref, atol=bound)
    off = ref + 0.9 * bound
    off[2, 3] += 0.2 * bound[2, 3]
    with pytest.raises(AssertionError, match=rf"flat index 13: .*atol {float(bound[2, 3])!r}"):
        kit.check_close("f8", off, ref, atol=bound)


def test_benchmark_nvcc_comes_from_the_one_toolkit_locator(monkeypatch):
    """benchmarks' nvcc_module finds nvcc as bridge.toolkit does (KB_NVCC first): a KB_NVCC that is not
    an nvcc is refused by the locator, naming the variable, before anything is compiled or loaded."""
    kit = bench_module("_bench_kit")
    monkeypatch.setenv("KB_NVCC", "/nonexistent/nvcc")
    with pytest.raises(FileNotFoundError, match="nvcc not found: .*KB_NVCC"):
        kit.nvcc_module("__global__ void k() {}", "k")
