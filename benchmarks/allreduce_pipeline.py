"""Time per step of a data-parallel pipeline on every GPU of the machine (one process per GPU, NCCL):
bridge (DSL SIMT + DSL tile kernels, torch.distributed all-reduce on the kernels' stream) against the
same pipeline in torch alone, in one run, the two variants interleaved round by round.

One step (examples/torchrun_allreduce.py): y = x*x/2 (SIMT), z = y + 1/4 (tile), all_reduce(z),
x = z / W (SIMT); torch alone: the same four operations as torch ops. Both variants are checked
against each other before they are timed. Reported: milliseconds per step (median over rounds of
`steps` back-to-back steps, CUDA events on rank 0's stream), and the ratio torch / ours.

    python benchmarks/allreduce_pipeline.py [--quick] [--json out.json]

Needs 2 GPUs: with fewer it says "needs 2 GPUs, found N" and writes its JSON with that note.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

from _common import Report, parse_args  # noqa: E402

N = 1 << 24            # floats per rank: 64 MiB, bandwidth-bound kernels and collective
BAR = 0.95             # target: ours >= 0.95x torch alone (time ratio torch / ours)


def worker(rank: int, world: int, port: int, out_path: str, quick: bool) -> None:
    """One rank: build both pipelines, check them against each other, time them; rank 0 writes JSON."""
    import torch
    import torch.distributed as dist

    import bridge
    from dsl import tile
    sys.path.insert(0, str(ROOT / "examples"))
    from torchrun_allreduce import add_quarter, half_square, rank_input, scale_into

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    stream = torch.cuda.Stream(device=rank)
    steps, rounds = (5, 5) if quick else (20, 9)
    try:
        with bridge.Device(rank), bridge.use_stream(bridge.Stream(stream)):
            x0 = torch.from_numpy(rank_input(rank, N)).cuda()
            x, y, z = (bridge.empty((N,), "float32") for _ in range(3))
            z_t, x_t = torch.from_dlpack(z), torch.from_dlpack(x)
            zt = tile.partition(z, (1024,))
            tx = torch.empty_like(x0)

            def ours(k: int) -> None:
                for _ in range(k):
                    half_square(x, y)
                    add_quarter(y, zt)
                    dist.all_reduce(z_t)
                    scale_into(z, x, 1.0 / world)

            def torch_alone(k: int) -> None:
                for _ in range(k):
                    tz = 0.5 * tx * tx + 0.25
                    dist.all_reduce(tz)
                    torch.div(tz, world, out=tx)

            x_t.copy_(x0)
            tx.copy_(x0)
            ours(3)
            torch_alone(3)
            stream.synchronize()
            diff = float((x_t - tx).abs().max().item())
            times: dict[str, list[float]] = {"ours": [], "torch": []}
            for r in range(rounds):
                for name, fn in (("ours", ours), ("torch", torch_alone))[:: 1 if r % 2 == 0 else -1]:
                    dist.barrier()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                    fn(steps)
                    e1.record(stream)
                    e1.synchronize()
                    times[name].append(e0.elapsed_time(e1) / steps)
        if rank == 0:
            Path(out_path).write_text(json.dumps({"world": world, "n": N, "steps": steps, "diff": diff,
                                                  "times": times, "gpu": torch.cuda.get_device_name(0)}))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("all-reduce pipeline: bridge DSL kernels + NCCL vs torch alone (ms per step)")
    import bridge
    found = bridge.device_count() if bridge.gpu_available() else 0
    if found < 2:
        msg = f"needs 2 GPUs, found {found}"
        print(msg)
        rep.notes.append(msg)
        rep.extra["not_run"] = msg
        rep.finish(args.json)
        return 0
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        mp.spawn(worker, args=(found, free_port(), out, args.quick), nprocs=found, join=True)
        res = json.loads(Path(out).read_text())
    ours, peer = statistics.median(res["times"]["ours"]), statistics.median(res["times"]["torch"])
    tag = f"{res['world']} GPUs, {res['n']} floats per rank"
    rep.row(f"bridge pipeline per step ({tag})", ours, "ms")
    rep.row(f"torch-alone pipeline per step ({tag})", peer, "ms")
    rep.row("max |ours - torch| after 3 steps", res["diff"], "abs")
    rep.extra["rounds"] = res["times"]
    if res["diff"] > 1e-5:
        rep.notes.append(f"the two pipelines disagree by {res['diff']:.3g}: timings not comparable")
        rep.finish(args.json)
        return 1
    rep.bar("all-reduce pipeline per step: bridge DSL + NCCL vs torch alone", ours, peer,
            higher_is_better=False, bar=BAR, peer_name="torch alone")
    rep.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
