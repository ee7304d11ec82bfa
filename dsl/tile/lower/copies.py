"""The cp.async copies global -> shared of the tile lowering (sm_80+): one 16-byte copy with zero fill,
group commits and waits, and the proxy fence that hands their bytes to the async proxy (wgmma, sm_90)."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import U32, U64


def cp_async16(L, dst: N.Expr, addr: N.Expr, ok: N.Expr, safe: N.Expr) -> None:
    """One 16-byte cp.async to shared address `dst`: from `addr` when `ok`, else a zero fill that reads
    0 bytes from `safe` (an address inside the array, so no out-of-range address is ever formed)."""
    L.asm("cp.async.cg", [dst, N.IfExp(ok, addr, safe, U64), N.IfExp(ok, N.Const(16, U32), N.Const(0, U32), U32)])


def cp_async_commit(L) -> None:
    L.asm("cp.async.commit_group")


def cp_async_wait(L, keep: int) -> None:
    """Wait until at most `keep` of this thread's most recent committed copy groups are pending."""
    L.asm("cp.async.wait_group", keep=keep)


def fence_proxy_async(L) -> None:
    """Make this CTA's generic-proxy shared writes (cp.async copies, once waited for) visible to the
    async proxy that wgmma reads its shared operands through."""
    L.asm("fence.proxy.async")
