"""Where a warp-specialised tile kernel splits into its roles (matmul/warp_specialised.py): at a GEMM
main loop under KB_TILE_GEMM_PIPELINE=ws (lowered by matmul/tma.py), or at a loop of products fed by
a TMA ring under KB_TILE_LOOP_PIPELINE=ws (matmul/ring_ws.py). The Lowerer asks before it lowers
anything; the choice needs both loop kinds' matchers, so it sits above them.
"""
from __future__ import annotations

from dsl.tile import ir as T
from dsl.tile.lower.matmul.mma_sync import match
from dsl.tile.lower.matmul.ring_ws import ring_ws_loop


def ws_loop(L) -> int | None:
    """Index of the top-level loop a warp-specialised kernel splits at, or None: a GEMM loop under
    KB_TILE_GEMM_PIPELINE=ws (gemm_ws_loop), or a loop of products fed by a TMA ring under
    KB_TILE_LOOP_PIPELINE=ws (matmul/ring_ws.py)."""
    if L.gemm_pipeline == "ws":
        k = gemm_ws_loop(L)
        if k is not None:
            return k
    if L.loop_pipeline == "ws":
        return ring_ws_loop(L)
    return None


def gemm_ws_loop(L) -> int | None:
    """Index of the top-level GEMM loop a warp-specialised kernel splits at, or None: sm_90, 8 warps,
    a loop the TMA path lowers, only scalar and constant-tile assignments before it (the producers
    run them too) and no other product after it. A persistent kernel splits the same way inside its
    tile loop: the producer walks the block's tiles too and runs ahead into the next tile while the
    consumers store this one."""
    if L.cc < 90 or L.T != 256:
        return None
    body = L.fn.body
    k = next((i for i, s in enumerate(body) if not isinstance(s, T.Assign)), None)
    if k is None or not isinstance(body[k], T.For):
        return None
    plan = match(L, body[k], L.max_stages)
    if plan is None or plan.kind != "tma":
        return None
    simple = all(not isinstance(e, (T.Load, T.Matmul, T.Reduce)) for s in body[:k] for e in T.walk_exprs(s.value))
    later = any(isinstance(e, T.Matmul) for e in T.body_exprs(body[k + 1:]))
    return k if simple and not later else None
