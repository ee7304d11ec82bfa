"""Where a tile kernel's scratch buffers live (Lowerer.scratch: relayouts, the tensor-core products'
staged operands, their loop pipelines): in static shared memory while they fit its 48 KiB, else, for
kernels whose products run on the tensor cores, side by side in the dynamic shared memory a block may
opt into, after the GEMM stages. Flash attention with 128 query rows at D128 stages 68 KiB."""
from __future__ import annotations

from dsl.ir.types import BOOL, ArrayType, ScalarType
from dsl.tile.lower.matmul.mma_sync import SMEM_LIMIT

PLACE_ALIGN = 128               # byte alignment of each buffer in the dynamic shared memory
RELAYOUT_SLOT = "relayout"      # a relayout's second buffer (lazy_barriers: Lowerer.relayout_scratch)


def scratch_key(dtype: ScalarType, slot: int | str = 0) -> str:
    """The name of the scratch buffer of `dtype` and `slot` (Lowerer.scratch: one buffer each)."""
    return ("i32" if dtype == BOOL else dtype.name) + (f"_{slot}" if slot else "")


OPT_IN_KIB = {86: 99, 89: 99, 120: 99, 121: 99}     # the archs below their generation's figure


def opt_in_bytes(cc: int) -> int:
    """Shared memory one block may opt into (CUDA's MaxSharedMemoryPerBlockOptin) on compute
    capability `cc` (80 = sm_80), less 1 KiB that static buffers and the driver's reserve may take."""
    kib = OPT_IN_KIB.get(cc, 227 if cc >= 90 else 163 if cc >= 80 else 48)
    return (kib - 1) * 1024


def _nbytes(L, key: str, alloc) -> int:
    return L.scratch_size[key] * max(1, alloc.type.dtype.bits // 8)


def scratch_bytes(L, dynamic: bool | None = None) -> int:
    """Bytes of L's scratch buffers (only the static or only the dynamic ones when asked)."""
    return sum(_nbytes(L, key, alloc) for key, alloc in L.scratch_allocs.items()
               if dynamic is None or alloc.dynamic == dynamic)


def place_scratch(L) -> None:
    """Give every scratch buffer its size; move them all into the dynamic shared memory when they do
    not fit the static 48 KiB but do fit what the arch lets a block opt into (products on the tensor
    cores only: the portable path's relayouts keep their limit). Their offsets start after
    L.dyn_bytes (the GEMM stages), which grows to cover them."""
    for key, alloc in L.scratch_allocs.items():
        alloc.type = ArrayType(alloc.type.dtype, 1, writable=True, space="shared", shape=(L.scratch_size[key],))
    total = scratch_bytes(L)
    if total <= SMEM_LIMIT or not L.tc_matmul or L.cc < 80:
        return
    at = _align(L.dyn_bytes)
    layout = []
    for key, alloc in L.scratch_allocs.items():
        layout.append((alloc, at))
        at = _align(at + _nbytes(L, key, alloc))
    if at > opt_in_bytes(L.cc):
        return                  # too large for dynamic shared memory too: lower() decides what next
    for alloc, offset in layout:
        alloc.type = ArrayType(alloc.type.dtype, 1, writable=True, space="shared", shape=(-1,))
        alloc.offset = offset
    L.dyn_bytes = at


def _align(n: int) -> int:
    return (n + PLACE_ALIGN - 1) // PLACE_ALIGN * PLACE_ALIGN
