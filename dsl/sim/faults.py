"""Errors of the simulator and its fault record (the host-side twin of the device's fault record).

A failed run-time bounds check does not stop the launch: like the device, the first fault is recorded
(later ones are ignored), the faulting thread exits, every other thread runs on, and the fault is raised
as `bridge.errors.KernelFault` once the launch has completed.
"""
from __future__ import annotations

from dsl.errors import DslSimulationError
from dsl.ir.nodes import NOLOC, FaultSite, Function, Loc


class SimulationError(DslSimulationError, RuntimeError):
    """The kernel did something whose result is undefined on the GPU (a barrier reached by only part
    of a block, a warp op in divergent code, an out-of-range access the compiler did not check)."""


def where(loc: Loc) -> str:
    text = loc.text.strip()
    return f"{loc}" + (f": {text}" if text else "")


def collect_sites(fn: Function) -> dict[int, FaultSite]:
    """Fault sites of a kernel and (transitively) of the device functions it calls."""
    sites: dict[int, FaultSite] = {}
    seen: set[int] = set()
    stack = [fn]
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for s in f.fault_sites:
            sites.setdefault(s.id, s)
        stack.extend(f.callees)
    return sites


class FaultRecord:
    """First-fault-wins record for one launch."""

    def __init__(self, kernel: str, sites: dict[int, FaultSite]) -> None:
        self.kernel, self.sites = kernel, sites
        self.hit = False
        self.array, self.index, self.extent, self.loc, self.who = "", -1, -1, NOLOC, ""

    def record(self, site: int, array: str, index: int, extent: int, loc: Loc, who: str) -> None:
        if self.hit:
            return
        fs = self.sites.get(site)
        self.hit = True
        self.array = fs.array if fs is not None else array
        self.loc = fs.loc if fs is not None and fs.loc.line else loc
        self.index, self.extent, self.who = int(index), int(extent), who

    def exception(self) -> Exception:
        from bridge.errors import KernelFault  # lazy: dsl.sim must import without the runtime
        text = self.loc.text.strip()
        msg = (f"{self.kernel}: index {self.index} out of bounds for array '{self.array}' with extent "
               f"{self.extent} at {self.loc.file}:{self.loc.line}" + (f": {text}" if text else "")
               + f" (simulated; first fault by {self.who})")     # same form as bridge.stream's
        return KernelFault(msg, kernel=self.kernel, array=self.array, index=self.index,
                           extent=self.extent, file=self.loc.file, line=self.loc.line)
