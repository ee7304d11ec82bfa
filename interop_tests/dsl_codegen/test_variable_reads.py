"""A variable read again in the basic block that stored or loaded it takes those values, not a new load of
each leaf: a tile kernel's fragment tuples (96 leaves, read 96 times a block) made hundreds of thousands of
loads that mem2reg removed again, most of a big kernel's compile time. Across blocks every read loads."""
from __future__ import annotations

import re

from dsl.compiler import CompileContext, run_pipeline
from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, INDEX
from dsl.options import KernelOptions
from interop_tests.dsl_codegen.codegen_kit import C, R, arr, gid, kernel, load, params, store


def _llvm_ir(fn: N.Function) -> str:
    ctx = CompileContext(None, [], KernelOptions(), "sm_90", kernel_name=fn.name)
    return run_pipeline(fn, ctx, start="verify", stop="llvm_ir")


def _loads_of(ir: str, name: str) -> int:
    return len(re.findall(rf"= load float, float\* %\"{name}\"", ir))


def _square_plus(branch: bool) -> N.Function:
    """out[i] = x * x + x with x = a[i] + 1, assigned in the kernel's block or (branch) in an `if`'s."""
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i, x = N.Var("i", INDEX), N.Var("x", F32)
    set_x = N.Assign(x, N.BinOp("add", load(a, [R(i)]), C(1.0, F32), F32))
    body = [N.Assign(i, gid()), N.Assign(x, C(0.0, F32))]
    body += [N.If(N.Const(True, BOOL), [set_x], [])] if branch else [set_x]
    body.append(store(out, [R(i)], N.BinOp("add", N.BinOp("mul", R(x), R(x), F32), R(x), F32)))
    return kernel("sq_plus_branch" if branch else "sq_plus", [a, out], body)


def test_reads_in_the_block_that_stored_the_variable_take_the_stored_value():
    ir = _llvm_ir(_square_plus(branch=False))
    assert _loads_of(ir, "x") == 0, ir
    assert len(re.findall(r"store float .*, float\* %\"x\"", ir)) == 2


def test_reads_after_a_branch_that_stored_it_load_once_in_their_own_block():
    ir = _llvm_ir(_square_plus(branch=True))
    assert _loads_of(ir, "x") == 1, ir         # one load in the join block serves its three reads
    join = ir[ir.index("if.end"):]
    assert _loads_of(join, "x") == 1 and "fmul" in join
