"""Command line: train a few GPT-2 steps on a chosen mix of C++ and DSL kernels and compare each step's
loss and gradient norm with the plain PyTorch reference.

    python -m examples.gpt2 --config tiny --steps 3 --dsl all [--graph] [--simulate]
    python -m examples.gpt2 --list            # the ops --dsl can name, and each one's C++ side

Run from the repository root (examples/ is a namespace package). Without a GPU the run is on the CPU
simulator, which takes --dsl all only (the C++ kernels need a GPU). Exit status 1 when a step's loss or
norm is outside the tolerances below.
"""
from __future__ import annotations

import argparse
import sys

from . import registry
from .arrays import ArraysError, array_lib
from .config import CONFIGS, ConfigError, config
from .train import NeedsGpuError, StepRecord, check_runnable, train

# |ours / reference - 1| allowed per step. On the simulator, 20 steps all-DSL stay within 2e-5 (loss) and
# 1.3e-3 (norm) of float64 for tiny, 1.2e-5 and 7e-4 for mini (2026-12-04): f32 activations, tf32-rounded
# GEMM inputs, f16 attention operands. The GPU adds tf32 wgmma's truncation, cuBLAS and the device's
# reduction orders; these bounds are the GPU test's (interop_tests/gpt2/test_gpt2_gpu.py, 20 mini steps).
LOSS_RTOL = 2e-3
NORM_RTOL = 5e-2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m examples.gpt2", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dsl", default="all", help="'all', 'none' or a comma list of ops / families (--list)")
    ap.add_argument("--graph", action="store_true", help="replay forward+backward+clip as one CUDA graph (GPU)")
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    ap.add_argument("--arrays", default="torch", choices=("torch", "cupy", "numpy"),
                    help="the library holding parameters and activations: torch (default), cupy (GPU only) "
                         "or numpy (simulator only)")
    ap.add_argument("--batch", type=int, default=None, help="override the config's batch size")
    ap.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
    ap.add_argument("--list", action="store_true", help="list the ops and exit")
    return ap.parse_args(argv)


def reference_losses(cfg, steps: int, gpu: bool) -> list[tuple[float, float]]:
    from .model import init_params
    from .reference import reference_run
    return reference_run(cfg, init_params(cfg), steps, device="cuda" if gpu else "cpu")


def report(rec: StepRecord, ref: tuple[float, float] | None) -> bool:
    line = f"step {rec.step:3d}  loss {rec.loss:.6f}  grad norm {rec.grad_norm:.6f}  ({rec.ms:.1f} ms)"
    if ref is None:
        print(line)
        return True
    dl, dn = abs(rec.loss / ref[0] - 1), abs(rec.grad_norm / ref[1] - 1)
    ok = dl <= LOSS_RTOL and dn <= NORM_RTOL
    print(f"{line}   reference loss {ref[0]:.6f} (rel {dl:.1e})  norm {ref[1]:.6f} (rel {dn:.1e})"
          f"{'' if ok else '  OUT OF TOLERANCE'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in registry.NAMES:
            print(f"{name:22} cpp: {registry.CPP_SIDE[name]}")
        return 0
    import bridge
    simulate = args.simulate or not bridge.gpu_available()
    try:
        dsl = registry.parse_dsl(args.dsl)
        cfg = config(args.config, **({"batch_size": args.batch} if args.batch else {}))
        arrays = args.arrays
        array_lib(arrays, "cpu" if simulate else "cuda")     # refused here, before the reference runs
        check_runnable(dsl, simulate, args.graph)
        where = "the CPU simulator" if simulate else f"the GPU ({bridge.current_device().name})"
        print(f"GPT-2 {args.config}: L{cfg.n_layer} H{cfg.n_head} C{cfg.n_embd} V{cfg.vocab_size} "
              f"(padded {cfg.padded_vocab_size}) B{cfg.batch_size} T{cfg.seq_len}; --dsl {registry.describe(dsl)}"
              f"{' --graph' if args.graph else ''}; {arrays} arrays on {where}")
        refs = None if args.no_reference else reference_losses(cfg, args.steps, not simulate)
        ok = []
        train(cfg, dsl, args.steps, simulate=simulate, graph=args.graph, arrays=arrays,
              on_step=lambda r: ok.append(report(r, refs[r.step - 1] if refs else None)))
    except (registry.UnknownKernelError, ConfigError, NeedsGpuError, ArraysError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("PASS" if all(ok) else "FAIL")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
