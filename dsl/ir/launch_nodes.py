"""IR nodes of the launch-feature operations (PDL, grid sync, clusters), shared by both kernel models:
the SIMT front end builds them directly, the tile lowering from its own nodes. Additive, like
tile_nodes.py: nothing in nodes.py changes; code generation is dsl/backend/launch_codegen.py, the
simulator's semantics dsl/sim/launch_ops.py. What each `op` means is its row of dsl/vocab/launch.py.
Cluster registers (rank, size, block index) are `nodes.Special` reads ("cluster_ctarank", ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dsl.ir.nodes import NOLOC, Expr, Loc, SharedAlloc
from dsl.ir.types import VOID, Type


@dataclass(eq=False)
class LaunchOp(Expr):
    """A statement of the launch vocabulary, used as an ExprStmt: `op` is "pdl.wait",
    "pdl.launch_dependents", "grid.sync" or "cluster.sync" (its row's key)."""
    op: str
    loc: Loc = NOLOC
    args: list[Expr] = field(default_factory=list)
    type: Type = VOID


@dataclass(eq=False)
class ClusterShared(Expr):
    """`simt.cluster.map_shared(buf, rank)`: block `rank` (of this cluster)'s copy of the static shared
    allocation `alloc`, an array of the same type that loads and stores like the allocation itself."""
    alloc: SharedAlloc
    rank: Expr
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return self.alloc.type


# the cluster special registers (nodes.Special names) and the launch ops that are barriers
CLUSTER_REGISTERS = ("cluster_ctarank", "cluster_nctarank", "cluster_ctaid.x", "cluster_ctaid.y",
                     "cluster_ctaid.z")
BARRIERS = ("grid.sync", "cluster.sync")
