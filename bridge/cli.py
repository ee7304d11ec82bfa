"""`python -m bridge`: the runtime's half of the one kernelbridge command line.

The full program is `kernelbridge <command>` (dsl/cli.py; `python -m dsl` is the same parser). `bridge`
never imports `dsl`, so here only the commands that need no DSL run (`doctor`: the runtime half of the
report, `version`); every DSL command is still accepted by name and answered with the exact command
line that runs it, exit status 2, instead of a bare "invalid choice".
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

# The full program's commands that need the DSL: name -> what it does (dsl/cli.py adds the same names;
# interop_tests/cli/test_one_cli.py holds the two lists together).
DSL_COMMANDS: dict[str, str] = {
    "demo": "run the mixed C++ / DSL pipeline",
    "compile": "compile a DSL kernel to PTX",
    "port": "port a C++ kernel to the DSL",
    "new": "create a mixed C++ + DSL project",
    "cache": "inspect or trim the DSL disk cache",
}
RUNTIME_COMMANDS = ("doctor", "version")


def version_line() -> str:
    """What `--version` and the `version` command print, on every entry point."""
    import bridge
    return f"kernelbridge {bridge.__version__}"


def add_version(ap: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """`--version` on the parser and a `version` command (dest 'command')."""
    ap.add_argument("--version", action="version", version=version_line())
    sub.add_parser("version", help="print the kernelbridge version", description="Print the kernelbridge version.")


def needs_dsl(prog: str, command: str) -> str:
    """The refusal of a DSL command under `python -m bridge`: which command line to use instead."""
    return (f"{prog} {command}: `{command}` needs the DSL, and `bridge` (the runtime) never imports it; "
            f"run `kernelbridge {command}` or `python -m dsl {command}` (same options)")


def build_parser(prog: str = "python -m bridge") -> argparse.ArgumentParser:
    """The runtime-only parser: doctor and version run; a DSL command is only a name (main points on)."""
    from bridge import doctor
    ap = argparse.ArgumentParser(prog=prog, description="kernelbridge runtime tools (no DSL). The full "
                                 "program, with the DSL commands too, is `kernelbridge` / `python -m dsl`.")
    sub = ap.add_subparsers(dest="command", required=True)
    doc = sub.add_parser("doctor", help="report driver, GPUs, CUDA tools, C++ kernels and peer libraries "
                                        "(the runtime half; `kernelbridge doctor` adds the DSL's)",
                         description=doctor.DESCRIPTION)
    doctor.add_arguments(doc)
    add_version(ap, sub)
    for name, what in DSL_COMMANDS.items():
        sub.add_parser(name, help=f"{what}: needs the DSL, run `kernelbridge {name}`", add_help=False)
    return ap


def main(argv: Sequence[str] | None = None, prog: str = "python -m bridge") -> int:
    """`python -m bridge <command>`; returns the exit status."""
    ap = build_parser(prog)
    args, extra = ap.parse_known_args(list(argv) if argv is not None else None)
    if args.command in DSL_COMMANDS:         # whatever options follow belong to the DSL's parser
        print(needs_dsl(prog, args.command), file=sys.stderr)
        return 2
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "doctor":
        from bridge import doctor
        return doctor.execute(args, doctor.bridge_sections, full=False)
    print(version_line())
    return 0
