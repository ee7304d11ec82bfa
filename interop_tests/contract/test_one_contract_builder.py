"""ONE IR-level contract builder (dsl/contracts.py) for both models: any lowered kernel plus what the
IR cannot say gives the schema-v1 contract. Checked on hand-built IR (expected dicts written out
here), and through its two thin users: the SIMT contract (options + derived grid) and the tile
contract (tile grid, partition relations, relied-on facts), including the simulator's validator."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bridge
from dsl import f32, simt, tile
from dsl.contracts import build_contract, read_params
from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, I32, I64, INDEX, ArrayType

LOC = N.Loc("k.py", 7, 5, "out[i] = a[i]")


def arr(dtype, ndim=1, writable=False, layout="any", aligned16=False):
    return ArrayType(dtype, ndim, writable=writable, layout=layout, aligned16=aligned16)


def hand_built() -> N.Function:
    """a: read; out: stored and loaded; w: stored only; h: handed to a device function; g: its
    address handed to inline PTX; s: a scalar."""
    ps = [N.Param(n, t, k) for k, (n, t) in enumerate([
        ("a", arr(F32, 2, layout="C", aligned16=True)), ("out", arr(F32, writable=True)),
        ("w", arr(I32, writable=True, layout="C")), ("h", arr(F32, writable=True)),
        ("g", arr(F32, writable=True, aligned16=True)), ("s", I64)])]
    a, out, w, h, g, s = (N.ParamRef(p) for p in ps)
    i = N.Var("i", INDEX)
    dev_p = N.Param("x", arr(F32, writable=True), 0)
    dev = N.Function("touch", [dev_p], N.VOID, [], False)
    body = [N.Assign(i, N.TupleGet(N.ThreadIndexValue(1), 0, INDEX)),
            N.Store(out, [N.ReadVar(i)], N.Load(a, [N.Const(0, INDEX), N.ReadVar(i)], "fault", 1, F32, LOC),
                    "guarded", 0, LOC),
            N.Store(out, [N.ReadVar(i)], N.BinOp("add", N.Load(out, [N.ReadVar(i)], "none", 0, F32), N.Const(1.0, F32),
                                                 F32), "guarded", 0),
            N.Store(w, [N.ReadVar(i)], N.Const(3, I32), "guarded", 0),
            N.ExprStmt(N.Call(dev, [h], N.VOID)),
            N.ExprStmt(TN.InlinePtx("prefetch.global.L2 [$0];", "l", [TN.GlobalAddress(g, [N.ReadVar(i)])], N.VOID,
                                    True))]
    return N.Function("hb", ps, N.VOID, body, True, fault_sites=[N.FaultSite(1, "a", LOC)])


ARGS = [
    {"name": "a", "kind": "array", "dtype": "f32", "ndim": 2, "layout": "C", "align": 16, "access": "read", "abi": "view"},
    {"name": "out", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "any", "align": 4, "access": "readwrite",
     "abi": "view"},
    {"name": "w", "kind": "array", "dtype": "i32", "ndim": 1, "layout": "C", "align": 4, "access": "write", "abi": "view"},
    {"name": "h", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "any", "align": 4, "access": "readwrite",
     "abi": "view"},
    {"name": "g", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "any", "align": 16, "access": "readwrite",
     "abi": "view"},
    {"name": "s", "kind": "scalar", "dtype": "i64"},
]
SITES = [{"id": 1, "array": "a", "file": "k.py", "line": 7, "text": "out[i] = a[i]"}]


def test_the_ir_alone_gives_args_access_and_fault_sites_and_nothing_else():
    fn = hand_built()
    assert read_params(fn) == {"a", "out", "h", "g"}
    d = build_contract(fn)
    assert d == {"version": 1, "kernel": "hb", "domain": 1, "args": ARGS, "fault_sites": SITES}
    assert list(d) == ["version", "kernel", "domain", "args", "fault_sites"]


def test_every_caller_input_lands_in_schema_order():
    d = build_contract(hand_built(), domain=2, block=(16, 8, 1), dynamic_smem=("max", 4096), min_cc=80,
                       requires=["len(out) == len(w)"], inplace=[("out", "h")],
                       grid_from={"arg": "out", "per_thread": [1, 1, 1]})
    assert list(d) == ["version", "kernel", "domain", "block", "dynamic_smem", "min_cc", "args", "requires",
                       "inplace", "grid_from", "fault_sites"]
    assert (d["block"], d["dynamic_smem"], d["inplace"]) == ({"exact": [16, 8, 1]}, {"max": 4096}, [["out", "h"]])
    assert build_contract(hand_built(), launch_bounds=512, dynamic_smem=0)["block"] == {"max_threads": 512}
    assert build_contract(hand_built(), dynamic_smem=0)["dynamic_smem"] == {"exact": 0}


def test_reads_and_alignment_can_be_stated_by_the_caller():
    d = build_contract(hand_built(), reads=set(), aligned={"out"})
    assert [a.get("access") for a in d["args"]] == ["read", "write", "write", "write", "write", None]
    assert [a.get("align") for a in d["args"]] == [4, 16, 4, 4, 4, None]


def test_a_device_function_has_no_contract():
    dev = N.Function("touch", [], N.VOID, [], False)
    with pytest.raises(TypeError, match="touch is a device function"):
        build_contract(dev)


@simt.kernel(block=128, requires=["len(a) == len(out)"], shared_mem=("max", 2048))
def scale(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


def test_the_simt_contract_is_the_builder_with_the_kernels_options():
    x = np.zeros(10, np.float32)
    fn = scale.build(x, x.copy(), np.float32(2))
    expected = build_contract(fn, block=(128, 1, 1), dynamic_smem=("max", 2048), min_cc=0,
                              requires=["len(a) == len(out)"], inplace=[],
                              grid_from={"arg": "out", "per_thread": [1, 1, 1]}, strict_domain=True)
    assert json.loads(scale.compile(x, x.copy(), np.float32(2)).contract_json) == expected
    assert expected["args"][1]["access"] == "write" and expected["args"][0]["align"] == 16


@tile.kernel
def axpy(a: tile.Array[f32], y: tile.Partition[f32], alpha: f32):
    t = tile.bid(0)
    y.store(y.load() + alpha * tile.load(a, t, y.tile_shape))


@tile.kernel
def two(a: tile.Array[f32], p: tile.Partition[f32], q: tile.Partition[f32]):
    v = tile.load(a, tile.bid(0), p.tile_shape)
    p.store(v)
    q.store(v)


def test_the_tile_contract_and_the_simulators_contract_come_from_the_same_builder():
    from dsl.sim.validator import host_launcher
    from dsl.tile.compile import validator_contract
    from dsl.tile.lower import pick_threads
    a = np.zeros(300, np.float32)
    odd = np.zeros(602, np.float32)[1:]     # 4 bytes past 16-byte boundaries: no vector accesses to rely on
    args = (odd[:300], tile.partition(odd[301:], (128,)), 2.0)
    compiled = json.loads(axpy.compile(args, "sm_90").contract_json)
    fn = axpy.tile_ir(*args)
    sim = validator_contract(fn, pick_threads(fn), axpy.facts(args))
    assert compiled == sim          # no relied-on facts, no dynamic shared memory: the same contract
    assert [x["access"] for x in compiled["args"] if x["kind"] == "array"] == ["read", "readwrite"]
    assert compiled["grid_from"] == {"arg": "y", "tile": [128]} and compiled["block"]["exact"][1:] == [1, 1]
    assert host_launcher(json.dumps(sim), "axpy").validate_only((a, a.copy(), 2.0))[0] == (3, 1, 1)
    assert compiled["strict_domain"] is True        # block b owns tile b: no second grid row
    with pytest.raises(bridge.GridSizeError, match=r"axpy: grid \(3, 2, 1\): expected extent 1 along y"):
        host_launcher(json.dumps(sim), "axpy").validate_only((a, a.copy(), 2.0), grid=(3, 2))
    b = (a, tile.partition(odd[:300], (128,)), tile.partition(odd[301:], (128,)))    # stored element by element
    c = json.loads(two.compile(b, "sm_90").contract_json)
    assert c["requires"] == ["(q.shape[0] + 127) // 128 == (p.shape[0] + 127) // 128"]
    assert [x["access"] for x in c["args"]] == ["read", "write", "write"]
