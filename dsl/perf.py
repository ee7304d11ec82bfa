"""Slow-path records: where a compiled kernel left the fast code path, and why.

A performance cliff should never be silent. While a kernel compiles, the stages append `SlowPath`
records (a source line, a kind from SLOW_PATH_KINDS, a sentence naming the cause and the fix) to the
compile context's list: the back end for chunk loops whose accesses stay per element
(dsl/backend/chunks.py), the PTX stage for local memory; any lowering (the tile model's, later) adds
its own the same way. The list travels in the compile metadata (so a disk-cache hit still has it), is
logged once per compile on the `kernelbridge.perf` logger (INFO, one record per slow path), and is
what `kernel.inspect(...).slow_paths` and `python -m dsl compile --explain FILE::KERNEL` report, with
ptxas's spills and stack frame added there (ptxas runs only for those two).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Iterable

# kind -> what it means (docs/dsl.md lists these; every record's kind is one of them)
SLOW_PATH_KINDS: dict[str, str] = {
    "unrelated-length": "a chunk loop reads or writes an array whose length is not known to equal the "
                        "chunked array's: every element is bounds-checked, one scalar access each",
    "strided": "a chunk loop accesses an array that may be strided (not C-contiguous): scalar accesses",
    "unaligned": "a chunk loop accesses an array whose data pointer is not known to be 16-byte aligned, "
                 "or whose chunk is too few bytes for a wider access: narrower accesses",
    "in-order": "a chunk loop body that must keep its per-element order (a run-time bounds check, a "
                "barrier, an atomic, a call that touches memory, break/continue/return, a conditional "
                "or indirect write): the written array's accesses stay per element",
    "overlap": "a chunk loop accesses an array that may overlap another (inplace=): accesses stay in order",
    "local-memory": "the PTX uses local memory (a stack frame): slow off-chip loads and stores",
    "fma-product": "a tile.matmul / tile.mma runs on the portable FMA path, not the tensor cores",
    "mma-sync-product": "on sm_90 a tile.matmul runs on the warp-level mma.sync, not warpgroup MMA "
                        "(wgmma): its rows, warps or B operand do not fit one m64 wgmma a warpgroup; "
                        "mma.sync reads every operand element through registers",
    "sync-staging": "a tensor-core product's operand is staged through registers and a barrier, not "
                    "copied asynchronously (cp.async / TMA) ahead of its use",
    "tile-scalar": "a distributed tile's global load or store (or a load into tensor-core fragments) is "
                   "one scalar access per element, not vector accesses per run or pair (strided, "
                   "unaligned, rows not a multiple of 8, a tile width that is no multiple of the run, or "
                   "1-byte elements)",
    "spills": "ptxas spilled registers to local memory",
    "ring-fallback": "the tile loops asked for TMA rings (loop_pipeline tma/ws) keep cp.async: their "
                     "rings together need more shared memory than a block may opt into",
    "ws-other-loop": "a loop of a warp-specialised tile kernel other than the one it splits at keeps "
                     "cp.async (loop_pipeline ws): only the producer warpgroup's loops (the split one and "
                     "those sharing its ring) have a TMA ring",
    "tma-store-fallback": "a tile kernel asked for TMA-store epilogues (tma_store) stores its accumulator "
                          "tiles directly: their staging buffer does not fit the shared memory a block may "
                          "opt into beside the kernel's other buffers",
}


@dataclass(frozen=True)
class SlowPath:
    """One slow path: `kind` (a key of SLOW_PATH_KINDS), the `reason` in words, and the source
    `file`:`line` it comes from (line 0: the kernel as a whole)."""
    kind: str
    reason: str
    line: int = 0
    file: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SLOW_PATH_KINDS:
            raise ValueError(f"kind: expected one of {', '.join(SLOW_PATH_KINDS)}, got {self.kind!r}")

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else (self.file or "<kernel>")
        return f"{where}: [{self.kind}] {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "line": self.line, "file": self.file}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SlowPath:
        return cls(str(d["kind"]), str(d["reason"]), int(d.get("line", 0)), str(d.get("file", "")))


def unique(paths: Iterable[SlowPath]) -> list[SlowPath]:
    """`paths` without repeats, in order (a stage run twice on one context adds its records twice)."""
    return list(dict.fromkeys(paths))


def from_metadata(metadata: dict[str, Any]) -> list[SlowPath]:
    """The records a compile kept in its metadata (none for an entry cached before they existed)."""
    return [SlowPath.from_dict(d) for d in metadata.get("slow_paths") or ()]


_LOCAL = re.compile(r"^\s*\.local\b[^\[;]*\[(\d+)\]", re.MULTILINE)


def ptx_local_bytes(ptx: str) -> int:
    """Bytes of `.local` storage the PTX declares (LLVM's `__local_depot` stack frames)."""
    return sum(int(m.group(1)) for m in _LOCAL.finditer(ptx))


def local_memory(ptx: str, file: str, line: int) -> list[SlowPath]:
    """A record when the PTX declares local memory (an array LLVM could not keep in registers)."""
    nbytes = ptx_local_bytes(ptx)
    if not nbytes:
        return []
    return [SlowPath("local-memory", f"the PTX keeps {nbytes} bytes in local memory (a stack frame): a "
                                     "local array indexed at run time, or an aggregate too large for "
                                     "registers", line, file)]


def from_resources(resources: dict[str, Any], file: str, line: int) -> list[SlowPath]:
    """Records for what ptxas reported: spill stores/loads (registers sent to local memory)."""
    stores, loads = int(resources.get("spill_stores") or 0), int(resources.get("spill_loads") or 0)
    if not (stores or loads):
        return []
    regs = resources.get("registers")
    return [SlowPath("spills", f"ptxas spills registers: {stores} bytes of spill stores, {loads} bytes "
                               f"of spill loads ({regs} registers); fewer live values per thread, or a "
                               "smaller block (a higher register limit), avoid them", line, file)]


def log_slow_paths(model: str, kernel: str, arch: str, paths: Iterable[SlowPath]) -> None:
    """One INFO record per slow path on `kernelbridge.perf` (with `kb_kernel`, `kb_arch`, `kb_line`,
    `kb_kind`, `kb_reason` attributes). Skipped without importing logging when no one has (then no
    handler or level can have been configured)."""
    paths = list(paths)
    logging = sys.modules.get("logging")
    if not paths or logging is None:
        return
    log = logging.getLogger("kernelbridge.perf")
    if not log.isEnabledFor(logging.INFO):
        return
    for p in paths:
        log.info("%s kernel %s for %s takes a slow path at %s", model, kernel, arch, p,
                 extra={"kb_kernel": kernel, "kb_arch": arch, "kb_line": p.line, "kb_file": p.file,
                        "kb_kind": p.kind, "kb_reason": p.reason})


def explain(kernel: str, arch: str, paths: Iterable[SlowPath]) -> str:
    """The `--explain` text: one line per slow path, or one saying there is none."""
    paths = list(paths)
    if not paths:
        return f"kernel {kernel} for {arch}: no slow path found (vector chunk accesses, no local memory, no spills)\n"
    head = f"kernel {kernel} for {arch}: {len(paths)} slow path{'s' if len(paths) > 1 else ''}\n"
    return head + "".join(f"{p}\n" for p in paths)
