"""Line tables from hand-built IR: a function without a location gets none, a column LLVM cannot
hold (> 65535) becomes 0, a statement from another file than its function gets that file, and
lineinfo=False leaves hand-built IR PTX without any trace."""
from __future__ import annotations

from interop_tests.dsl_codegen.codegen_kit import F32, INDEX, C, P, R, arr, kernel, params, ptx_of
from interop_tests.lineinfo.lineinfo_kit import files, has_debug_trace, locs
from dsl.ir import nodes as N


def _copy_kernel(fn_loc: N.Loc, store_loc: N.Loc) -> N.Function:
    ps = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    body = [N.Assign(i, C(0), N.Loc("/src/k.py", 3, 5)),
            N.Store(P(ps[1]), [R(i)], N.Load(P(ps[0]), [R(i)], "none", 0, F32), "unchecked", 0, store_loc)]
    return kernel("copy", ps, body, loc=fn_loc, locals=[i])


def test_a_function_without_a_location_gets_no_line_table():
    ptx = ptx_of(_copy_kernel(N.NOLOC, N.Loc("/src/k.py", 4, 5)), lineinfo=True)
    assert not has_debug_trace(ptx)


def test_statement_lines_and_an_oversized_column():
    ptx = ptx_of(_copy_kernel(N.Loc("/src/k.py", 2, 1), N.Loc("/src/k.py", 4, 70000)), lineinfo=True)
    assert files(ptx) == {1: "/src/k.py"}
    assert ("/src/k.py", 4) in locs(ptx)
    assert "\t.loc\t1 4 0\n" in ptx          # column 70000 does not fit LLVM's 16 bits: "unknown"


def test_a_statement_from_another_file_gets_that_file():
    ptx = ptx_of(_copy_kernel(N.Loc("/src/k.py", 2, 1), N.Loc("/src/other.py", 9, 3)), lineinfo=True)
    assert sorted(files(ptx).values()) == ["/src/k.py", "/src/other.py"]
    assert ("/src/other.py", 9) in locs(ptx)


def test_lineinfo_false_hand_built_ir_has_no_trace():
    ptx = ptx_of(_copy_kernel(N.Loc("/src/k.py", 2, 1), N.Loc("/src/k.py", 4, 5)), lineinfo=False)
    assert not has_debug_trace(ptx)
