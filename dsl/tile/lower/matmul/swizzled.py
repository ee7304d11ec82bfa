"""A variable kept in shared memory in wgmma's 128-byte swizzle atoms (matmul/shared_a.py puts it there):
its descriptors as an A operand and its elements' loads. Its own module, so the operand questions
(matmul/operands.wgmma_b: may a product read such a variable as B?) need not import shared_a, which
imports them."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U32
from dsl.tile.lower.layout import iadd, iand, ishr
from dsl.tile.lower.matmul.mma_sync import atom128_offset
from dsl.tile.lower.matmul.wgmma import SWIZZLE_128B, descriptor_at, start_field

ATOM_BYTES = 128            # one swizzle row: 64 elements of 16 bits


class SwizzledA:
    """A variable kept in shared memory as wgmma's K-major A operand: `buf` the stage, `base` its
    1024-byte-aligned start (a U32 shared address), `wg_base` this thread's warpgroup's rows in it."""

    def __init__(self, shape: tuple[int, int], buf: N.Expr, base: N.Expr, wg_base: N.Expr) -> None:
        self.shape, self.buf, self.base, self.wg_base = shape, buf, base, wg_base

    def __repr__(self) -> str:
        return f"SwizzledA({self.shape})"

    def descriptor(self, L, ks: int) -> N.Expr:
        """The A descriptor of k-step `ks` (16 elements, 32 bytes of a 128-byte atom row)."""
        off = (ks // 4) * self.shape[0] * ATOM_BYTES + (ks % 4) * 32
        return descriptor_at(L, start_field(L, self.wg_base), off, 16, 8 * ATOM_BYTES, SWIZZLE_128B)

    def read(self, L, coords: list[list]) -> list[N.Expr]:
        """The elements at tile coordinates `coords` (row, column), by ordinary shared loads of the atoms."""
        skew = atom_skew(L, self.buf, self.base)
        dtype = self.buf.type.dtype  # type: ignore[attr-defined]
        return [L.tmp(L.smem_load(self.buf, atom_element(skew, r, c, self.shape[0]), dtype), "aswz")
                for r, c in coords]


def atom_skew(L, buf: N.Expr, base: N.Expr) -> N.Expr:
    """Elements from the start of `buf` (16-bit) to its 1024-byte-aligned start `base` (u32 addresses)."""
    raw = L.tmp(TN.SharedAddress(buf, N.Const(0, INDEX)), "smem")
    return L.tmp(N.Cast(N.BinOp("rshift", N.BinOp("sub", base, raw, U32), N.Const(1, U32), U32), I32), "askew")


def atom_element(skew: N.Expr, r, c, rows: int):
    """Element index in the buffer of tile element (r, c) of a tile of `rows` rows in the atoms."""
    return iadd(skew, iadd(atom128_offset(r, ishr(c, 3), rows), iand(c, 7)))
