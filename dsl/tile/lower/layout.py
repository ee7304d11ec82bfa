"""How tile elements live in threads during lowering, and folding index arithmetic.

Two general layouts (flat index = row-major position in the tile):
- "U" (uniform): every thread holds every element (scalars, small reduction results). elems[i] is
  flat element i.
- "D" (distributed): with T threads and N elements, thread t holds R = max(1, N // T) elements in
  runs of V consecutive ones: elems[r] is flat element ((r // V) * T + t) * V + r % V. V is the
  kernel's run (16 bytes of its narrowest element type accessed in vectors, runs.kernel_run),
  halved until N >= T * V, so a run is one 16-byte global access (dsl/tile/lower/runs.py) and a
  warp's accesses still cover consecutive memory. V = 1 is the plain mapping r*T + t. When N < T (then V = 1),
  elems[0] is flat element t mod N; threads t >= N hold duplicates and are not the owners (they
  never store and never count twice in reductions). The mapping depends on N only, so a reshape
  keeps the registers.

The tensor-core lowerings add register-fragment layouts (FragLayout below): mma accumulators
(MmaLayout), their row vectors (MmaRows) and A operands (MmaOperandA), so that a product, its row
softmax and the next product's operand stay in registers.

Index arithmetic is on i32 and folds when operands are Python ints ("static" values).
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable

from dsl.ir import nodes as N
from dsl.ir.types import I32, ScalarType

U_MAX = 32          # largest tile kept in the "U" layout (replicated in every thread)


def log2(n: int) -> int:
    return n.bit_length() - 1


def c32(v: int) -> N.Const:
    return N.Const(int(v), I32)


def ir32(v) -> N.Expr:
    return c32(v) if isinstance(v, int) else v


def iadd(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    return N.BinOp("add", ir32(a), ir32(b), I32)


def imul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 0 or isinstance(a, int) and a == 0:
        return 0
    if isinstance(b, int) and b > 0 and b & (b - 1) == 0:
        return N.BinOp("lshift", ir32(a), c32(log2(b)), I32)
    return N.BinOp("mul", ir32(a), ir32(b), I32)


def ishr(a, s: int):
    if s == 0:
        return a
    if isinstance(a, int):
        return a >> s
    return N.BinOp("rshift", a, c32(s), I32)


def iand(a, m: int):
    if isinstance(a, int):
        return a & m
    return N.BinOp("and_", a, c32(m), I32)


def strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


@dataclass
class LV:
    """A lowered tile value. layout "L" (lazy) has no elements yet: `make(coords_list)` emits the
    elements at the given tile coordinates in whatever layout the consumer needs (loads, constants,
    broadcasts), so a broadcast bias lands directly in an mma accumulator layout. `by_layout`, where
    set, is tried first: it builds the elements for a fragment layout from registers (a row vector
    broadcast over the accumulators it came from), or for "D" with vector accesses (a load's runs,
    dsl/tile/lower/runs.py), or says None."""
    layout: object              # "U" | "D" | "L" | a FragLayout
    shape: tuple[int, ...]
    dtype: ScalarType
    elems: list[N.Expr]
    make: Callable[[list], list[N.Expr]] | None = None
    pure: bool = False          # lazy and cheap to make again (index arithmetic, constants): no loads
    by_layout: Callable[[object], list[N.Expr] | None] | None = None  # lazy: elements for a FragLayout or "D"

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Geometry:
    """Flat index and coordinates of D-layout element r for a tile of `shape` with T threads; `vec`:
    the kernel's run (elements a thread holds side by side, a power of two)."""

    def __init__(self, threads: int, tid: N.Expr, vec: int = 1) -> None:
        self.T = threads
        self.tid = tid
        self.vec = vec

    def per_thread(self, size: int) -> int:
        return max(1, size // self.T)

    def run(self, size: int) -> int:
        """V for a tile of `size` elements: the kernel's run, halved until every thread holds whole runs."""
        v = self.vec
        while v > 1 and size < self.T * v:
            v //= 2
        return v

    def static_flat(self, size: int, r: int) -> int:
        """The part of element r's flat index that is the same in every thread: flat = static_flat +
        (tid << log2(run)) when size >= T (the thread's bits lie between the run's and r // run's)."""
        if size < self.T:
            return 0
        v = self.run(size)
        return (r // v) * self.T * v + r % v

    def flat(self, size: int, r: int):
        if size >= self.T:
            v = self.run(size)
            if v == 1:
                return iadd(r * self.T, self.tid)
            return iadd(self.static_flat(size, r), imul(self.tid, v))
        return iand(self.tid, size - 1)

    def coord(self, shape: tuple[int, ...], r: int, k: int):
        """Coordinate k of element r: static when axis k's bits of the flat index miss the thread's."""
        size = math.prod(shape)
        st = strides(shape)[k]
        if shape[k] == 1:
            return 0
        if size < self.T:
            return iand(ishr(self.flat(size, r), log2(st)), shape[k] - 1)
        v = self.run(size)
        lv, lst = log2(v), log2(st)
        static = (self.static_flat(size, r) >> lst) & (shape[k] - 1)
        if lst >= lv + log2(self.T) or lst + log2(shape[k]) <= lv:
            return static                       # the axis lies outside the thread's bits
        if v == 1:
            return iand(ishr(self.flat(size, r), lst), shape[k] - 1)
        moved = imul(self.tid, 1 << (lv - lst)) if lv >= lst else ishr(self.tid, lst - lv)
        return iadd(iand(moved, shape[k] - 1), static)     # disjoint bits: the sum is the or

    def coords(self, shape: tuple[int, ...], r: int) -> list:
        return [self.coord(shape, r, k) for k in range(len(shape))]

    def owner(self, size: int):
        """True (Python) when every thread owns its elements, else the i32 predicate expression."""
        if size >= self.T:
            return True
        return N.Compare("lt", self.tid, c32(size))


def flat_of(coords: list, shape: tuple[int, ...]):
    acc = 0
    for c, s in zip(coords, strides(shape)):
        acc = iadd(acc, imul(c, s))
    return acc


class FragLayout:
    """A register-fragment layout of the tensor-core lowerings: elements sit where an mma instruction
    wants them. `key` names it (the lowering keeps one bound instance per key, so equal keys are the
    same layout); `coords_for(shape)` gives each element's tile coordinates once `bind` has run;
    `owner` is None when every thread's elements are its own, else the predicate of the threads whose
    copies count (the others hold duplicates and never store)."""
    key: tuple = ()
    owner: object = None
    pairs: bool = False     # elements 2j and 2j+1 sit side by side in one row, the first at an even column


class MmaLayout(FragLayout):
    """Accumulator fragments of mma.sync m16n8: warps tile (BM, BN) as WM x WN; warp (wm, wn) owns a
    (BM/WM, BN/WN) block of MT x NT fragments of 16x8; lane l holds, per fragment, rows l/4 and l/4+8
    at columns 2*(l%4) and 2*(l%4)+1 (c0..c3). Element r = ((mt * NT) + nt) * 4 + c. A warp's m-tile mt
    starts mt * mt_step rows past its origin: 16 (a contiguous block), or 64 where a warpgroup's rows
    are m64 slices of warpgroup MMA (warpgroup_rows in frags.py). With `by_warpgroup` (wm = 4) warp w is
    (w % 4, w / 4): each warpgroup holds a column block, the accumulators of one m64 wgmma over its
    columns (matmul/transposed_a.warpgroup_columns)."""
    pairs = True

    def __init__(self, shape: tuple[int, int], threads: int, wm: int, wn: int, by_warpgroup: bool = False) -> None:
        self.shape = shape
        self.threads = threads
        self.wm, self.wn = wm, wn
        self.by_warpgroup = by_warpgroup
        self.mt = shape[0] // (wm * 16)
        self.nt = shape[1] // (wn * 8)
        self.key = ("C", tuple(shape), wm, wn) + (("wg",) if by_warpgroup else ())
        self.coords: list = []       # filled by bind() once the lane/warp expressions exist
        self.lane_row: N.Expr | None = None
        self.lane_col: N.Expr | None = None
        self.warp_row0: N.Expr | None = None
        self.warp_col0: N.Expr | None = None
        self.mt_step = 16

    def bind(self, lane_row: N.Expr, lane_col: N.Expr, warp_row0: N.Expr, warp_col0: N.Expr,
             mt_step: int = 16) -> None:
        """lane_row = lane/4, lane_col = 2*(lane%4), warp_row0/col0 = this warp's origin, mt_step the
        rows from one of its m-tiles to the next."""
        self.lane_row, self.lane_col, self.warp_row0, self.warp_col0 = lane_row, lane_col, warp_row0, warp_col0
        self.mt_step = mt_step
        self.coords = []
        for mt in range(self.mt):
            for nt in range(self.nt):
                for c in range(4):
                    row = iadd(warp_row0, iadd(lane_row, mt * mt_step + (8 if c >= 2 else 0)))
                    col = iadd(warp_col0, iadd(lane_col, nt * 8 + (c & 1)))
                    self.coords.append([row, col])

    def coords_for(self, shape: tuple[int, ...]) -> list:
        return self.coords

    @property
    def per_thread(self) -> int:
        return self.mt * self.nt * 4

    def __repr__(self) -> str:
        return f"MmaLayout({self.shape}, warps {self.wm}x{self.wn}{' by warpgroup' if self.by_warpgroup else ''})"


class MmaRows(FragLayout):
    """A row vector (BM,) or column (BM, 1) laid out like the rows of an MmaLayout whose warps split
    only M (wn == 1): what a row reduction of the accumulators leaves after the quad's shuffles. Lane l
    holds rows l/4 and l/4 + 8 of each m-tile (element 2 * mt + h), the same in all four lanes of its
    quad, so broadcasting it back over the columns and combining it with the accumulators needs no
    data movement. The quad's first lane owns the copy."""

    def __init__(self, parent: MmaLayout, owner: N.Expr) -> None:
        assert parent.wn == 1
        self.parent = parent
        self.key = ("R", parent.key)
        self.owner = owner
        self.rows: list = []

    def bind(self) -> None:
        p = self.parent
        self.rows = [iadd(p.warp_row0, iadd(p.lane_row, mt * p.mt_step + 8 * h)) for mt in range(p.mt) for h in range(2)]

    def coords_for(self, shape: tuple[int, ...]) -> list:
        return [[r] + [0] * (len(shape) - 1) for r in self.rows]

    @property
    def per_thread(self) -> int:
        return 2 * self.parent.mt

    def __repr__(self) -> str:
        return f"MmaRows({self.parent!r})"


class WarpVector(FragLayout):
    """A vector (N,) that every warp holds whole, N a multiple of 64: lane l holds elements 64k + 2l and
    64k + 2l + 1, as element 2k and 2k + 1. Broadcast over the columns of accumulators whose warps split M
    only (each warp holds every column), it reaches them by shuffles within the warp (warp_vectors.py),
    not through shared memory between two block barriers; warp 0's copies count."""

    def __init__(self, n: int, owner: N.Expr | None) -> None:
        self.n = n
        self.key = ("V", n)
        self.owner = owner
        self.coords: list = []

    def bind(self, lane: N.Expr) -> None:
        self.coords = [[iadd(imul(lane, 2), 64 * (r // 2) + r % 2)] for r in range(self.per_thread)]

    def coords_for(self, shape: tuple[int, ...]) -> list:
        return self.coords

    @property
    def per_thread(self) -> int:
        return self.n // 32

    def __repr__(self) -> str:
        return f"WarpVector({self.n})"


class SharedTile:
    """A variable kept in shared memory instead of registers: a loop-invariant A operand too large to
    hold as A fragments (the queries of flash attention at D128), staged once where it is assigned and
    read by every product. Rows are padded by 8 elements (16-byte aligned, conflict-free fragment
    reads); `ldmatrix`: it was filled by cp.async (GPU launch facts), so products read it with
    ldmatrix (mma.sync's A and B, warpgroup MMA's A from registers) rather than ordinary shared loads."""

    def __init__(self, shape: tuple[int, int], buf: N.Expr, stride: int, ldmatrix: bool) -> None:
        self.shape, self.buf, self.stride, self.ldmatrix = shape, buf, stride, ldmatrix

    def __repr__(self) -> str:
        return f"SharedTile({self.shape})"


# A-fragment positions of mma.m16n8k16 (PTX ISA): register element i of lane (g = l/4, t = l%4) holds
# A[g + ROW[i]][2t + COL[i]] of the 16x16 k-slice
A_FRAG_ROW = (0, 0, 8, 8, 0, 0, 8, 8)
A_FRAG_COL = (0, 1, 0, 1, 8, 9, 8, 9)


class MmaOperandA(FragLayout):
    """An (M, K) tile held as the A fragments of mma.m16n8k16 for a WM x WN warp grid: warp (wm, wn)
    holds rows [wm * M/WM, (wm+1) * M/WM) as MT x K/16 fragments of 8 elements (element
    ((mt * KS) + ks) * 8 + i at A_FRAG_ROW/COL[i]). Warps of one row block hold the same fragments; those
    with wn == 0 own them. A loop-invariant operand (the queries of flash attention) kept like this is
    loaded once instead of being staged for every product."""
    pairs = True

    def __init__(self, shape: tuple[int, int], wm: int, wn: int, owner: N.Expr | None) -> None:
        self.shape = shape
        self.wm, self.wn = wm, wn
        self.mt = shape[0] // (wm * 16)
        self.ks = shape[1] // 16
        self.key = ("A", tuple(shape), wm, wn)
        self.owner = owner
        self.coords: list = []

    def bind(self, lane_row: N.Expr, lane_col: N.Expr, warp_row0: N.Expr, mt_step: int = 16) -> None:
        """As MmaLayout.bind: `mt_step` rows from one m-tile of the warp to the next."""
        self.mt_step = mt_step
        self.coords = [[iadd(warp_row0, iadd(lane_row, mt * mt_step + A_FRAG_ROW[i])), iadd(lane_col, ks * 16 + A_FRAG_COL[i])]
                       for mt in range(self.mt) for ks in range(self.ks) for i in range(8)]

    def coords_for(self, shape: tuple[int, ...]) -> list:
        return self.coords

    @property
    def per_thread(self) -> int:
        return self.mt * self.ks * 8

    def fragment(self, elems: list, mt: int, ks: int) -> list:
        base = (mt * self.ks + ks) * 8
        return elems[base:base + 8]

    def __repr__(self) -> str:
        return f"MmaOperandA({self.shape}, warps {self.wm}x{self.wn})"


def swizzle_chunk(row, chunk, chunks_per_row: int):
    """XOR swizzle of 16-byte chunks so 8 rows read by one ldmatrix hit 8 distinct bank groups (the GEMM
    stages of matmul/mma_sync.py and the transposing stage of matmul/transposing.py)."""
    if chunks_per_row >= 8:
        return N.BinOp("xor", ir32(chunk), ir32(iand(row, 7)), I32)
    rows_per_128 = 8 // chunks_per_row
    return N.BinOp("xor", ir32(chunk), ir32(iand(ishr(row, log2(rows_per_128)), chunks_per_row - 1)), I32)
