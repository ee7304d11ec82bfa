"""State shared by every function lowered for one kernel build: fault sites and device functions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsl.ir import nodes as ir
from dsl.options import KernelOptions


@dataclass
class BuildContext:
    """One kernel compilation: numbering of fault sites, specialised device functions and the
    ownership claims each one makes on its parameters (dsl/frontend/ownership.py)."""
    options: KernelOptions
    fault_sites: list[ir.FaultSite] = field(default_factory=list)
    device_fns: dict[tuple[Any, tuple], ir.Function] = field(default_factory=dict)
    in_progress: set[Any] = field(default_factory=set)
    claims: dict[int, list] = field(default_factory=dict)     # id(device Function) -> [Claim]

    def new_site(self, array: str, loc: ir.Loc) -> int:
        """A fresh 1-based fault-site id (unique within the kernel, device functions included)."""
        site = ir.FaultSite(len(self.fault_sites) + 1, array, loc)
        self.fault_sites.append(site)
        return site.id
