"""Options of one @simt.kernel / @tile.kernel: the launch contract facts plus compile switches."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelOptions:
    block: tuple[int, int, int] | None = None      # exact block (contract + .reqntid)
    launch_bounds: int | None = None               # max threads per block (contract + .maxntid)
    domain: int = 1                                # 1, 2 or 3
    shared_mem: int | tuple[str, int] = 0          # dynamic smem bytes, or ("max", n)
    min_cc: int = 0                                # e.g. 80
    requires: tuple[str, ...] = ()                 # contract relations, also used for proofs
    inplace: tuple[tuple[str, str], ...] = ()      # argument pairs allowed to overlap
    boundscheck: bool = True                       # False removes run-time checks (unsafe)
    fastmath: bool = False                         # approximate math (ex2.approx etc.)
    extra: tuple[tuple[str, object], ...] = field(default_factory=tuple)
