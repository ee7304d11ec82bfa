"""Tile kernels go through named stages as SIMT kernels do (issue 33): tile_frontend and tile_lower in
front of the shared tail, each dumpable (`dump=`, KB_DUMP, `python -m dsl compile --dump`), enterable
with hand-built tile IR and a stopping point; a stage name of the other model, or of none, is refused
naming the argument and the valid stages. And a compile miss views each array argument once."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import bridge
from dsl import tile
from dsl.compiler import (STAGE_NAMES, TILE_STAGE_NAMES, CompileContext, StageError, parse_dump,
                          run_pipeline)
from dsl.ir import nodes as N
from dsl.ir.types import F32, I32
from dsl.options import KernelOptions
from dsl.sim.launch import simulate
from dsl.tile import ir as T
from dsl.tile.compile import compile_cached, compile_tile, tile_context
from dsl.tile.stages import TILE_FRONT
from dsl.tile.types import ArrayParamType, PartitionParamType, TileType

ROOT = Path(__file__).resolve().parents[2]


@tile.kernel
def rowmax(x: tile.Array[tile.f32, 2], out: tile.Partition[tile.f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-1.0)
    out.store(v - tile.max(v, axis=1, keepdims=True))


def rowmax_args():
    x = np.zeros((4, 100), np.float32)
    return x, tile.partition(np.zeros((4, 100), np.float32), (2, 128))


def header(kernel: str, stage: str) -> str:
    return f"// ===== {kernel}: stage {stage} ====="


def hand_built_double() -> T.TileFunction:
    """out = 2 * x, tile by tile of 128, built without the front end."""
    vec = TileType(F32, (128,))
    x = T.TParam("x", ArrayParamType(F32, 1), 0)
    out = T.TParam("out", PartitionParamType(F32, 1, (128,)), 1)
    load = T.Load(x, [T.BlockId(0, TileType(I32, ()))], 0.0, vec)
    two = T.Broadcast(T.Const(2.0, TileType(F32, ())), vec)
    return T.TileFunction("double", [x, out], [T.Store(out, T.BinOp("mul", load, two, vec))], out)


# ------------------------------------------------------------------------------------------ stages
def test_the_tile_pipeline_is_its_front_stages_then_the_shared_tail():
    assert TILE_STAGE_NAMES == ("tile_frontend", "tile_lower", "verify", "llvm_ir", "optimize", "ptx")
    assert STAGE_NAMES == ("frontend", "verify", "llvm_ir", "optimize", "ptx")
    assert parse_dump("all", "tile") == frozenset(TILE_STAGE_NAMES)
    assert parse_dump("ir,tile_lower", "tile") == {"verify", "tile_lower"}


def test_every_stage_of_a_real_tile_kernel_is_dumped(capsys):
    sig, facts = rowmax.specialisation(rowmax_args())
    ck = compile_cached(rowmax, sig, facts, "sm_80", dump="all", cache=False)
    err = capsys.readouterr().err
    for stage in TILE_STAGE_NAMES:
        assert header("rowmax", stage) in err, stage
    front = err.split(header("rowmax", "tile_frontend"))[1].split("// =====")[0]
    assert "tile kernel rowmax(x: Array[f32, 2], out: Partition[f32, 2, tile=(2, 128)])  [grid=out]:" in front
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.strip().startswith("v = tile.load(x, (tile.bid(0), 0)"))
    assert f"v.0 = load %x[bid(0), 0:i32] padding=-1.0:tile<f32, (2, 128)>  # line {line}" in front
    assert "store %out <- sub(v.0, broadcast(max(v.0, axis=1, keepdims):tile<f32, (2, 1)>)" in front
    lowered = err.split(header("rowmax", "tile_lower"))[1].split("// =====")[0]
    assert lowered.lstrip().startswith("kernel rowmax(") and "[block=(" in lowered
    assert ".entry rowmax(" in err.split(header("rowmax", "ptx"))[1]
    assert set(ck.metadata["stage_seconds"]) == set(TILE_STAGE_NAMES)
    assert ck.ptx == rowmax.ptx(*rowmax_args(), arch="sm_80")      # dumping changes nothing


def test_kb_dump_names_tile_stages_and_a_dumping_compile_does_not_read_the_disk_cache(
        capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KB_CACHE", "1")
    sig, facts = rowmax.specialisation(rowmax_args())
    compile_cached(rowmax, sig, facts, "sm_90")                   # stored (or already there)
    assert compile_cached(rowmax, sig, facts, "sm_90").metadata["cache"] == "disk"
    monkeypatch.setenv("KB_DUMP", "frontend")                     # a SIMT stage: nothing for a tile kernel
    assert compile_cached(rowmax, sig, facts, "sm_90").metadata["cache"] == "disk"
    assert "stage" not in capsys.readouterr().err
    monkeypatch.setenv("KB_DUMP", "tile_lower,ptx")
    monkeypatch.setenv("KB_DUMP_DIR", str(tmp_path))
    assert compile_cached(rowmax, sig, facts, "sm_90").metadata["cache"] == "miss"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rowmax.ptx.txt", "rowmax.tile_lower.txt"]
    assert (tmp_path / "rowmax.tile_lower.txt").read_text().startswith("kernel rowmax(")


def test_hand_built_tile_ir_enters_at_tile_lower_and_runs_to_any_stop():
    ctx = tile_context("sm_80", name="double")
    fn = run_pipeline(hand_built_double(), ctx, start="tile_lower", stop="verify")
    assert isinstance(fn, N.Function) and fn.name == "double"
    assert [p.name for p in fn.params] == ["x", "out"]
    assert set(ctx.timings) == {"tile_lower", "verify"}
    x, out = np.arange(300, dtype=np.float32), np.zeros(300, np.float32)
    simulate(fn, [x, out], grid=(3, 1, 1))                          # the lowered kernel, on the CPU
    np.testing.assert_array_equal(out, 2 * np.arange(300, dtype=np.float32))
    ptx = run_pipeline(fn, ctx, start="llvm_ir")
    assert ".target sm_80" in ptx and ".entry double(" in ptx


def test_compile_tile_takes_hand_built_ir_with_its_dumps(capsys):
    ck = compile_tile(hand_built_double(), "sm_80", dump="tile_lower")
    assert ".entry double(" in ck.ptx and ck.threads >= 32
    err = capsys.readouterr().err
    assert header("double", "tile_lower") in err and header("double", "ptx") not in err


def test_stopping_at_tile_frontend_returns_the_tile_ir():
    sig, _ = rowmax.specialisation(rowmax_args())
    ctx = tile_context("sm_90", kernel=rowmax, sig=sig, name="rowmax")
    fn = run_pipeline(None, ctx, stop="tile_frontend")
    assert isinstance(fn, T.TileFunction) and fn.name == "rowmax"
    assert [p.name for p in fn.params] == ["x", "out"] and fn.grid_param.name == "out"
    assert set(ctx.timings) == {"tile_frontend"}


# ------------------------------------------------------------------------------------------ refusals
TILE_LIST = "tile_frontend, tile_lower, verify, llvm_ir, optimize, ptx"
SIMT_LIST = "frontend, verify, llvm_ir, optimize, ptx"


def _simt_ctx() -> CompileContext:
    return CompileContext(None, [], KernelOptions(), "sm_90")


@pytest.mark.parametrize("call,argument,message", [
    (lambda: parse_dump("frontend", "tile"), "dump",
     f"'frontend' (a stage of simt kernels only); its stages are {TILE_LIST}"),
    (lambda: parse_dump("tile_lower"), "dump", f"'tile_lower' (a stage of tile kernels only); its stages are {SIMT_LIST}"),
    (lambda: parse_dump("verify,bogus", "tile"), "dump", "unknown stage(s) for a tile kernel: 'bogus'"),
    (lambda: parse_dump(7, "tile"), "dump", "expected stage names ('a,b' or a list of names), got 7"),
    (lambda: run_pipeline(hand_built_double(), _simt_ctx(), start="tile_lower"), "start",
     "'tile_lower' (a stage of tile kernels only)"),
    (lambda: run_pipeline(None, tile_context("sm_90"), stop="frontend"), "stop",
     f"'frontend' (a stage of simt kernels only); its stages are {TILE_LIST}"),
    (lambda: run_pipeline(None, tile_context("sm_90"), start="ptx", stop="tile_lower"), "stop",
     "'tile_lower' comes before start 'ptx'"),
    (lambda: compile_tile(hand_built_double(), "sm_90", dump="llvm_ir,frontend"), "dump",
     "'frontend' (a stage of simt kernels only)"),
])
def test_a_stage_of_the_other_model_or_of_none_is_refused_naming_argument_and_stages(call, argument, message):
    with pytest.raises(StageError) as err:
        call()
    assert err.value.argument == argument and str(err.value).startswith(f"{argument}: ")
    assert message in str(err.value), str(err.value)
    assert isinstance(err.value, ValueError)


def test_tile_stages_without_their_inputs_and_an_unknown_model_are_refused():
    with pytest.raises(ValueError, match=r"front: a tile context needs the stages tile_frontend, tile_lower"):
        CompileContext(None, [], KernelOptions(), "sm_90", model="tile")
    ctx = CompileContext(None, [], KernelOptions(), "sm_90", model="tile", front=TILE_FRONT)
    with pytest.raises(TypeError, match=r"ctx.tile: expected the tile lowering's settings .* got None"):
        run_pipeline(hand_built_double(), ctx, start="tile_lower")
    with pytest.raises(TypeError, match=r"ctx.pyfunc: the tile_frontend stage needs the kernel's Python"):
        run_pipeline(None, tile_context("sm_90"), stop="tile_frontend")
    with pytest.raises(ValueError, match="model: expected one of simt, tile, got 'cuda'"):
        CompileContext(None, [], KernelOptions(), "sm_90", model="cuda")


# ------------------------------------------------------------------------------------------ the CLI
CLI_KERNEL = '''
from dsl import tile, f32

@tile.kernel
def add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))
'''


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "dsl", "compile", *args], capture_output=True, text=True,
                          env=env, cwd=str(ROOT))


@pytest.mark.slow
def test_cli_dumps_tile_stages_and_refuses_simt_ones(tmp_path):
    src = tmp_path / "tk.py"
    src.write_text(CLI_KERNEL)
    sig = ["--sig", "f32[::1]@16,f32[::1]@16,f32[::1]@16/256", "--arch", "sm_80"]
    r = run_cli(f"{src}::add", *sig, "--dump", "tile_frontend,tile_lower")
    assert r.returncode == 0, r.stderr
    assert header("add", "tile_frontend") in r.stderr and header("add", "tile_lower") in r.stderr
    assert "store %out <- add(load %a[t.0] padding=0:tile<f32, (256,)>" in r.stderr
    assert ".entry add(" in r.stdout
    r = run_cli(f"{src}::add", *sig, "--dump", "frontend")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: dump: unknown stage(s) for a tile kernel: 'frontend'"), r.stderr


# ------------------------------------------------------------------------------------------ issue 33, B
def test_a_compile_miss_views_each_array_argument_once(monkeypatch):
    import dsl.tile.host as host

    @tile.kernel
    def scaled(a: tile.Array[tile.f32], b: tile.Array[tile.f32], out: tile.Partition[tile.f32]):
        t = tile.bid(0)
        out.store(tile.load(a, t, out.tile_shape) * tile.load(b, t, out.tile_shape))

    a, b, o = (np.zeros(300, np.float32) for _ in range(3))
    args = (a, b, tile.partition(o, (128,)))
    views: dict[int, int] = {}
    real_view = host._view

    def counting_view(array):
        views[id(array)] = views.get(id(array), 0) + 1
        return real_view(array)

    monkeypatch.setattr(host, "_view", counting_view)
    monkeypatch.setenv("KB_CACHE", "0")
    monkeypatch.setattr(bridge, "current_device", lambda: SimpleNamespace(arch="sm_80", ordinal=0))
    monkeypatch.setattr(bridge, "kernel_from_ptx", lambda ptx, name, contract, device: SimpleNamespace(
        launcher=("launcher", name, device)))
    assert scaled._miss(args) == ("launcher", "scaled", 0)        # the Dispatcher's miss, off-GPU
    assert views == {id(a): 1, id(b): 1, id(o): 1}
    views.clear()
    scaled.ptx(np.zeros(100, np.float32), np.zeros(100, np.float32), tile.partition(o, (64,)), arch="sm_80")
    assert sorted(views.values()) == [1, 1, 1] and views[id(o)] == 1    # a .ptx() miss too
