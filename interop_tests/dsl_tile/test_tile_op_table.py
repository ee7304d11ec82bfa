"""The tile-op table (dsl/tile/tileops.py) is the one list of tile ops: `tile.<name>`, the methods
the front end knows, argument binding and the docs all come from it, and every row works end to end.

Each row has an example below, run by the tile simulator and by the GPU lowering on the SIMT CPU
simulator against NumPy written out by hand; docs/contributing.md's "A new tile op" recipe names the
places a new op touches, and the last test checks that they exist and cover every IR node.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from dsl import tile
from dsl.errors import DslCompileError
from dsl.tile import handlers, tileops
from dsl.tile import ir as T
from dsl.tile.api import Intrinsic
from dsl.tile.frontend import TileFrontend
from dsl.tile.intrinsics import bind, call_intrinsic
from dsl.tile.values import Method, ParamHandle
from dsl.types import f16, f32, i32
from dsl.vocab import math as vocab

REPO = Path(__file__).resolve().parents[2]
RUNNERS = ["simulate", "simulate_lowered"]


# ------------------------------------------------------------------------------ examples, one per row
@tile.kernel
def reductions(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), (4, 8))
    s = tile.sum(v, axis=1, keepdims=True)
    mx = v.max(axis=1, keepdims=True)
    mn = tile.min(v, 1, True)
    am = tile.argmax(v, axis=1, keepdims=True).astype(f32)
    an = v.argmin(axis=1, keepdims=True).astype(f32)
    k = tile.arange(8)[None, :]
    out.store(tile.where(k == 0, s, tile.where(k == 1, mx, tile.where(k == 2, mn, tile.where(k == 3, am, an)))))


def reductions_case(rng):
    x = rng.permutation(64).reshape(8, 8).astype(np.float32)
    out = np.zeros((8, 8), np.float32)
    ref = np.empty_like(out)
    ref[:, 0], ref[:, 1], ref[:, 2], ref[:, 3] = x.sum(1), x.max(1), x.min(1), x.argmax(1)
    ref[:, 4:] = x.argmin(1)[:, None]
    return (x, tile.partition(out, (4, 8))), out, ref


@tile.kernel
def shapes(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), tile.bid(1)), (4, 8))
    r = tile.transpose(v).reshape(4, 8)
    p = tile.permute(v.reshape((2, 2, 8)), (1, 0, 2)).reshape((4, 8))
    q = v.transpose(1, 0).transpose() + v.permute(0, 1)
    b = tile.broadcast_to(tile.expand_dims(tile.sum(v, axis=0), 0), (4, 8))
    out.store(r + p * 10.0 + q * 100.0 + b * 1000.0 + tile.zeros((4, 8)) + tile.full((4, 8), 0.5))


def shapes_case(rng):
    x = rng.integers(0, 32, (8, 16)).astype(np.float32)
    out = np.zeros((8, 16), np.float32)
    ref = np.empty_like(out)
    for i in range(2):
        for j in range(2):
            v = x[4 * i:4 * i + 4, 8 * j:8 * j + 8]
            ref[4 * i:4 * i + 4, 8 * j:8 * j + 8] = (v.T.reshape(4, 8) + v.reshape(2, 2, 8).transpose(1, 0, 2)
                                                     .reshape(4, 8) * 10 + 2 * v * 100 + v.sum(0) * 1000 + 0.5)
    return (x, tile.partition(out, (4, 8))), out, ref


@tile.kernel
def elementwise(x: tile.Array[i32, 1], out: tile.Partition[i32, 1]):
    v = tile.load(x, tile.bid(0), out.tile_shape)
    k = tile.arange(8, dtype=i32)
    f = tile.astype(v, f32) * 0.5
    out.store(tile.where(v > 0, tile.maximum(v, k), tile.minimum(v, -k)) + tile.abs(v) * 100
              + tile.abs(f).astype(i32) * 10000 + tile.full((8,), 3, i32))


def elementwise_case(rng):
    x = rng.integers(-20, 21, 16).astype(np.int32)
    out = np.zeros(16, np.int32)
    k = np.tile(np.arange(8, dtype=np.int32), 2)
    ref = (np.where(x > 0, np.maximum(x, k), np.minimum(x, -k)) + np.abs(x) * 100
           + np.trunc(np.abs(x * 0.5)).astype(np.int32) * 10000 + 3)
    return (x, tile.partition(out, (8,))), out, ref


@tile.kernel
def grid(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], stats: tile.Partition[f32, 1]):
    tile.block_order(2, 2)          # the 2 x 2 grid's tiles 0, 2, 1, 3 (runs of 2, two at a time): results unchanged
    v = tile.load(x, (tile.bid(0), tile.bid(1)), out.tile_shape, padding=0)
    mine = out.load() + tile.load(out, padding=1)
    out.store(v + mine + tile.bid(0) * 100 + tile.bid(1) * 1000 + tile.num_blocks(1) * 10000
              + out.num_tiles(0) * 100000)
    tile.store(stats, tile.full(stats.tile_shape, tile.num_tiles(stats, 0), f32))


def grid_case(rng):
    x = rng.integers(0, 10, (8, 12)).astype(np.float32)
    out = rng.integers(0, 10, (8, 12)).astype(np.float32)
    before = out.copy()
    stats = np.zeros(4, np.float32)
    bi, bj = np.meshgrid(np.arange(8) // 4, np.arange(12) // 8, indexing="ij")
    ref_out = x + 2 * before + bi * 100 + bj * 1000 + 2 * 10000 + 2 * 100000
    # out (8, 12) in (4, 8) tiles: a 2 x 2 grid, the right column of tiles half outside the array
    return (x, tile.partition(out, (4, 8)), tile.partition(stats, (1,))), (out, stats), (ref_out, np.full(4, 4.0))


@tile.kernel
def products(a: tile.Array[f16, 2], b: tile.Array[f16, 2], out: tile.Partition[f32, 2]):
    x = tile.load(a, (tile.bid(0), 0), (16, 16))
    y = tile.load(b, (0, tile.bid(1)), (16, 16))
    out.store(tile.mma(x, y, tile.matmul(x, y)) + tile.matmul(x, y, acc=tile.zeros((16, 16))))


def products_case(rng):
    a = rng.integers(-3, 4, (32, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (16, 32)).astype(np.float16)
    out = np.zeros((32, 32), np.float32)
    return (a, b, tile.partition(out, (16, 16))), out, 3 * (a.astype(np.float64) @ b.astype(np.float64))


@tile.kernel
def chunks(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    for k in range(tile.cdiv(x.shape[1], 4)):
        out.store(tile.load(x, (tile.bid(0), k), (2, 4)) * 2.0, chunk=(0, k))


def chunks_case(rng):
    x = rng.integers(-50, 50, (4, 10)).astype(np.float32)
    out = np.zeros((4, 10), np.float32)
    # out (4, 10) in (2, 16) tiles: 3 chunks of (2, 4) per block, the last cut at column 10
    return (x, tile.partition(out, (2, 16))), out, 2 * x


@tile.kernel
def atomics(x: tile.Partition[i32], src: tile.Array[i32], acc: tile.Atomic[i32, 1],
            hist: tile.Atomic[i32, 1], out: tile.Partition[i32]):
    v = x.load(padding=-1)                               # the padding is skipped by the scatters
    tile.atomic_add(acc, 0, tile.sum(x.load()))
    tile.atomic_max(acc, 1, tile.max(v))
    tile.atomic_min(acc, 2, tile.min(x.load(padding=99)))
    tile.atomic_add(hist, 3, tile.full((8,), 1, i32))   # the region hist[24:32]
    tile.scatter_add(hist, v, 1)
    tile.scatter_max(hist, v + 8, v * 10)
    tile.scatter_min(hist, v + 16, -v, mask=v > 2)
    out.store(tile.gather(src, v, padding=-5))


def atomics_case(rng):
    x = rng.integers(0, 8, 12).astype(np.int32)            # 2 blocks of 8, the second cut at 12
    src = np.arange(100, 106, dtype=np.int32)               # x >= 6 gathers the padding
    acc, hist, out = np.array([0, -100, 100], np.int32), np.zeros(32, np.int32), np.zeros(12, np.int32)
    seen = np.bincount(x, minlength=8) > 0
    b = np.arange(8)
    want_hist = np.concatenate([np.bincount(x, minlength=8), np.where(seen, 10 * b, 0),
                                np.where(seen & (b > 2), -b, 0), np.full(8, 2)]).astype(np.int32)
    want_out = np.where(x < 6, 100 + x, -5).astype(np.int32)
    return ((tile.partition(x, (8,)), src, acc, hist, tile.partition(out, (8,))), (acc, hist, out),
            (np.array([x.sum(), x.max(), x.min()], np.int32), want_hist, want_out))


@tile.kernel
def arrivals(x: tile.Partition[i32, 2], acc: tile.Atomic[i32, 2], counts: tile.Atomic[i32, 1],
             out: tile.Atomic[i32, 2]):
    i = tile.bid(0)
    tile.atomic_add(acc, (i, 0), tile.sum(x.load(), axis=1).reshape((4, 1)))
    if tile.arrive(counts, i, tile.num_blocks(1)):        # the row block's last block: its sums are done
        tile.store_at(out, (i, 0), tile.load(acc, (i, 0), (4, 1)) * 2)


def arrivals_case(rng):
    x = rng.integers(-50, 50, (10, 12)).astype(np.int32)   # (4, 4) tiles: 3 x 3 blocks, cut at 10 rows
    acc, counts, out = np.zeros((10, 1), np.int32), np.zeros(3, np.int32), np.full((10, 1), -1, np.int32)
    want = (2 * x.astype(np.int64).sum(axis=1, keepdims=True)).astype(np.int32)
    return (tile.partition(x, (4, 4)), acc, counts, out), (out, counts), (want, np.zeros(3, np.int32))


CASES = {"reductions": (reductions, reductions_case), "shapes": (shapes, shapes_case),
         "elementwise": (elementwise, elementwise_case), "grid": (grid, grid_case),
         "products": (products, products_case), "chunks": (chunks, chunks_case),
         "atomics": (atomics, atomics_case), "arrivals": (arrivals, arrivals_case)}
EXAMPLES = {"sum": "reductions", "max": "reductions", "min": "reductions", "argmax": "reductions",
            "argmin": "reductions", "where": "reductions", "arange": "reductions",
            "reshape": "shapes", "transpose": "shapes", "permute": "shapes", "broadcast_to": "shapes",
            "expand_dims": "shapes", "zeros": "shapes", "full": "shapes",
            "astype": "elementwise", "maximum": "elementwise", "minimum": "elementwise", "abs": "elementwise",
            "bid": "grid", "block_order": "grid", "num_blocks": "grid", "num_tiles": "grid", "load": "grid", "store": "grid",
            "matmul": "products", "mma": "products", "cdiv": "chunks",
            **{f"{form}_{op}": "atomics" for form in ("atomic", "scatter") for op in ("add", "max", "min")},
            "gather": "atomics", "arrive": "arrivals", "store_at": "arrivals"}


def test_every_row_has_an_example_that_calls_it():
    assert sorted(EXAMPLES) == sorted(tileops.names()), "add an example for each new row (and drop old ones)"
    for name, case in EXAMPLES.items():
        src = inspect.getsource(CASES[case][0].pyfunc)
        assert f"tile.{name}(" in src or f".{name}(" in src, f"{case} does not call {name}"


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_row_runs_on_the_simulator_and_the_lowering(case, runner, rng):
    kernel, make = CASES[case]
    args, outs, refs = make(rng)
    getattr(kernel, runner)(*args)
    for out, ref in zip(*((outs, refs) if isinstance(outs, tuple) else ((outs,), (refs,)))):
        np.testing.assert_array_equal(out, ref)


# ------------------------------------------------------------------------------ the table drives the API
def test_every_row_has_a_handler_in_the_handlers_module():
    for row in tileops.TILE_OPS:
        assert callable(row.handler) and getattr(handlers, row.handler.__name__) is row.handler, row.name


def test_every_tile_function_comes_from_one_of_the_two_tables():
    exported = {n for n, v in vars(tile).items() if isinstance(v, Intrinsic)}
    assert exported == set(tileops.names()) | set(vocab.names())
    for row in tileops.TILE_OPS:
        assert getattr(tile, row.name).__doc__ == row.doc_line() and row.name in tile.__all__


def _doc_params(line: str) -> tuple[str, list[str], str]:
    """(name, ["x", "axis=None", ...], prose) of a documentation line `name(params): prose`."""
    head, prose = line.split(": ", 1)
    call = ast.parse(head, mode="eval").body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name), line
    params = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
    return call.func.id, params, prose


def test_the_doc_names_exactly_the_rows_parameters():
    every_param = {p.name for row in tileops.TILE_OPS for p in row.params}
    for row in tileops.TILE_OPS:
        name, params, prose = _doc_params(getattr(tile, row.name).__doc__)
        assert name == row.name and [p.split("=")[0] for p in params] == list(row.param_names)
        # a parameter named in the prose (in backticks) must be one of this row's
        named = set(re.findall(r"`([A-Za-z_]\w*)`", prose)) & every_param
        assert named <= set(row.param_names), f"tile.{row.name}'s doc names {named - set(row.param_names)}"


def test_argmax_and_argmin_document_the_keepdims_they_take():
    assert tile.argmax.__doc__.startswith("argmax(x, axis=None, keepdims=False): index (i32)")
    assert tile.argmin.__doc__.startswith("argmin(x, axis=None, keepdims=False): index (i32)")
    assert "also x.argmax(axis=None, keepdims=False)" in tile.argmax.__doc__


class _StubFrontend:
    """What binding needs of the front end: errors (raised as ValueError here) and locations."""

    def err(self, node, msg):
        return ValueError(msg)

    def loc(self, node):
        return None


def test_defaults_in_the_doc_are_what_the_binder_fills_in():
    for row in tileops.TILE_OPS:
        _, params, _ = _doc_params(row.doc_line())
        required = [object() for p in row.params if p.required]
        bound = bind(_StubFrontend(), row.name, row.params, required, {}, None)
        for text in (t for t in params if "=" in t):
            name, default = text.split("=")
            expected = getattr(tile, default).ir if default in ("f32", "i32") else ast.literal_eval(default)
            assert bound[name] == expected and type(bound[name]) is type(expected), (row.name, name)


# ------------------------------------------------------------------------------ front end and binding
def _frontend() -> TileFrontend:
    x = np.zeros((8, 8), np.float32)
    fe = TileFrontend(reductions.pyfunc, list(reductions.signature((x, tile.partition(np.zeros((8, 8), np.float32), (4, 8))))))
    fe.build()
    return fe


def test_every_method_name_comes_from_the_table():
    fe = _frontend()
    node = fe.fdef
    value = T.Const(1.0, T.TileType(tile.f32.ir, (4, 4)), fe.loc(node))
    part = ParamHandle(fe.grid_param)
    probes = set(tileops.names()) | set(vocab.names()) | {"mean", "cumsum", "item"}
    for receiver, kind in ((value, tileops.TILE), (part, tileops.PARTITION)):
        for name in sorted(probes):
            try:
                got = fe.attribute(receiver, name, node)
            except DslCompileError:
                got = None
            is_method = isinstance(got, Method)
            assert is_method == (name in tileops.method_names(kind)), (kind, name)
    assert set(tileops.method_names(tileops.TILE)) == {"sum", "max", "min", "argmax", "argmin", "reshape",
                                                       "transpose", "permute", "astype"}
    assert set(tileops.method_names(tileops.PARTITION)) == {"load", "store", "num_tiles"}


@tile.kernel
def wrong_keyword(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (0, 0), (4, 8))
    out.store(tile.sum(v, axes=1, keepdims=True))


@tile.kernel
def wrong_method_keyword(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (0, 0), (4, 8))
    out.store(v.argmax(axis=1, keep_dims=True))


@tile.kernel
def wrong_partition_keyword(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    out.store(val=tile.load(x, (0, 0), (4, 8)))


@tile.kernel
def wrong_math_keyword(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    out.store(tile.exp(tile.load(x, (0, 0), (4, 8)), base=2.0))


@pytest.mark.parametrize("kernel, text", [
    (wrong_keyword, "tile.sum(x, axis=None, keepdims=False): unexpected keyword argument `axes`"),
    (wrong_method_keyword, "v.argmax(axis=None, keepdims=False): unexpected keyword argument `keep_dims`"),
    (wrong_partition_keyword, "out.store(value, chunk=None): unexpected keyword argument `val`"),
    (wrong_math_keyword, "tile.exp(x): unexpected keyword argument `base`"),
])
def test_a_wrong_keyword_is_refused_naming_it(kernel, text):
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(DslCompileError) as info:
        kernel.tile_ir(x, tile.partition(np.zeros((8, 8), np.float32), (4, 8)))
    assert text in str(info.value) and info.value.line > 0


@pytest.mark.parametrize("name", tileops.names())
def test_every_row_refuses_a_keyword_it_does_not_have(name):
    with pytest.raises(ValueError, match="unexpected keyword argument `no_such_parameter`"):
        call_intrinsic(_StubFrontend(), name, [], {"no_such_parameter": 1}, None)


def test_too_many_arguments_and_missing_ones_are_refused():
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(DslCompileError, match=r"out.store\(value, chunk=None\) takes at most 2 arguments, got 3: .*its own tile"):
        _store_twice.tile_ir(x, tile.partition(np.zeros((8, 8), np.float32), (4, 8)))
    with pytest.raises(DslCompileError, match=r"tile.mma\(a, b, acc\): missing argument `acc`"):
        _mma_without_acc.tile_ir(x, tile.partition(np.zeros((8, 8), np.float32), (4, 8)))


@tile.kernel
def _store_twice(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    out.store(tile.load(x, (0, 0), (4, 8)), (0, 0), 1)


@tile.kernel
def _mma_without_acc(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    out.store(tile.mma(tile.load(x, (0, 0), (4, 8)), tile.load(x, (0, 0), (8, 8))))


# ------------------------------------------------------------------------------ docs and the recipe
def _gen():
    spec = importlib.util.spec_from_file_location("gen_api_docs", REPO / "scripts" / "gen_api_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_in_tile_md_is_current():
    text = (REPO / "docs" / "tile.md").read_text(encoding="utf-8")
    assert "<!-- api:tile-ops -->" in text
    assert _gen().sync_tile_md(text) == text, "docs/tile.md is stale: run python scripts/gen_api_docs.py"
    for row in tileops.TILE_OPS:
        assert f"`tile.{row.signature()}`" in text


def _recipe() -> str:
    text = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
    return text.split("## A new tile op\n", 1)[1].split("\n## ", 1)[0]


def _classes() -> dict[str, list[ast.ClassDef]]:
    """Every class defined under dsl/tile/, by name (wherever the lowering's files move)."""
    found: dict[str, list[ast.ClassDef]] = {}
    for path in sorted((REPO / "dsl" / "tile").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return found


def _the_class(name: str, classes: dict[str, list[ast.ClassDef]]) -> ast.ClassDef:
    assert len(classes.get(name, [])) == 1, f"expected one class {name} under dsl/tile/"
    return classes[name][0]


def _methods(cls: str, classes: dict[str, list[ast.ClassDef]]) -> set[str]:
    """Method names of `cls` and of its bases defined under dsl/tile/ (a lowering split in mixins)."""
    node = _the_class(cls, classes)
    names = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            names |= _methods(base.id, classes)
    return names


def test_the_recipe_places_exist_and_cover_every_node():
    recipe = _recipe()
    paths = re.findall(r"`((?:dsl|interop_tests|scripts|docs)/[\w/]*(?:\.py|\.md)?)`", recipe)
    assert {"dsl/tile/tileops.py", "dsl/tile/handlers.py", "dsl/tile/ops.py", "dsl/tile/ir.py",
            "dsl/tile/sim.py", "interop_tests/dsl_tile/test_tile_op_table.py"} <= set(paths)
    assert all((REPO / p).exists() for p in paths), [p for p in paths if not (REPO / p).exists()]
    assert "`Lowerer.x_<Node>`" in recipe and "`BlockInterpreter`" in recipe and "`EXAMPLES`" in recipe
    classes = _classes()
    nodes = sorted(c.__name__ for c in T.TExpr.__subclasses__())
    lowered = _methods("Lowerer", classes)
    assert [n for n in nodes if f"x_{n}" not in lowered] == []
    sim = ast.unparse(_the_class("BlockInterpreter", classes))
    assert [n for n in nodes + ["Store", "Assign", "For", "If"] if f"T.{n}" not in sim] == []
