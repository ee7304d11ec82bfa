"""Replay fuzz inputs: `python -m interop_tests.fuzz.replay <target> <index> [<index>...] [--seed S]`.

Regenerates input `index` of `target` from the seed (default: `KB_FUZZ_SEED`, else the target's fixed
seed), prints its repr, and runs it in this process, so a crash happens here (run it under gdb or
with `python -X faulthandler`) and an exception shows its full traceback. `--isolated` runs it through
a worker subprocess instead and prints the harness's verdict. `--show` only prints the input.
"""
from __future__ import annotations

import argparse
import sys
import traceback


def main(argv: list[str] | None = None) -> int:
    from interop_tests.fuzz.harness import Runner, input_rng, target_seed
    from interop_tests.fuzz.targets import Oracle, load
    p = argparse.ArgumentParser(prog="python -m interop_tests.fuzz.replay", description=__doc__)
    p.add_argument("target")
    p.add_argument("index", type=int, nargs="+")
    p.add_argument("--seed", type=lambda s: int(s, 0), default=None)
    p.add_argument("--isolated", action="store_true", help="run through a worker subprocess")
    p.add_argument("--show", action="store_true", help="print the input and stop")
    args = p.parse_args(argv)
    seed = target_seed(args.target) if args.seed is None else args.seed
    target = load(args.target)
    verdicts = 0
    for index in args.index:
        spec = target.generate(input_rng(args.target, seed, index))
        print(f"--- {args.target} seed={seed} index={index}\ninput: {spec!r}", flush=True)
        if args.show:
            continue
        if args.isolated:
            report = Runner(args.target, seed=seed, specs=[spec], first_index=index).run()
            print(report.failure_text() if report.findings else report.summary())
            verdicts += bool(report.findings)
            continue
        target.warm()
        try:
            print("ok:", target.execute(spec))
        except Oracle as exc:
            print(f"FINDING (oracle): {exc}")
            verdicts += 1
        except BaseException as exc:   # noqa: BLE001 - report whatever it is
            verdict = "allowed" if target.allowed(exc, spec) else "FINDING"
            verdicts += verdict == "FINDING"
            print(f"{verdict}: {type(exc).__name__}")
            traceback.print_exception(exc)
    return 1 if verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
