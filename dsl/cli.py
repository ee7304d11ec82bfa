"""The tool commands `demo`, `doctor` and `cache`, shared by `python -m dsl` and the `kernelbridge`
console script (`kernelbridge demo | doctor | cache ...`).

They live in `dsl` because each needs the DSL (the demo runs DSL kernels, the full doctor probes LLVM
NVPTX and the DSL cache), and `bridge` never imports `dsl`.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

TOOL_COMMANDS = ("demo", "doctor", "cache")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add the tool subcommands to a subparsers object (`dest` must be 'command')."""
    from bridge.doctor import DESCRIPTION
    from dsl import cache_cli, doctor
    sub.add_parser("demo", help="run the mixed C++ / DSL SIMT / DSL tile pipeline (GPU), or compile it "
                                "to PTX and simulate it (no GPU)")
    d = sub.add_parser("doctor", help="report driver, GPUs, CUDA tools, LLVM NVPTX, C++ kernels, cache, "
                                      "settings and peer libraries", description=DESCRIPTION)
    doctor.add_arguments(d)
    c = sub.add_parser("cache", help="inspect or trim the DSL disk cache (info, list, clear, prune)")
    cache_cli.add_arguments(c)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed tool subcommand; returns its exit status."""
    if args.command == "demo":
        from dsl import demo
        return int(demo.main([]) or 0)
    if args.command == "doctor":
        from dsl import doctor
        return doctor.run(args)
    from dsl.cache_cli import CacheCliError, run
    try:
        return run(args)
    except CacheCliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """`kernelbridge <command>`."""
    import bridge
    ap = argparse.ArgumentParser(prog="kernelbridge", description="kernelbridge tools: the demo, the "
                                 "doctor and the DSL cache (`python -m dsl` has the compiler tools too)")
    ap.add_argument("--version", action="version", version=f"kernelbridge {bridge.__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    add_commands(sub)
    return run_command(ap.parse_args(list(argv) if argv is not None else None))


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
