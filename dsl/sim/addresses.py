"""Raw shared and global addresses for the simulator, and asynchronous copies between them.

The tile lowering hands inline PTX raw addresses (`SharedAddress`, `GlobalAddress`): 32-bit shared
window addresses and 64-bit generic ones. Here each allocation gets its own address range: the dynamic
shared bytes start at 0 (so the lowering's 1024-byte rounding keeps them where they are), static shared
allocation k at (k + 1) << 24, global array k at (k + 1) << 40. An address resolves back to one
allocation's bytes; one that does not (or runs past the end) is a simulation error, never a wrong read.

`cp.async` is modelled as the hardware runs it: the source is read when the copy is issued, the shared
write lands only when a `cp.async.wait_group` of the issuing thread completes the copy's group. A
missing or too-weak wait therefore reads stale shared memory in the simulator too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsl.sim.faults import SimulationError
from dsl.sim.memory import MemRef, SharedSpace

SHARED_STEP = 1 << 24
GLOBAL_STEP = 1 << 40


def _bytes(data: np.ndarray, what: str) -> np.ndarray:
    if not data.flags.c_contiguous:
        raise SimulationError(f"simulator: raw addresses into {what} need a C-contiguous array")
    return data.reshape(-1).view(np.uint8)


@dataclass(frozen=True)
class TensorMap:
    """What a CUtensorMap describes, as the simulator binds a TensorMapType parameter (dsl/sim/launch.py,
    from the bound array, as the launcher encodes one from the validated view): the array, the box in
    the array's axis order and the swizzle width (0: none). Read by dsl/tile/ptx/sm90.py's TMA."""
    mem: MemRef
    box: tuple[int, ...]
    swizzle: int


class AddressSpace:
    """Address ranges of the shared allocations of one batch of blocks and of the global arrays."""

    def __init__(self, shared: SharedSpace) -> None:
        self.shared = shared
        self.static: list[MemRef] = []
        self.globals: list[MemRef] = []

    def shared_address(self, mem: MemRef, flat) -> np.ndarray:
        """Shared-window byte addresses of elements `flat` (flat indices) of shared buffer `mem`."""
        return self.shared_base(mem) + np.asarray(flat, np.int64) * mem.data.dtype.itemsize

    def shared_base(self, mem: MemRef) -> int:
        if self.shared.raw is not None and np.may_share_memory(mem.data, self.shared.raw):
            # a view of the dynamic bytes, from its offset on (SharedAlloc.offset)
            return int(mem.data.__array_interface__["data"][0] - self.shared.raw.__array_interface__["data"][0])
        for k, m in enumerate(self.static):
            if m is mem:
                return (k + 1) * SHARED_STEP
        self.static.append(mem)
        return len(self.static) * SHARED_STEP

    def global_base(self, mem: MemRef) -> int:
        for k, m in enumerate(self.globals):
            if m is mem:
                return (k + 1) * GLOBAL_STEP
        self.globals.append(mem)
        return len(self.globals) * GLOBAL_STEP

    def shared_bytes(self, addr: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(per-block byte matrix, offsets) of shared addresses `addr` that all lie in one allocation."""
        addr = np.asarray(addr, np.int64)
        region = np.unique(addr // SHARED_STEP)
        if len(region) != 1:
            raise SimulationError("simulator: one shared-memory access spans several allocations")
        k = int(region[0])
        if k == 0:
            if self.shared.raw is None:
                raise SimulationError("simulator: a shared address into dynamic shared memory that was never allocated")
            rows = self.shared.raw
        else:
            data = self.static[k - 1].data
            rows = data.reshape(data.shape[0], -1).view(np.uint8)
        off = addr - k * SHARED_STEP
        if (off < 0).any() or (off + nbytes > rows.shape[1]).any():
            raise SimulationError(f"simulator: a shared-memory access of {nbytes} bytes outside its allocation "
                                  f"({rows.shape[1]} bytes) at offset {int(off.max())}")
        return rows, off

    def shared_read(self, blk: np.ndarray | int, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """`nbytes` bytes at each shared address of block(s) `blk` (rows of a uint8 matrix)."""
        rows, off = self.shared_bytes(addr, nbytes)
        return rows[np.asarray(blk)[..., None] if np.ndim(blk) else blk, off[:, None] + np.arange(nbytes)]

    def shared_write(self, blk: np.ndarray | int, addr: np.ndarray, data: np.ndarray) -> None:
        """Write row i of the uint8 matrix `data` at shared address addr[i] of block(s) `blk`."""
        rows, off = self.shared_bytes(addr, data.shape[1])
        rows[np.asarray(blk)[..., None] if np.ndim(blk) else blk, off[:, None] + np.arange(data.shape[1])] = data

    def _global(self, addr: np.ndarray, nbytes: int):
        """Yield (argument bytes, lanes, byte offsets) of the addresses in each argument they name."""
        for k in np.unique(addr // GLOBAL_STEP):
            at = addr // GLOBAL_STEP == k
            if not 1 <= k <= len(self.globals):
                raise SimulationError("simulator: a global address that names no kernel argument")
            mem = self.globals[int(k) - 1]
            flat = _bytes(mem.data, f"argument '{mem.name}'")
            off = addr[at] - int(k) * GLOBAL_STEP
            if (off < 0).any() or (off + nbytes > flat.size).any():
                raise SimulationError(f"simulator: a {nbytes}-byte access outside argument '{mem.name}' "
                                      f"({flat.size} bytes) at byte {int(off.max())}")
            yield flat, at, off

    def global_write(self, addr: np.ndarray, data: np.ndarray) -> None:
        """Write row i of the uint8 matrix `data` at global address addr[i]."""
        addr = np.asarray(addr, np.int64)
        for flat, at, off in self._global(addr, data.shape[1]):
            flat[off[:, None] + np.arange(data.shape[1])] = data[at]

    def global_read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """`nbytes` bytes at each global address (rows of a uint8 matrix)."""
        addr = np.asarray(addr, np.int64)
        out = np.zeros((len(addr), nbytes), np.uint8)
        for flat, at, off in self._global(addr, nbytes):
            out[at] = flat[off[:, None] + np.arange(nbytes)]
        return out


class AsyncCopies:
    """Pending cp.async copies, grouped per thread as cp.async.commit_group / wait_group do."""

    def __init__(self, nlanes: int, land_at_issue: AddressSpace | None = None) -> None:
        self.commits = np.zeros(nlanes, np.int64)      # groups each thread has committed so far
        self.pending: list[tuple] = []                 # (lanes, group, blk, shared addr, bytes)
        # when the copies land: at the wait that completes them (the latest the hardware may), or, given
        # the address space, at issue (the earliest: a buffer still read after its next copy was issued
        # then reads the new data)
        self.land_at_issue = land_at_issue

    def issue(self, lanes: np.ndarray, blk: np.ndarray, dst: np.ndarray, data: np.ndarray) -> None:
        if self.land_at_issue is not None:
            self.land_at_issue.shared_write(blk, np.asarray(dst, np.int64), data)
        else:
            self.pending.append((lanes, self.commits[lanes].copy(), blk, np.asarray(dst, np.int64), data))

    def commit(self, lanes: np.ndarray) -> None:
        self.commits[lanes] += 1

    def at_exit(self) -> str | None:
        """At the kernel's end: a copy never waited for still writes the shared memory of an exited block."""
        if self.pending:
            lanes = sorted({int(x) for ln, *_ in self.pending for x in ln})
            return f"{len(lanes)} thread(s) ended with cp.async copies never waited for (first: lane {lanes[0]})"
        return None

    def wait(self, lanes: np.ndarray, keep: int, space: AddressSpace) -> None:
        """Complete the copies of `lanes` in all but their `keep` most recent committed groups."""
        waiting = np.zeros(len(self.commits), bool)
        waiting[lanes] = True
        rest = []
        for ln, grp, blk, dst, data in self.pending:
            done = waiting[ln] & (grp < self.commits[ln] - keep)
            if done.any():
                space.shared_write(blk[done], dst[done], data[done])
            if not done.all():
                rest.append((ln[~done], grp[~done], blk[~done], dst[~done], data[~done]))
        self.pending = rest
