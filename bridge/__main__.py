"""`python -m bridge doctor`: the runtime's environment report (see bridge/doctor.py).

The demo and the full doctor need the DSL, and `bridge` never imports `dsl`: they are
`python -m dsl demo` / `python -m dsl doctor` (or the `kernelbridge` command). `python -m bridge demo`
only says where the demo went.
"""
from __future__ import annotations

import argparse
import sys

DEMO_MOVED = ("the demo moved: run `python -m dsl demo` (or `kernelbridge demo`); `bridge` is the runtime "
              "and never imports the DSL the demo needs")


def main(argv: list[str] | None = None) -> int:
    from bridge import doctor
    parser = argparse.ArgumentParser(prog="python -m bridge", description="kernelbridge runtime tools")
    sub = parser.add_subparsers(dest="command", required=True)
    doc = sub.add_parser("doctor", help="report driver, GPUs, CUDA tools, C++ kernels and peer libraries",
                         description=doctor.DESCRIPTION)
    doctor.add_arguments(doc)
    demo = sub.add_parser("demo", help="moved to `python -m dsl demo`")
    demo.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor.execute(args, doctor.bridge_sections, full=False)
    print(f"python -m bridge demo: {DEMO_MOVED}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
