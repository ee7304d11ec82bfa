"""GPU launch of a tile kernel: compile for the current device's arch, then one validated launch
through `bridge.kernel_from_ptx` (the same contract checks as every other kernel)."""
from __future__ import annotations

from dsl.tile.host import Partition

PERSISTENT_BLOCKS_PER_SM = 2      # grid of a persistent tile kernel: this many blocks per SM


def launch(kernel, args: tuple, stream: object = None) -> None:
    """Launch `kernel` on `args` (device arrays / partitions of device arrays / scalars)."""
    import bridge
    dev = bridge.current_device()
    ck = kernel.compile(args, dev.arch)
    grid = kernel.grid(args)
    total = 1
    for g in grid:
        total *= g
    if total == 0:
        return
    # a grid past the device's limit is refused by the one validator in the launch below
    blocks = total
    if kernel.persistent:
        blocks = min(total, PERSISTENT_BLOCKS_PER_SM * dev.sm_count)
    flat = [a.array if isinstance(a, Partition) else a
            for spec, a in zip(kernel.specs, args) if spec.kind != "const"]
    bk = ck.loaded.get(dev.ordinal)      # explicit per-device cache of the loaded module's kernel
    if bk is None:
        bk = ck.loaded[dev.ordinal] = bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json)
    bk(*flat, grid=(blocks, 1, 1), block=(ck.threads, 1, 1), shared_mem=ck.dynamic_smem, stream=stream)
