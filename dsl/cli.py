"""The one kernelbridge command line: `kernelbridge <command>` (the console script) and
`python -m dsl <command>` are this parser, with every command: demo, doctor, compile, port, new,
cache, version, and `--version`.

It lives in `dsl` because most commands need the DSL, and `bridge` never imports `dsl`: `python -m
bridge` (bridge/cli.py) runs the runtime-only ones (doctor's runtime half, version) and answers a DSL
command with the command line to use.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from bridge.cli import add_version, version_line



def _add_demo_doctor(sub: argparse._SubParsersAction) -> None:
    from bridge.doctor import DESCRIPTION
    from dsl import doctor
    sub.add_parser("demo", help="run the mixed C++ / DSL SIMT / DSL tile pipeline (GPU), or compile it "
                                "to PTX and simulate it (no GPU)")
    d = sub.add_parser("doctor", help="report driver, GPUs, CUDA tools, LLVM NVPTX, C++ kernels, cache, "
                                      "settings and peer libraries", description=DESCRIPTION)
    doctor.add_arguments(d)


def _add_port(sub: argparse._SubParsersAction) -> None:
    pt = sub.add_parser("port", help="write a DSL kernel with a C++ kernel's signature, and a test comparing them")
    pt.add_argument("source", help="the .cu file holding the kernel (or a built .fatbin/.cubin/.ptx)")
    pt.add_argument("--kernel", help="name of the extern \"C\" kernel with a KB_CONTRACT")
    pt.add_argument("--module", help="read the contract from this built module instead of compiling the source")
    pt.add_argument("-o", "--output", default=".", help="directory for <kernel>_port.py and its test (default .)")
    pt.add_argument("--arch", default="sm_90", help="arch nvcc compiles the source for to read the contract")
    pt.add_argument("-I", "--include", action="append", help="extra include directory for nvcc (repeatable)")
    pt.add_argument("--force", action="store_true", help="overwrite existing port files")


def _add_new(sub: argparse._SubParsersAction) -> None:
    nw = sub.add_parser("new", help="create a small mixed CUDA C++ + DSL project that builds and passes its tests")
    nw.add_argument("name", help="project name (a Python identifier); the directory created")
    nw.add_argument("--dir", default=".", help="where to create it (default .)")
    nw.add_argument("--arrays", choices=("cupy", "torch"), default="cupy", help="array library of the pipeline")
    nw.add_argument("--model", choices=("simt", "tile"), default="simt", help="DSL programming model")


def build_parser(prog: str = "kernelbridge") -> argparse.ArgumentParser:
    """The full parser, the same for every entry point but its `prog`."""
    from dsl import cache_cli, compile_cli
    ap = argparse.ArgumentParser(prog=prog, description="kernelbridge: the demo, the doctor, the DSL "
                                 "compiler tools and the DSL cache. `kernelbridge` and `python -m dsl` are "
                                 "the same program; `python -m bridge` has only doctor and version.")
    sub = ap.add_subparsers(dest="command", required=True)      # usage lists the commands as added
    _add_demo_doctor(sub)
    compile_cli.add_arguments(sub.add_parser("compile", help=compile_cli.HELP, description=compile_cli.DESCRIPTION))
    _add_port(sub)
    _add_new(sub)
    cache_cli.add_arguments(sub.add_parser("cache", help="inspect or trim the DSL disk cache (info, list, "
                                                         "clear, prune)"))
    add_version(ap, sub)
    return ap


def _run_tool(args: argparse.Namespace) -> int:
    """compile, port, new: a usage mistake is `error: ...` and exit 2, a compile error exit 1."""
    from dsl.backend.target import TargetError
    from dsl.compile_cli import CliError
    from dsl.errors import DslCompileError
    from dsl.port import PortError
    try:
        if args.command == "port":
            from dsl.port import cmd_port
            return cmd_port(args)
        if args.command == "new":
            from dsl.scaffold import cmd_new
            return cmd_new(args)
        from dsl.compile_cli import cmd_compile
        return cmd_compile(args)
    except (CliError, TargetError, ValueError, PortError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except DslCompileError as e:
        print(str(e), file=sys.stderr)
        return 1


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; returns its exit status."""
    if args.command == "version":
        print(version_line())
        return 0
    if args.command == "demo":
        from dsl import demo
        return int(demo.main([]) or 0)
    if args.command == "doctor":
        from dsl import doctor
        return doctor.run(args)
    if args.command != "cache":
        return _run_tool(args)
    from dsl.cache_cli import CacheCliError, run
    try:
        return run(args)
    except CacheCliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None, prog: str = "kernelbridge") -> int:
    """`kernelbridge <command>` / `python -m dsl <command>`; returns the exit status."""
    return run_command(build_parser(prog).parse_args(list(argv) if argv is not None else None))


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
