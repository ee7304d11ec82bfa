"""`python -m dsl compile path.py::kernel --arch sm_90 [--sig "f32[:],f32[:],f32[::1]"] [-o out.ptx]`,
`python -m dsl port kernels.cu --kernel saxpy` (dsl/port.py) and `python -m dsl new NAME` (dsl/scaffold.py).

Tool commands (dsl/cli.py, also the `kernelbridge` console script): `python -m dsl demo`,
`python -m dsl doctor [--json]`, `python -m dsl cache info|list|clear|prune`.

Compiles one @simt.kernel offline (no GPU needed) and prints the PTX (or writes it to -o) followed by
the resource usage ptxas reports (registers, spills, shared memory) on stderr.

Signature syntax (one entry per parameter, in order): a scalar dtype (`f32`, `i64`, `bool`, ...) or an
array `dtype[...]` with one `:` per axis; `::1` on the last axis means C-contiguous; a trailing `@16`
means the data pointer is 16-byte aligned (e.g. `f32[::1]@16`). Whether an array is an Array or a
DisjointSlice comes from the kernel's annotations. Without --sig, every array is taken as
C-contiguous and 16-byte aligned (what a freshly allocated array gives).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

_ARRAY = re.compile(r"^(\w+)\[([:,\s1]*)\](@16)?$")


class CliError(Exception):
    """A usage mistake; printed as `error: ...` with exit status 2."""


def load_kernel(spec: str) -> Any:
    """'path/to/file.py::name' -> the kernel object defined there."""
    if "::" not in spec:
        raise CliError(f"expected FILE.py::KERNEL, got {spec!r}")
    path_s, name = spec.rsplit("::", 1)
    path = Path(path_s)
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    mod_name = f"_kb_cli_{path.stem}"
    mod_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.parent.resolve()))
    mod_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise CliError(f"{path} defines no {name!r}")
    kernel = getattr(module, name)
    if not hasattr(kernel, "pyfunc") or not hasattr(kernel, "options"):
        raise CliError(f"{name!r} in {path} is not a @simt.kernel")
    return kernel


def parse_sig(text: str, annotations: list) -> list:
    """Parse --sig against the kernel's parameter annotations into IR types."""
    from bridge import dtypes
    from dsl.ir.types import SCALARS, ArrayType
    aliases = {"boolean": "bool", **{r.long_name: r.name for r in dtypes.kernel_rows()}}
    parts = [p.strip() for p in re.split(r",(?![^\[]*\])", text) if p.strip()]
    if len(parts) != len(annotations):
        raise CliError(f"--sig gives {len(parts)} types but the kernel has {len(annotations)} parameters")
    out = []
    for part, ann in zip(parts, annotations):
        m = _ARRAY.match(part)
        name = aliases.get(m.group(1) if m else part, m.group(1) if m else part)
        if name not in SCALARS:
            raise CliError(f"--sig: unknown dtype {name!r} in {part!r}; one of {', '.join(SCALARS)}")
        if m is None:
            if ann.kind == "array":
                raise CliError(f"--sig: parameter {ann.name!r} is an array, got scalar {part!r}")
            out.append(SCALARS[name])
            continue
        if ann.kind != "array":
            raise CliError(f"--sig: parameter {ann.name!r} is a scalar, got array {part!r}")
        axes = [a.strip() for a in m.group(2).split(",")]
        layout = "C" if axes[-1] == "::1" else "any"
        out.append(ArrayType(SCALARS[name], len(axes), writable=ann.writable, layout=layout,
                             aligned16=bool(m.group(3))))
    return out


def default_sig(annotations: list) -> list:
    from dsl.ir.types import ArrayType
    out = []
    for ann in annotations:
        if ann.is_generic:
            raise CliError(f"parameter {ann.name!r} has a generic dtype: give --sig")
        if ann.kind == "array":
            out.append(ArrayType(ann.dtype, ann.ndim, writable=ann.writable, layout="C", aligned16=True))
        else:
            out.append(ann.dtype)
    return out


def cmd_compile(args: argparse.Namespace) -> int:
    from dsl.backend.ptxas import PtxasNotFound, assemble
    from dsl.compiler import compile_kernel
    kernel = load_kernel(args.target)
    anns = kernel.annotations
    sig = parse_sig(args.sig, anns) if args.sig else default_sig(anns)
    ck = compile_kernel(kernel.pyfunc, sig, kernel.options, args.arch, dump=args.dump,
                        cache=not args.no_cache)
    if args.output:
        Path(args.output).write_text(ck.ptx)
    else:
        sys.stdout.write(ck.ptx)
    print(f"// kernel {ck.name} for {args.arch}; signature ({', '.join(map(repr, sig))}); "
          f"cache: {ck.metadata.get('cache')}", file=sys.stderr)
    try:
        usages, _ = assemble(ck.ptx, args.arch)
    except PtxasNotFound as e:
        print(f"// resource usage unavailable: {e}", file=sys.stderr)
        return 0
    for u in usages:
        print(f"// ptxas {u.arch} {u.kernel}: {u.registers} registers, {u.spill_stores} bytes spill "
              f"stores, {u.spill_loads} bytes spill loads, {u.stack_frame} bytes stack, "
              f"{u.shared_bytes} bytes shared, {u.barriers} barriers", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsl", description="kernelbridge DSL tools")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a @simt.kernel to PTX and show its resource usage")
    c.add_argument("target", help="FILE.py::KERNEL")
    c.add_argument("--arch", default="sm_90", help="sm_80, sm_86, sm_89, sm_90, sm_100, ...")
    c.add_argument("--sig", help='parameter types, e.g. "f32[::1]@16,f32[:],i64"')
    c.add_argument("-o", "--output", help="write the PTX here instead of stdout")
    c.add_argument("--dump", help="comma-separated stages to dump to stderr (frontend, ir, llvm_ir, "
                                  "optimize, ptx, all)")
    c.add_argument("--no-cache", action="store_true", help="bypass the disk cache")
    pt = sub.add_parser("port", help="write a DSL kernel with a C++ kernel's signature, and a test comparing them")
    pt.add_argument("source", help="the .cu file holding the kernel (or a built .fatbin/.cubin/.ptx)")
    pt.add_argument("--kernel", help="name of the extern \"C\" kernel with a KB_CONTRACT")
    pt.add_argument("--module", help="read the contract from this built module instead of compiling the source")
    pt.add_argument("-o", "--output", default=".", help="directory for <kernel>_port.py and its test (default .)")
    pt.add_argument("--arch", default="sm_90", help="arch nvcc compiles the source for to read the contract")
    pt.add_argument("-I", "--include", action="append", help="extra include directory for nvcc (repeatable)")
    pt.add_argument("--force", action="store_true", help="overwrite existing port files")
    nw = sub.add_parser("new", help="create a small mixed CUDA C++ + DSL project that builds and passes its tests")
    nw.add_argument("name", help="project name (a Python identifier); the directory created")
    nw.add_argument("--dir", default=".", help="where to create it (default .)")
    nw.add_argument("--arrays", choices=("cupy", "torch"), default="cupy", help="array library of the pipeline")
    nw.add_argument("--model", choices=("simt", "tile"), default="simt", help="DSL programming model")
    # --- tool commands: demo, doctor, cache (dsl/cli.py) ---
    from dsl import cli
    cli.add_commands(sub)
    args = ap.parse_args(argv)
    if args.command in cli.TOOL_COMMANDS:
        return cli.run_command(args)
    # --- end of tool commands ---
    from dsl.backend.target import TargetError
    from dsl.errors import DslCompileError
    from dsl.port import PortError
    try:
        if args.command == "port":
            from dsl.port import cmd_port
            return cmd_port(args)
        if args.command == "new":
            from dsl.scaffold import cmd_new
            return cmd_new(args)
        return cmd_compile(args)
    except (CliError, TargetError, ValueError, PortError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except DslCompileError as e:
        print(str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
