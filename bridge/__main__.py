"""`python -m bridge <command>`: `doctor` (environment report) and `demo` (a mixed pipeline)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge", description="kernelbridge runtime tools")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="report driver, GPUs, compilers, LLVM NVPTX and peer libraries")
    demo = sub.add_parser("demo", help="run the mixed CuPy / torch / DSL / C++ demo pipeline")
    demo.add_argument("rest", nargs=argparse.REMAINDER, help="arguments passed to bridge.demo")
    args = parser.parse_args(argv)

    if args.command == "doctor":
        from bridge.doctor import main as doctor_main
        return doctor_main([])

    # --- demo: the mixed pipeline needs the DSL, so it lives in dsl/demo.py. This command-line entry
    # point is the one place `bridge` reaches up to `dsl`; the library itself never imports it.
    if args.command == "demo":
        from dsl import demo as demo_module
        return int(demo_module.main(args.rest) or 0)
    return 2


if __name__ == "__main__":
    sys.exit(main())
