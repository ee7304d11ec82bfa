"""Data-parallel steps under torchrun: each rank runs DSL kernels on its own GPU and all-reduces their
output through torch.distributed (NCCL), with the kernels' stream current, so the collective is
ordered after the kernels and the next step's kernels after the collective on the device (no host
synchronisation between steps). Checked against a single-GPU reference of all ranks' work.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/torchrun_allreduce.py
    python examples/torchrun_allreduce.py            # without torchrun: one rank (world size 1)

One step, with W ranks and x_r the input of rank r (all ranks hold the same x after the first step):
    y = x * x / 2        DSL SIMT kernel   (bridge.Array out)
    z = y + 0.25         DSL tile kernel   (into a bridge.Array that torch sees zero-copy)
    all_reduce(z, SUM)   NCCL, issued with the kernels' stream current
    x = z / W            DSL SIMT kernel, reads the all-reduced z
"""
from __future__ import annotations

import argparse
import os
import socket
import sys

import numpy as np

import bridge
from dsl import f32, simt, tile


@simt.kernel(block=256, requires=["len(x) == len(y)"])
def half_square(x: simt.Array[f32], y: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    y[i] = 0.5 * x[i] * x[i]


@tile.kernel
def add_quarter(y: tile.Array[f32], z: tile.Partition[f32]):
    z.store(tile.load(y, tile.bid(0), z.tile_shape) + 0.25)


@simt.kernel(block=256, requires=["len(z) == len(x)"])
def scale_into(z: simt.Array[f32], x: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    x[i] = s * z[i]


def rank_input(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng(1000 + rank).uniform(0.5, 1.5, n).astype(np.float32)


def reference(world: int, n: int, steps: int, torch) -> np.ndarray:
    """All ranks' steps on this GPU with torch alone, in float32."""
    xs = [torch.from_numpy(rank_input(r, n)).cuda() for r in range(world)]
    for _ in range(steps):
        z = sum(0.5 * x * x + 0.25 for x in xs)
        xs = [z / world for _ in range(world)]
    return xs[0].cpu().numpy()


def single_process_env() -> None:
    """Without torchrun: a world of one rank on this machine (TCP store on the loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=(1 << 20) + 77)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"torchrun_allreduce needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    import torch
    import torch.distributed as dist
    if "RANK" not in os.environ:
        single_process_env()
        print("not started by torchrun: running one rank (world size 1)")
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    try:
        ok = run_rank(rank, world, local, args.n, args.steps, torch, dist)
        flag = torch.tensor([1 if ok else 0], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if rank == 0:
            print("PASS" if int(flag.item()) == 1 else "FAIL: a rank's result differs from the reference")
        return 0 if int(flag.item()) == 1 else 1
    finally:
        dist.destroy_process_group()


def run_rank(rank: int, world: int, local: int, n: int, steps: int, torch, dist) -> bool:
    stream = torch.cuda.Stream(device=local)
    with bridge.Device(local), bridge.use_stream(bridge.Stream(stream)):   # bridge, torch: one stream
        x = bridge.from_host(rank_input(rank, n))
        y = bridge.empty((n,), "float32")
        z = bridge.empty((n,), "float32")
        z_t = torch.from_dlpack(z)                     # NCCL reduces the bridge array in place
        zt = tile.partition(z, (1024,))
        for _ in range(steps):
            half_square(x, y)
            add_quarter(y, zt)
            dist.all_reduce(z_t)                       # queued after the kernels, no host wait
            scale_into(z, x, 1.0 / world)              # ordered after the collective on the device
        got = x.to_host()
    stream.synchronize()
    ref = reference(world, n, steps, torch)
    err = float(np.max(np.abs(got - ref)))
    ok = bool(np.allclose(got, ref, rtol=1e-5, atol=1e-6))
    print(f"rank {rank}/{world} on GPU {local}: {steps} steps of {n} floats, max abs error vs the single-GPU "
          f"reference {err:.2e} {'ok' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
