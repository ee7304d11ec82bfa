"""docs/contributing.md "A PTX instruction family", followed literally: the example row of the recipe is
added to the table with its semantics, emitted from a hand-built kernel, assembled with ptxas, and run
on the simulator against NumPy; and the rule the recipe states (the lowering never imports the
simulator) holds for the whole lowering package."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from dsl.backend.ptxas import assemble, find_ptxas
from dsl.ir import nodes as N
from dsl.ir.types import I64, U32, VOID
from dsl.tile.ptx import sm80, table
from dsl.tile.ptx.sm80 import semantics
from dsl.tile.ptx.table import PtxFamily, SemanticsRef, instruction

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "contributing.md"


def _recipe_row() -> PtxFamily:
    """The example row, as the recipe prints it (evaluated with the table module's names)."""
    text = RECIPE.read_text(encoding="utf-8")
    section = text.split("## A PTX instruction family", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return eval(code.strip().rstrip(","), {"PtxFamily": PtxFamily, "VOID": VOID, "U32": U32})  # noqa: S307


def _cp_async_4(args: list, mach, lanes: np.ndarray) -> None:
    """The recipe's semantics for its row: 4 bytes global -> shared, landing at the group's wait."""
    dst, src = (np.asarray(a) for a in args)
    data = mach.addresses.global_read(src, 4)
    sm80.copies(mach).issue(lanes, mach.lanes.blk[lanes], dst, data)


@pytest.fixture
def recipe_row(monkeypatch):
    row = _recipe_row()
    assert row.name not in table.FAMILIES, "the recipe's example must be a row the table does not have"
    module, _, name = row.semantics.partition(":")
    assert module == "sm80" and not hasattr(sm80, name)
    monkeypatch.setitem(table.FAMILIES, row.name, row)
    monkeypatch.setattr(sm80, name, semantics(_cp_async_4, machine=True, per_thread=True), raising=False)
    monkeypatch.setattr(table, "_RESOLVED", {})
    return row


def _copy_kernel(row: PtxFamily) -> N.Function:
    """Each thread copies x[i] (u32) into shared memory with the new instruction, commits and waits,
    then writes the shared word to out[i]."""
    from dsl.ir import tile_nodes as TN
    from dsl.ir.types import ArrayType
    x = N.Param("x", ArrayType(U32, 1), 0)
    out = N.Param("out", ArrayType(U32, 1, writable=True), 1)

    def P(p):
        return N.ParamRef(p)

    def R(v):
        return N.ReadVar(v)
    buf = N.SharedAlloc("stage", ArrayType(U32, 1, writable=True, space="shared", shape=(128,)))
    i, t = N.Var("i", I64), N.Var("t", I64)
    src = TN.GlobalAddress(P(x), [R(i)])
    dst = TN.SharedAddress(N.SharedArray(buf), R(t))
    body = [
        N.Assign(i, N.TupleGet(N.ThreadIndexValue(1), 0, I64)), N.Assign(t, N.Special("tid.x")),
        N.GuardedRegion(P(x), [R(i)], [
            N.ExprStmt(instruction(row.name, [dst, src])),
            N.ExprStmt(instruction("cp.async.commit_group", [])),
            N.ExprStmt(instruction("cp.async.wait_group", [], keep=0)),
            N.Store(P(out), [R(i)], N.Load(N.SharedArray(buf), [R(t)], "none", 0, U32, N.NOLOC), "guarded", 0,
                    N.NOLOC),
        ]),
    ]
    return N.Function("recipe_copy", [x, out], VOID, body, True, shared=[buf], exact_block=(128, 1, 1))


def test_the_recipe_row_runs_on_the_simulator_against_numpy(recipe_row, rng):
    from dsl.sim import run
    n = 300                                               # not a multiple of the block
    x = rng.integers(0, 2**32, n, dtype=np.uint32)
    out = np.full(n, 0xDEADBEEF, np.uint32)
    run(_copy_kernel(recipe_row), [x, out], grid=3, block=128)
    np.testing.assert_array_equal(out, x)
    two = [N.Const(0, U32), N.Const(0, I64)]
    assert isinstance(instruction(recipe_row.name, two).sim, SemanticsRef)
    with pytest.raises(TypeError, match=r"'cp.async.ca' takes 2 operand\(s\) \('r,l'\), got 1"):
        instruction(recipe_row.name, two[:1])


def test_the_recipe_row_assembles_for_its_minimum_arch(recipe_row):
    from dsl.compiler import compile_ir
    from dsl.options import KernelOptions
    ck = compile_ir(_copy_kernel(recipe_row), KernelOptions(block=128, boundscheck=False),
                    f"sm_{recipe_row.min_arch}", contract_json="{}")
    assert "cp.async.ca.shared.global" in ck.ptx
    if find_ptxas() is None:
        pytest.skip("ptxas not found: the PTX was generated but not assembled")
    assemble(ck.ptx, f"sm_{recipe_row.min_arch}")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_lowering_module_imports_the_simulator():
    simulator = ("dsl.sim", "dsl.tile.sim", "dsl.tile.ptx.sm80", "dsl.tile.ptx.sm90")
    files = sorted((ROOT / "dsl" / "tile" / "lower").rglob("*.py")) + [ROOT / "dsl" / "tile" / "ptx" / "table.py"]
    assert len(files) > 10
    bad = [f"{f.relative_to(ROOT)}: {m}" for f in files for m in sorted(_imports(f))
           if any(m == s or m.startswith(s + ".") for s in simulator)]
    assert not bad, "the lowering imports the simulator: " + "; ".join(bad)


def test_every_inline_ptx_of_the_lowering_comes_from_the_table():
    """No lowering module builds an InlinePtx itself (the table's `instruction` does)."""
    files = sorted((ROOT / "dsl" / "tile" / "lower").rglob("*.py"))
    bad = [str(f.relative_to(ROOT)) for f in files if "InlinePtx(" in f.read_text(encoding="utf-8")]
    assert not bad, f"InlinePtx built outside dsl/tile/ptx/table.py: {bad}"
