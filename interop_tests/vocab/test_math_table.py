"""The one math table (dsl/vocab/math.py) is what every surface uses: each row is `simt.<name>` and
`tile.<name>` (and its Python `math` aliases), lowers to the libdevice / LLVM functions it names (which
exist in libdevice.10.bc), computes the same bits on the SIMT simulator, the tile simulator and the
tile kernel's SIMT lowering, and the docs' lists are the table's."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import simt, tile
from dsl.backend.libdevice import LibdeviceNotFound, find_libdevice
from dsl.compiler import build_options
from dsl.vocab.simt import Intrinsic as SimtIntrinsic
from dsl.tile.api import PY_MATH as TILE_PY_MATH
from dsl.tile.api import Intrinsic as TileIntrinsic
from dsl.vocab import docs, host
from dsl.vocab import math as vocab
from interop_tests.dsl_codegen.codegen_kit import require_ptxas
from interop_tests.vocab import vocab_kit

ROOT = Path(__file__).resolve().parents[2]
ROWS = vocab.rows(builtin_only=True)
FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return vocab_kit.load(tmp_path_factory.mktemp("vocab"), ROWS, "vocab_builtin_rows")


# ------------------------------------------------------------------------------ names and docs
def test_every_row_is_a_simt_and_a_tile_name_with_its_python_aliases():
    for row in ROWS:
        s, t = getattr(simt, row.name), getattr(tile, row.name)
        assert isinstance(s, SimtIntrinsic) and s.key == f"math.{row.name}"
        assert isinstance(t, TileIntrinsic) and t.name == row.name
        assert row.name in simt.__all__ and row.name in tile.__all__
        for alias in row.python:
            if hasattr(math, alias):
                assert vocab.python_functions()[getattr(math, alias)] == row.name
                assert TILE_PY_MATH[getattr(math, alias)] == row.name
    assert len({r.name for r in ROWS}) == len(ROWS) >= 24


def test_docs_lists_are_the_tables_and_current():
    expected = {"docs/dsl.md": {"math-table", "simt-math", "launch-table"}, "docs/tile.md": {"tile-math", "launch-table"}}
    for rel in docs.DOC_FILES:
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert set(docs.blocks_in(text)) == expected[rel]
        assert docs.sync(text) == text, f"{rel} is stale: run `python -m dsl.vocab.docs`"
    table = (ROOT / "docs/dsl.md").read_text(encoding="utf-8")
    for row in ROWS:
        assert f"| `{row.name}({', '.join(row.params)})` |" in table
        assert row.doc in table


def test_a_stale_docs_block_is_detected_and_regenerated():
    stale = "a\n<!-- vocab:tile-math -->\nMath functions: `tile.sqrt`.\n<!-- /vocab:tile-math -->\nb\n"
    fresh = docs.sync(stale)
    assert fresh != stale and fresh.startswith("a\n<!-- vocab:tile-math -->\nMath functions: `tile.sqrt rsqrt")
    assert fresh.endswith("isnan isinf`.\n<!-- /vocab:tile-math -->\nb\n") and docs.sync(fresh) == fresh


def test_the_table_module_imports_neither_numpy_nor_llvmlite():
    """Loaded alone; its one DSL import (dsl.errors, the error tree) loads without dsl/__init__.py,
    which imports both kernel models: a bare `dsl` package stands in for it."""
    path = ROOT / "dsl" / "vocab" / "math.py"
    code = ("import importlib.util, sys, types\n"
            f"pkg = sys.modules['dsl'] = types.ModuleType('dsl'); pkg.__path__ = [{str(ROOT / 'dsl')!r}]\n"
            f"spec = importlib.util.spec_from_file_location('m', {str(path)!r})\n"
            "m = sys.modules['m'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(len(m.BUILTIN), 'numpy' in sys.modules, 'llvmlite' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(ROWS)), "False", "False"]


# ------------------------------------------------------------------------------ lowering
def _libdevice_symbols() -> set[str]:
    try:
        path = find_libdevice()
    except LibdeviceNotFound as exc:
        pytest.skip(f"libdevice not found, cannot check the table's libdevice names: {exc}")
    import llvmlite.binding as llvm
    return {f.name for f in llvm.parse_bitcode(path.read_bytes()).functions}


def _libdevice_names(row: vocab.MathIntrinsic) -> set[str]:
    names = set()
    low = row.lowering
    if low.kind == "libdevice":
        names |= {low.libdevice_name(32), low.libdevice_name(64)}
        if low.fast:
            names.add(low.fast)
    if row.int_exponent:
        names |= {vocab.libdevice(row.int_exponent).libdevice_name(b) for b in (32, 64)}
    return names


def test_every_libdevice_name_of_the_table_exists_in_libdevice():
    symbols = _libdevice_symbols()
    wanted = set().union(*(_libdevice_names(r) for r in ROWS))
    assert {"__nv_expf", "__nv_exp", "__nv_fast_expf", "__nv_powif", "__nv_powi"} <= wanted
    assert wanted - symbols == set()


def _llvm_ir(kernel, dtype, n: int = 64) -> str:
    from dsl.backend.codegen import to_llvm_ir
    args = [np.ones(n, dtype) for _ in range(4)]
    return str(to_llvm_ir(kernel.build(*args), build_options(kernel.options, "sm_90")))


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_every_row_reaches_the_back_end_through_its_lowering(gen, dt):
    bits = 32 if dt == "f32" else 64
    plain, fast = _llvm_ir(gen.simt_all, FLOATS[dt]), _llvm_ir(gen.simt_all_fast, FLOATS[dt])
    for row in ROWS:
        low = row.lowering
        if low.kind == "libdevice":
            assert re.search(rf'@"?{low.libdevice_name(bits)}"?\(', plain), row.name
            assert re.search(rf'@"?{low.libdevice_name(bits, fastmath=True)}"?\(', fast), row.name
        elif low.kind == "llvm":
            assert re.search(rf'@"?llvm\.{low.name}\.{dt}"?\(', plain), row.name
    assert "fcmp uno" in plain                      # isnan


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow
def test_kernels_calling_every_row_assemble(gen, arch):
    from dsl.backend.ptxas import assemble
    require_ptxas()
    for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
        args = [np.ones(300, dtype) for _ in range(3)]
        for kernel in (gen.simt_all, gen.simt_all_fast):
            ck = kernel.compile(*args, np.zeros(300, dtype), arch=arch)
            assert [u.kernel for u in assemble(ck.ptx, arch)[0]] == [ck.name]
        ptx = gen.tile_all.ptx(*args, tile.partition(np.zeros(300, dtype), (128,)), arch=arch)
        assert assemble(ptx, arch)[0][0].spill_stores == 0
        # flushing denormals (the tile switch ftz; simt_all_fast through fastmath): LLVM's .ftz on
        # sm_90's bf16 compares, which PTX lacks, is dropped (dsl/backend/codegen.py emit_ptx)
        flushing = tile.kernel(gen.tile_all.pyfunc, lowering={"ftz": True})
        assert assemble(flushing.ptx(*args, tile.partition(np.zeros(300, dtype), (128,)), arch=arch), arch)[0]


# ------------------------------------------------------------------------------ numerics
def _run_all_three(gen, row, x, y, z):
    pred = row.typing == vocab.PREDICATE
    out_dtype = np.int32 if pred else x.dtype
    n = len(x)
    outs = []
    o = np.full(n, 7, out_dtype)
    getattr(gen, f"simt_{row.name}").simulate(x, y, z, o, grid=(-(-n // 128),), block=(128,))
    outs.append(o)
    for method in ("simulate", "simulate_lowered"):
        o = np.full(n, 7, out_dtype)
        getattr(getattr(gen, f"tile_{row.name}"), method)(x, y, z, tile.partition(o, (128,)))
        outs.append(o)
    return outs


@pytest.mark.parametrize("dt", sorted(FLOATS))
@pytest.mark.parametrize("name", [r.name for r in ROWS])
def test_simt_simulator_tile_simulator_and_tile_lowering_agree_bit_for_bit(gen, rng, name, dt):
    """Before the table, the tile simulator computed f32 math with NumPy's f32 kernels (up to 3 ulp
    from the SIMT simulator's f64-then-round)."""
    row = vocab.get(name)
    x, y, z = vocab_kit.operands(rng, 300, FLOATS[dt])
    simt_out, tile_out, lowered_out = _run_all_three(gen, row, x, y, z)
    assert vocab_kit.same_values(simt_out, tile_out), f"{name} {dt}: SIMT and tile simulators differ"
    assert vocab_kit.same_values(tile_out, lowered_out), f"{name} {dt}: tile sim and its lowering differ"


KNOWN = [  # (function, operands, f32 result): hand-checked values, exact in f32
    ("sqrt", (2.25,), 1.5), ("rsqrt", (0.25,), 2.0), ("exp", (0.0,), 1.0), ("exp2", (10.0,), 1024.0),
    ("log", (1.0,), 0.0), ("log2", (0.125,), -3.0), ("log1p", (0.0,), 0.0), ("sin", (0.0,), 0.0),
    ("cos", (0.0,), 1.0), ("tan", (-0.0,), -0.0), ("tanh", (np.inf,), 1.0), ("erf", (-np.inf,), -1.0),
    ("pow", (-2.0, 3.0), -8.0), ("floor", (-1.5,), -2.0), ("ceil", (-1.5,), -1.0), ("trunc", (-1.5,), -1.0),
    ("fabs", (-0.0,), 0.0), ("copysign", (3.0, -0.0), -3.0), ("fmod", (-7.0, 3.0), -1.0),
    ("fmin", (np.nan, 2.0), 2.0), ("fmax", (np.nan, -2.0), -2.0), ("isnan", (np.nan,), True),
    ("isinf", (-np.inf,), True), ("isinf", (3e38,), False),
    # fma rounds once: (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; a separate multiply would lose 2^-24
    ("fma", (1 + 2.0**-12, 1 + 2.0**-12, -1.0), 2.0**-11 + 2.0**-24),
]


@pytest.mark.parametrize("fn,args,want", KNOWN, ids=[f"{k[0]}{k[1]}" for k in KNOWN])
def test_host_evaluation_gives_the_known_values(fn, args, want):
    got = host.evaluate(fn, [np.array([a], np.float32) for a in args], np.float32)
    expected = np.array([want], bool if isinstance(want, bool) else np.float32)
    assert vocab_kit.same_values(got, expected), (fn, args, got)


def test_f16_math_goes_through_f32_like_cuda():
    # exp(x) for an f16 x: the f32 result, rounded to f16 (not the f64 result rounded once to f16)
    x = np.arange(-2000, 2000, dtype=np.int64).astype(np.float16) / np.float16(256)
    got = host.evaluate("exp", [x], np.float16)
    via_f32 = np.exp(x.astype(np.float64)).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(got, via_f32)
    assert host.evaluate("sqrt", [np.array([2.0], ml_dtypes.bfloat16)], ml_dtypes.bfloat16).dtype == \
        np.dtype(ml_dtypes.bfloat16)


def test_fma_of_f64_operands_is_correctly_rounded():
    a = np.array([1 + 2.0**-30], np.float64)
    got = host.evaluate("fma", [a, a, np.array([-1.0])], np.float64)
    assert got[0] == 2.0**-29 + 2.0**-60           # a*a + c in two roundings would give 2**-29
