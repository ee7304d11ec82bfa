"""The tile model's launch features: `tile.pdl.wait()`, `tile.pdl.launch_dependents()`,
`tile.grid_sync()`, `tile.cluster_rank()`, `tile.cluster_size()`, `tile.cluster_sync()` — the rows of
dsl/vocab/launch.py the tile model spells — for the front end (`call`), the simulator (`value`,
`BarrierCounts`) and the kernel's decorator (`check_tile_launch`).

The tile grid is 1-D once lowered (one block per tile, numbered as dsl/tile/lower/tiles.py does), so a
tile kernel's cluster is `cluster=n` (n consecutive tile blocks) and its rank is the block's number
modulo n. Tile blocks share no memory they could observe each other through (each writes only its
own tiles), so the tile simulator runs blocks one after another and checks only what the GPU needs
from the barriers: every block of the grid (of a cluster) reaches the same number of them.
`simulate_lowered()` runs the SIMT simulator's lock-step barriers (dsl/sim/launch_ops.py).
"""
from __future__ import annotations

import ast
from typing import Any

import numpy as np

from dsl.ir.types import I32
from dsl.options import LaunchFeatures, OptionError, check_launch_features
from dsl.tile import ir as T
from dsl.tile.types import TileType
from dsl.vocab import launch as vocab


class LaunchIntrinsic:
    """`tile.<name>` of a launch-table row; recognised by the tile front end (frontend.call)."""

    def __init__(self, row: vocab.LaunchIntrinsic) -> None:
        self.row = row
        self.__name__ = row.tile
        self.__doc__ = f"{row.spelling('tile')}: {row.doc}"

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise TypeError(f"tile.{self.row.tile}() can only be used inside a @tile.kernel function")

    def __repr__(self) -> str:
        return f"<tile intrinsic {self.row.tile}>"


NAMES: dict[str, object] = vocab.model_names("tile", LaunchIntrinsic)   # tile.pdl, tile.grid_sync, ...


def check_tile_launch(pdl: Any, cooperative: Any, cluster: Any, cluster_nonportable: Any,
                      persistent: bool) -> LaunchFeatures:
    """The decorator's launch options (OptionError): as @simt.kernel's, with a 1-D cluster (the tile
    grid is 1-D) and no cooperative persistent kernel (its blocks run different numbers of tiles)."""
    launch = check_launch_features(pdl, cooperative, cluster, cluster_nonportable)
    if launch.cluster is not None and launch.cluster[1:] != (1, 1):
        raise OptionError("cluster", f"cluster= {launch.cluster}: a tile kernel's grid is 1-D (one block per "
                          "tile), so its cluster is n consecutive tile blocks", "write cluster=n, e.g. cluster=2")
    if launch.cooperative and persistent:
        raise OptionError("cooperative", "cooperative=True with persistent=True: a persistent kernel's blocks "
                          "loop over different numbers of tiles, so they would not meet at tile.grid_sync()",
                          "drop persistent=True (a cooperative grid already has one block per tile)")
    return launch


def _features(fe) -> LaunchFeatures:
    return getattr(fe, "launch", None) or LaunchFeatures()


def call(fe, fn: LaunchIntrinsic, args: list, kwargs: dict, node: ast.Call) -> object:
    """A call of a launch intrinsic in a tile kernel: a LaunchStmt (emitted; the call's value is None)
    or a LaunchValue."""
    row, what = fn.row, fn.row.spelling("tile")
    if args or kwargs:
        raise fe.err(node, f"{what} takes no arguments")
    launch = _features(fe)
    if row.needs == vocab.COOPERATIVE and not launch.cooperative:
        raise fe.err(node, f"{what} in a kernel that is not cooperative: declare @tile.kernel(cooperative=True)")
    if row.needs == vocab.CLUSTER and launch.cluster is None:
        raise fe.err(node, f"{what} in a kernel without a thread-block cluster: declare @tile.kernel(cluster=2)")
    loc = fe.loc(node)
    if row.result != vocab.VOID:
        return T.LaunchValue(row.key, TileType(I32, ()), loc)
    if not _is_statement(fe, node):
        raise fe.err(node, f"{what} is a statement, not a value: call it on its own line")
    if row.key == "pdl.wait":
        _check_wait(fe, node, what)
    fe.emit(T.LaunchStmt(row.key, loc))
    return None


def _is_statement(fe, node: ast.Call) -> bool:
    """Is `node` the whole expression of an expression statement (of the kernel, or of the helper
    being inlined: `fe.src` is the function whose statements are being read)?"""
    return any(isinstance(st, ast.Expr) and st.value is node for st in ast.walk(fe.src.tree))


def _check_wait(fe, node: ast.Call, what: str) -> None:
    """An explicit wait stands at the top level of the kernel body, after no global memory access."""
    if len(fe.body_stack) != 1 or getattr(fe, "inlining", None):
        raise fe.err(node, f"{what} inside a loop, a branch or a helper: the accesses after it on other "
                           "paths would not wait; call it at the top level of the kernel body (or leave it out: a "
                           "pdl=True kernel waits at its entry)")
    body = fe.body_stack[0]
    touched = any(isinstance(s, (T.Store, T.Scatter, T.StoreAt)) for s in T.walk_stmts(body)) or \
        any(isinstance(e, (T.Load, T.Gather, T.Arrival)) for e in T.body_exprs(body))
    if touched:
        raise fe.err(node, f"{what} after a global memory access: the grid this launch depends on may not "
                           "have written it yet; move the loads and stores after the wait (or leave it out: a "
                           "pdl=True kernel waits at its entry)")


# ---------------------------------------------------------------------------- simulator
def linear_block(fn: T.TileFunction, coords: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """The lowered grid's block number of the tile block at `coords` (dsl/tile/lower/tiles.py's order:
    row-major, or in groups of tile rows for a 2-D grid)."""
    from dsl.tile.lower.tiles import block_group
    group = block_group(fn, len(grid))
    if group <= 1:
        return int(np.ravel_multi_index(coords, grid))
    r, c = coords
    first = r // group * group
    size = min(grid[0] - first, group)
    return first * grid[1] + (r - first) + c * size


def value(interp, e: T.LaunchValue) -> np.ndarray:
    """tile.cluster_rank() / tile.cluster_size() in the tile simulator."""
    n = _features(interp.fn).cluster[0]     # type: ignore[index]
    if e.op == "cluster.size":
        return np.asarray(n, np.int32)
    return np.asarray(linear_block(interp.fn, interp.coords, interp.grid) % n, np.int32)


class BarrierCounts:
    """How many grid / cluster barriers each tile block passed (the tile simulator runs blocks in turn;
    `check` then asks what the GPU needs: equal counts in the grid, and in each cluster)."""

    def __init__(self, fn: T.TileFunction, grid: tuple[int, ...]) -> None:
        self.fn, self.grid = fn, grid
        self.counts: dict[int, dict[str, int]] = {}

    def passed(self, interp, s: T.LaunchStmt) -> None:
        if s.op in ("grid.sync", "cluster.sync"):
            b = linear_block(self.fn, interp.coords, self.grid)
            per = self.counts.setdefault(b, {})
            per[s.op] = per.get(s.op, 0) + 1
            self.where = s.loc

    def check(self) -> None:
        from dsl.sim.faults import SimulationError
        total = int(np.prod(self.grid))
        for op in ("grid.sync", "cluster.sync"):
            seen = [self.counts.get(b, {}).get(op, 0) for b in range(total)]
            if not any(seen):
                continue
            n = _features(self.fn).cluster[0] if op == "cluster.sync" else total   # type: ignore[index]
            for start in range(0, total, n):
                group = seen[start:start + n]
                if len(set(group)) > 1:
                    lo = start + group.index(min(group))
                    raise SimulationError(f"{self.fn.name}: tile block {lo} passed {min(group)} of the "
                                          f"{max(group)} {op}() barriers other blocks of its "
                                          f"{'grid' if op == 'grid.sync' else 'cluster'} passed (a deadlock on "
                                          f"the GPU) at {self.where}")
