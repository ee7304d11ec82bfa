"""Shared-memory bank conflicts, counted while simulating (KB_SIM_BANK_CONFLICTS=1).

Shared memory has 32 banks of 4-byte words. A warp's access of w bytes a lane is served in phases of
128 / w lanes (32 lanes for 4-byte accesses, 16 for 8-byte, 8 for 16-byte), and a phase needs as many
wavefronts as the most distinct words any one bank holds in it (lanes reading one word share it). A
profiler shows the replays (ncu: "bank conflicts", "excessive wavefronts") but not which access of a
tile kernel makes them; this log says so on the CPU. For every access site (the kernel's source line,
load or store, the width a lane) it counts the warp requests, their wavefronts and the fewest that
would do (one a phase with a lane in it). After the launch every site that needs more is one record
on the `kernelbridge.perf` logger (WARNING), worst first.

What it counts: loads and stores of shared buffers in the IR (SIMT `simt.shared.array`, the tile
lowering's relayout and reduction scratch) and the tile lowering's inline PTX shared accesses
(ld.shared, st.shared, ldmatrix). Not wgmma operands or TMA copies: the async proxy reads and writes
shared memory its own way. An IR access counts at the width the IR gives it; where LLVM fuses two
neighbouring 4-byte accesses into one 8-byte one, the GPU serves them as one access. Off by default:
a few NumPy sorts a shared access.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from bridge.settings import env_switch
from dsl.sim.faults import where

BANKS, WORD, PHASE_BYTES = 32, 4, 128
PERF_LOG = logging.getLogger("kernelbridge.perf")
# tile-lowering inline PTX families that access shared memory from threads: (load or store, bytes a lane)
SHARED_PTX: dict[str, tuple[str, int]] = {
    "ld.shared.b32": ("load", 4), "st.shared.b32": ("store", 4), "st.shared.v2.f32": ("store", 8),
    "ldmatrix.x4": ("load", 16)}


def bank_conflicts_enabled() -> bool:
    """KB_SIM_BANK_CONFLICTS=1: count shared-memory bank conflicts while simulating (this module)."""
    return env_switch("KB_SIM_BANK_CONFLICTS", False)


@dataclass
class Site:
    """One access site's warp requests, the wavefronts they took and the fewest that would do."""
    kernel: str
    kind: str           # "load" or "store"
    width: int          # bytes a lane
    at: str             # file:line of the kernel source (and its text)
    requests: int = 0
    wavefronts: int = 0
    ideal: int = 0

    @property
    def ways(self) -> float:
        """Wavefronts a phase on average: 1.0 is conflict-free, 2.0 a two-way conflict."""
        return self.wavefronts / self.ideal if self.ideal else 1.0

    def text(self) -> str:
        return (f"{self.kernel}: shared {self.kind} of {self.width} bytes a lane at {self.at}: "
                f"{self.ways:.2f}-way bank conflicts ({self.wavefronts} wavefronts for {self.requests} warp "
                f"requests where {self.ideal} would do)")


def wavefronts(warp_pos: np.ndarray, addr: np.ndarray, width: int) -> tuple[int, int, int]:
    """(warp requests, wavefronts, fewest wavefronts) of one access by the lanes at warp-padded positions
    `warp_pos` (LaneSpace.warp_pos) of `width` bytes each at shared byte addresses `addr`."""
    if warp_pos.size == 0:
        return 0, 0, 0
    per_phase = 32 if width <= WORD else PHASE_BYTES // width
    warp = warp_pos.astype(np.int64) // 32
    group = warp * (32 // per_phase) + (warp_pos.astype(np.int64) % 32) // per_phase
    nwords = max(1, width // WORD)
    words = (addr.astype(np.int64) // WORD)[:, None] + np.arange(nwords)
    group = np.repeat(group, nwords)
    words = words.reshape(-1)
    pairs = np.unique(np.stack([group, words], axis=1), axis=0)          # each word once a phase
    banks, per_bank = np.unique(np.stack([pairs[:, 0], pairs[:, 1] % BANKS], axis=1), axis=0,
                                return_counts=True)
    groups, first = np.unique(banks[:, 0], return_index=True)
    worst = np.maximum.reduceat(per_bank, first)                           # most words in one bank, a phase
    return int(np.unique(warp).size), int(worst.sum()), int(groups.size)


class BankConflictLog:
    """Wavefront counts of one kernel launch's shared accesses, by site (module docstring)."""

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.sites: dict[tuple, Site] = {}

    def record(self, kind: str, width: int, loc, warp_pos: np.ndarray, addr: np.ndarray) -> None:
        """Lanes at `warp_pos` access `width` bytes each at shared addresses `addr` (one statement)."""
        reqs, waves, ideal = wavefronts(np.asarray(warp_pos), np.asarray(addr), width)
        if reqs == 0:
            return
        at = where(loc)
        site = self.sites.get((kind, width, at))
        if site is None:
            site = self.sites[kind, width, at] = Site(self.kernel, kind, width, at)
        site.requests += reqs
        site.wavefronts += waves
        site.ideal += ideal

    def conflicted(self) -> list[Site]:
        """The sites that took more wavefronts than they need, most excess first."""
        bad = [s for s in self.sites.values() if s.wavefronts > s.ideal]
        return sorted(bad, key=lambda s: s.wavefronts - s.ideal, reverse=True)

    def report(self) -> list[Site]:
        """Log each conflicted site on `kernelbridge.perf` (WARNING) and return them."""
        bad = self.conflicted()
        for site in bad:
            PERF_LOG.warning("%s", site.text())
        return bad
