"""docs/contributing.md's math-intrinsic recipe, followed literally: its example row, read out of the page,
registered with register_math (the run-time form of adding it to BUILTIN) and nothing else, works from a
SIMT and a tile kernel: PTX (assembled by ptxas where present), both simulators against NumPy, the GPU;
unregistering removes it again. The example must be a row no test registers (the page's old `cbrt`
was test_register_math.py's fixture, so pasting it broke 16 tests); once somebody does add it to
BUILTIN as the page says, these tests check the built-in row instead, so following the page never
breaks them.
"""
from __future__ import annotations

import ast
import math
import re
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import simt, tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.vocab import MathIntrinsic, register_math, unregister_math
from dsl.vocab import math as vocab
from interop_tests.vocab import vocab_kit

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "contributing.md"
FLOATS = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
N = 1024                                       # 8 blocks of 128 threads, 4 tiles of 256


def example_source() -> str:
    """The one ```python block of the page's 'A new math intrinsic' section."""
    text = DOC.read_text(encoding="utf-8")
    section = re.search(r"^## A new math intrinsic\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"{DOC}: no '## A new math intrinsic' section"
    blocks = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1, f"{DOC}: 'A new math intrinsic' must show one python block (the row), found {len(blocks)}"
    return blocks[0]


def example_row() -> MathIntrinsic:
    """The block evaluated as the line of dsl/vocab/math.py it tells you to add (its names resolve there)."""
    src = textwrap.dedent(example_source()).strip().removesuffix(",")
    tree = ast.parse(src, mode="eval")
    call = tree.body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "MathIntrinsic", \
        f"{DOC}: the example must be one MathIntrinsic(...) row, got {src!r}"
    return eval(compile(tree, str(DOC), "eval"), dict(vars(vocab)))   # the repository's own page


def _builtin(name: str) -> MathIntrinsic | None:
    return next((r for r in vocab.rows(builtin_only=True) if r.name == name), None)


def _fields(row: MathIntrinsic) -> tuple:
    return (row.name, row.arity, row.typing, row.lowering, row.doc, row.python, row.reference.__name__)


@pytest.fixture(scope="module")
def row() -> MathIntrinsic:
    return example_row()


@pytest.fixture
def added(row):
    """The row as the recipe adds it: registered for the test (and removed after), or already built in."""
    built_in = _builtin(row.name)
    if built_in is not None:
        assert _fields(built_in) == _fields(row), f"{DOC}'s example differs from the built-in row {row.name}"
        yield built_in
        return
    registered = register_math(row)
    try:
        yield registered
    finally:
        unregister_math(row.name)


@pytest.fixture(scope="module")
def kernels(row, tmp_path_factory):
    """simt_<name> and tile_<name>, generated from the row (vocab_kit)."""
    mod = vocab_kit.load(tmp_path_factory.mktemp("recipe"), (row,), "contributing_recipe_kernels")
    return getattr(mod, f"simt_{row.name}"), getattr(mod, f"tile_{row.name}")


def oracle(row: MathIntrinsic, args: list[np.ndarray]) -> np.ndarray:
    """NumPy's function of the row's Python name (Python's math module's, elementwise, if NumPy lacks it),
    on float64: what the row's `math.<name>` alias claims it computes. Not the row's own reference."""
    name = row.python[0] if row.python else row.name
    fn = getattr(np, name, None) or (np.vectorize(getattr(math, name), otypes=[np.float64])
                                     if hasattr(math, name) else None)
    assert fn is not None, f"{DOC}: neither numpy.{name} nor math.{name} exists to check the example against"
    with np.errstate(all="ignore"):                # overflow to inf and NaN operands are part of the check
        return fn(*(a.astype(np.float64) for a in args[: row.arity]))


def expected(row: MathIntrinsic, args: list[np.ndarray]) -> np.ndarray:
    """Computed in f64, rounded once to the operand type (f16/bf16 through f32, as CUDA's half math)."""
    dtype = args[0].dtype
    r = oracle(row, args)
    with np.errstate(over="ignore"):
        return r if dtype == np.float64 else r.astype(np.float32).astype(dtype)


def test_the_example_is_a_row_no_test_registers():
    row = example_row()
    mine = Path(__file__).resolve()
    clash = [str(p.relative_to(ROOT)) for p in (ROOT / "interop_tests").rglob("*.py")
             if p.resolve() != mine and re.search(rf"""MathIntrinsic\(\s*(?:name=)?["']{re.escape(row.name)}["']""",
                                                  p.read_text(encoding="utf-8"))]
    assert not clash, f"{DOC}'s example row {row.name!r} is also built by {clash}: adding it breaks them"


def test_the_example_row_names_functions_libdevice_has(row):
    if row.lowering.kind != "libdevice":
        pytest.skip(f"the example lowers through {row.lowering.kind}, not libdevice")
    import llvmlite.binding as llvm

    from dsl.backend.libdevice import LibdeviceNotFound, find_libdevice
    try:
        path = find_libdevice()
    except LibdeviceNotFound as exc:
        pytest.skip(f"libdevice not found: {exc}")
    symbols = {f.name for f in llvm.parse_bitcode(path.read_bytes()).functions}
    wanted = {row.lowering.libdevice_name(32), row.lowering.libdevice_name(64)}
    assert wanted <= symbols, f"{DOC}'s example names {sorted(wanted - symbols)}, which libdevice lacks"


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_the_added_row_compiles_to_ptx_in_simt_and_tile_kernels(added, kernels, dtype):
    simt_k, tile_k = kernels
    x = np.zeros(N, dtype)
    sources = {"simt": simt_k.ptx(x, x, x, x, arch="sm_90"),
               "tile": tile_k.ptx(x, x, x, tile.partition(np.zeros(N, dtype), (256,)), arch="sm_90")}
    for model, ptx in sources.items():
        assert ".entry" in ptx and ".extern" not in ptx, f"{model}: libdevice not linked in"
        if added.lowering.kind == "libdevice":
            assert "__nv_" not in ptx, f"{model}: a libdevice call was left unresolved"
        if find_ptxas() is not None:
            assert assemble(ptx, "sm_90")[0], f"{model}: ptxas produced no kernel"


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_the_added_row_simulates_like_numpy_in_both_kernel_models(added, kernels, dtype):
    simt_k, tile_k = kernels
    args = vocab_kit.operands(np.random.default_rng(5), N, dtype)
    want = expected(added, args)
    out = np.zeros(N, dtype)
    simt_k.simulate(*args, out, grid=(N // 128,), block=(128,))
    assert vocab_kit.same_values(out, want), "SIMT simulator"
    for method in ("simulate", "simulate_lowered"):
        out = np.zeros(N, dtype)
        getattr(tile_k, method)(*args, tile.partition(out, (256,)))
        assert vocab_kit.same_values(out, want), f"tile {method}"


def test_unregistering_the_row_removes_it_again(row):
    if _builtin(row.name) is not None:
        pytest.skip(f"{row.name} is built in now (the recipe was followed): nothing to unregister")
    register_math(row)
    assert getattr(simt, row.name).key == f"math.{row.name}" and getattr(tile, row.name).name == row.name
    unregister_math(row.name)
    assert vocab.get(row.name) is None
    assert not hasattr(simt, row.name) and not hasattr(tile, row.name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_added_row_runs_on_the_gpu(added, kernels, dtype):
    import bridge
    simt_k, tile_k = kernels
    rng = np.random.default_rng(7)
    args = [rng.uniform(-10, 10, 100_352).astype(dtype) for _ in range(3)]
    want = oracle(added, args)
    dev = [bridge.from_host(a) for a in args]
    out, tout = (bridge.from_host(np.full_like(args[0], 123.0)) for _ in range(2))
    simt_k(*dev, out)
    tile_k(*dev, tile.partition(tout, (256,)))
    for model, got in (("simt", out.to_host()), ("tile", tout.to_host())):
        ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
        assert ulps.max() <= 2, f"{model}: {ulps.max()} ulp from NumPy"     # libdevice: <= 1 ulp
