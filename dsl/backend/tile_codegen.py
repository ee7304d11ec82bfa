"""Code generation for dsl/ir/tile_nodes.py: `TileNodesMixin`, one of ModuleBuilder's bases.

The builder dispatches `visit_<NodeClass>`, so the shared pipeline (dsl.compiler.compile_ir) compiles
tile-lowered kernels unchanged.
"""
from __future__ import annotations

import llvmlite.ir as ir

from dsl.backend import lltypes as T
from dsl.backend.values import TupleVal
from dsl.ir import tile_nodes as TN
from dsl.ir.types import ScalarType, TupleType, VoidType


def _lltype(t) -> ir.Type:
    if isinstance(t, VoidType):
        return T.VOID
    if isinstance(t, ScalarType):
        return T.scalar(t)
    if isinstance(t, TupleType):
        return ir.LiteralStructType([_lltype(e) for e in t.elems])
    raise TypeError(f"inline PTX cannot return {t}")


def visit_InlinePtx(self, e: TN.InlinePtx):
    args = [self.expr(a) for a in e.args]
    fty = ir.FunctionType(_lltype(e.type), [a.type for a in args])
    asm = ir.InlineAsm(fty, e.asm, e.constraints, side_effect=e.side_effects or isinstance(e.type, VoidType))
    res = self.st.b.call(asm, args)
    if isinstance(e.type, TupleType):
        return TupleVal([self.st.b.extract_value(res, i) for i in range(len(e.type.elems))])
    return res


def visit_SharedAddress(self, e: TN.SharedAddress):
    arr = self.expr(e.array)
    idx = self.expr(e.index)
    ptr = self.element_ptr(arr, [idx])
    return self.st.b.ptrtoint(ptr, T.I32)


def visit_GlobalAddress(self, e: TN.GlobalAddress):
    arr = self.expr(e.array)
    ptr = self.element_ptr(arr, [self.expr(i) for i in e.indices])
    gptr = self.st.b.addrspacecast(ptr, ir.PointerType(addrspace=1))
    return self.st.b.ptrtoint(gptr, T.I64)


class TileNodesMixin:
    """Visitors of the tile-lowering IR nodes (InlinePtx, SharedAddress, GlobalAddress); shared memory
    is allocated by MemoryMixin.visit_SharedArray for both front ends."""
    visit_InlinePtx = visit_InlinePtx
    visit_SharedAddress = visit_SharedAddress
    visit_GlobalAddress = visit_GlobalAddress
