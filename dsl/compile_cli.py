"""The `compile` command (`kernelbridge compile FILE.py::KERNEL`, `python -m dsl compile ...`): one
@simt.kernel or @tile.kernel compiled offline (no GPU needed); the PTX goes to stdout (or -o), the
resource usage ptxas reports (registers, spills, shared memory) to stderr. With `--explain`, stdout
gets instead each slow path the kernel takes, with its source line and reason (dsl/perf.py).

FILE is imported as a module named `_kb_cli_<stem>`, never as `__main__`: its
`if __name__ == "__main__":` block does not run (module-level code does, as on any import), and what
that code prints goes to stderr so that stdout stays the PTX.

Signature syntax (--sig, one entry per parameter, in order):
- a scalar dtype (`f32`, `i64`, `bool`, ...);
- an array `dtype[...]` with one `:` per axis; `::1` on the last axis means C-contiguous; then
  optionally `@16` (the data pointer is 16-byte aligned) and, for tile kernels, `%8` (the last extent
  is a multiple of 8: what the tensor-core GEMM path needs), e.g. `f16[:,::1]@16%8`;
- tile kernels only: a `tile.Partition` is an array with its tile shape after a `/`, e.g.
  `f32[:,::1]/128x64` (powers of two, one per axis), and a `tile.Constant` is `=` and a Python
  literal, e.g. `=32`.
Whether an array is read-only or writable comes from the kernel's annotations (Array/DisjointSlice,
Array/Partition); a TypeVar binds from the first entry that gives it, later entries must agree.
Without --sig, every array is taken as C-contiguous and 16-byte aligned (what a freshly allocated
array gives; tile arrays also with rows of a multiple of 8 elements); a kernel with generic dtypes,
partitions or constants needs --sig.
"""
from __future__ import annotations

import argparse
import contextlib
import re
import sys
from pathlib import Path
from typing import Any

from dsl.errors import DslToolError
from dsl.userfile import load_user_file

_ARRAY = re.compile(r"^(\w+)\[([:,\s1]*)\](@16)?(%8)?(?:/([0-9x\s]+))?$")


def _aliases() -> dict[str, str]:
    from bridge import dtypes   # the one dtype table: long names ("int32", "bfloat16") -> kernel names
    return {"boolean": "bool", **{r.long_name: r.name for r in dtypes.kernel_rows()}}


_ALIASES = _aliases()


class CliError(DslToolError):
    """A usage mistake; printed as `error: ...` with exit status 2."""


def load_kernel(spec: str) -> Any:
    """'path/to/file.py::name' -> the @simt.kernel or @tile.kernel defined there. The file is imported
    as `_kb_cli_<stem>` (dsl/userfile.py), so its `__main__` block does not run; its prints go to stderr."""
    if "::" not in spec:
        raise CliError(f"expected FILE.py::KERNEL, got {spec!r}")
    path_s, name = spec.rsplit("::", 1)
    path = Path(path_s)
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    with contextlib.redirect_stdout(sys.stderr):     # stdout is the PTX
        module = load_user_file(path, "_kb_cli_")
    if not hasattr(module, name):
        raise CliError(f"{path} defines no {name!r}")
    kernel = getattr(module, name)
    from dsl.simt.kernel import SimtKernel
    from dsl.tile.host import TileKernel
    if not isinstance(kernel, (SimtKernel, TileKernel)):
        raise CliError(f"{name!r} in {path} is not a @simt.kernel or @tile.kernel")
    return kernel


class Entry:
    """One parsed --sig entry: kind "scalar" | "array" | "const"; arrays with their facts."""

    def __init__(self, text: str, kind: str, dtype: Any = None, ndim: int = 0, contiguous: bool = False,
                 aligned: bool = False, div8: bool = False, tile: tuple[int, ...] | None = None,
                 value: Any = None) -> None:
        self.text, self.kind, self.dtype, self.ndim = text, kind, dtype, ndim
        self.contiguous, self.aligned, self.div8, self.tile, self.value = contiguous, aligned, div8, tile, value


def _dtype(name: str, part: str) -> Any:
    from dsl.ir.types import SCALARS
    name = _ALIASES.get(name, name)
    if name not in SCALARS and name == part and re.fullmatch(r"[-+]?[0-9.]+|True|False", part):
        raise CliError(f"--sig: {part!r} is not a dtype; a tile.Constant is written ={part}")
    if name not in SCALARS:
        raise CliError(f"--sig: unknown dtype {name!r} in {part!r}; one of {', '.join(SCALARS)}")
    return SCALARS[name]


def parse_entries(text: str, annotations: list) -> list[Entry]:
    """Split and parse --sig (commas inside [...] belong to an array)."""
    import ast
    parts = [p.strip() for p in re.split(r",(?![^\[]*\])", text) if p.strip()]
    if len(parts) != len(annotations):
        raise CliError(f"--sig gives {len(parts)} types but the kernel has {len(annotations)} parameters")
    out = []
    for part in parts:
        if part.startswith("="):
            try:
                value = ast.literal_eval(part[1:].strip())
                hash(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise CliError(f"--sig: {part!r}: a constant is `=` and a hashable Python literal, e.g. =32") from None
            out.append(Entry(part, "const", value=value))
            continue
        m = _ARRAY.match(part)
        if m is None:
            if "[" in part or "/" in part or "@" in part:
                raise CliError(f"--sig: cannot read {part!r}; arrays are e.g. f32[:,::1]@16, partitions f32[:]/1024")
            out.append(Entry(part, "scalar", _dtype(part, part)))
            continue
        axes = [a.strip() for a in m.group(2).split(",")]
        tile = None
        if m.group(5) is not None:
            try:
                tile = tuple(int(t) for t in m.group(5).replace(" ", "").split("x"))
            except ValueError:
                raise CliError(f"--sig: {part!r}: a tile shape is sizes joined by x, e.g. /128x64") from None
        out.append(Entry(part, "array", _dtype(m.group(1), part), len(axes), axes[-1] == "::1",
                         bool(m.group(3)), bool(m.group(4)), tile))
    return out


def parse_sig(text: str, annotations: list) -> list:
    """Parse --sig against a SIMT kernel's parameter annotations into IR types."""
    from dsl.ir.types import ArrayType
    out = []
    for e, ann in zip(parse_entries(text, annotations), annotations):
        if e.kind == "const" or e.tile is not None or e.div8:
            raise CliError(f"--sig: {e.text!r}: constants, partitions and %8 are for tile kernels")
        if (e.kind == "array") != (ann.kind == "array"):
            raise CliError(f"--sig: parameter {ann.name!r} is {'an array' if ann.kind == 'array' else 'a scalar'}, "
                           f"got {e.kind} {e.text!r}")
        out.append(ArrayType(e.dtype, e.ndim, writable=ann.writable, layout="C" if e.contiguous else "any",
                             aligned16=e.aligned) if e.kind == "array" else e.dtype)
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


def tile_signature(kernel: Any, text: str | None) -> tuple[tuple, dict[str, dict]]:
    """(signature, facts) of a @tile.kernel from --sig (or the defaults), checked against its
    annotations as a launch would check arrays: kinds, dtypes (TypeVars through the one binder),
    ndims, tile shapes."""
    from dsl.tile.types import (ArrayParamType, ConstParamType, PartitionParamType, ScalarParamType,
                                is_pow2)
    from dsl.typevars import TypeVarMismatch, bind_dtype
    specs = kernel.specs
    if text is None:
        bad = next((s for s in specs if s.kind in ("partition", "const") or s.dtype is None or s.is_generic
                    or (s.kind == "array" and s.ndim is None)), None)
        if bad is not None:
            raise CliError(f"parameter {bad.name!r} ({bad.kind}) needs --sig: give its dtype, axes, tile shape or value")
        entries = [Entry(s.name, "array", s.dtype, s.ndim, True, True, True) if s.kind == "array"
                   else Entry(s.name, "scalar", s.dtype) for s in specs]
    else:
        entries = parse_entries(text, specs)
    bindings: dict = {}
    sig: list = [None] * len(specs)
    facts: dict[str, dict] = {}
    for k in sorted(range(len(specs)), key=lambda j: specs[j].kind not in ("array", "partition")):
        s, e = specs[k], entries[k]
        want = {"const": "const", "scalar": "scalar"}.get(s.kind, "array")
        if e.kind != want or (s.kind == "partition") != (e.tile is not None):
            spelled = {"const": "a tile.Constant (=value)", "scalar": "a scalar dtype",
                       "partition": "a tile.Partition (dtype[...]/tile shape)", "array": "a tile.Array (dtype[...])"}
            raise CliError(f"--sig: parameter {s.name!r} is {spelled[s.kind]}, got {e.text!r}")
        if s.kind == "const":
            sig[k] = ConstParamType(e.value)
            continue
        try:
            dt = bind_dtype(bindings, s.dtype, e.dtype, exact=s.kind != "scalar")
        except TypeVarMismatch as m:
            raise CliError(f"--sig: parameter {s.name!r}: expected {m.expected}, got {e.text!r}") from None
        if s.kind == "scalar":
            sig[k] = ScalarParamType(dt)
            continue
        if s.ndim is not None and e.ndim != s.ndim:
            raise CliError(f"--sig: parameter {s.name!r} is {s.ndim}-D, got {e.text!r}")
        facts[s.name] = {"layout": "C" if e.contiguous else "any", "aligned16": e.aligned, "div8": e.div8}
        if s.kind == "array":
            sig[k] = ArrayParamType(dt, e.ndim, s.writable)     # writable: a tile.Atomic array
            continue
        if len(e.tile) != e.ndim or not all(is_pow2(t) for t in e.tile):  # type: ignore[arg-type]
            raise CliError(f"--sig: parameter {s.name!r}: the tile shape needs {e.ndim} powers of two, got {e.text!r}")
        sig[k] = PartitionParamType(dt, e.ndim, e.tile)
    return tuple(sig), facts


def _report_usage(ptx: str, arch: str) -> list:
    """ptxas's resource usage of each kernel in `ptx`, printed to stderr (none without ptxas)."""
    from dsl.backend.ptxas import PtxasNotFound, assemble
    try:
        usages, _ = assemble(ptx, arch)
    except PtxasNotFound as e:
        print(f"// resource usage unavailable: {e}", file=sys.stderr)
        return []
    for u in usages:
        print(f"// ptxas {u.arch} {u.kernel}: {u.registers} registers, {u.spill_stores} bytes spill "
              f"stores, {u.spill_loads} bytes spill loads, {u.stack_frame} bytes stack, "
              f"{u.shared_bytes} bytes shared, {u.barriers} barriers", file=sys.stderr)
    return usages


def _emit(ck: Any, args: argparse.Namespace, sig: Any, arch: str) -> int:
    """The PTX to -o or stdout (with --explain: to -o only, and stdout gets the slow paths)."""
    explain = getattr(args, "explain", False)
    if args.output:
        Path(args.output).write_text(ck.ptx)
    elif not explain:
        sys.stdout.write(ck.ptx)
    print(f"// kernel {ck.name} for {arch}; signature ({', '.join(map(repr, sig))}); "
          f"cache: {ck.metadata.get('cache')}", file=sys.stderr)
    usages = _report_usage(ck.ptx, arch)
    if explain:
        from dsl.backend.inspect import slow_paths_of
        from dsl.perf import explain as explain_text
        usage = next((u for u in usages if u.kernel == ck.name), None)
        sys.stdout.write(explain_text(ck.name, arch, slow_paths_of(ck.metadata, usage.as_dict() if usage else {})))
    return 0


def cmd_compile_tile(kernel: Any, args: argparse.Namespace) -> int:
    from dsl.backend.target import parse_arch
    parse_arch(args.arch)                      # an unsupported arch is a usage error before compiling
    sig, facts = tile_signature(kernel, args.sig)
    from dsl.tile.compile import compile_cached
    ck = compile_cached(kernel, sig, facts, args.arch, dump=args.dump, cache=not args.no_cache)
    return _emit(ck, args, sig, ck.metadata.get("arch", args.arch))


def cmd_compile(args: argparse.Namespace) -> int:
    from dsl.compiler import compile_kernel
    kernel = load_kernel(args.target)
    if not hasattr(kernel, "options"):
        return cmd_compile_tile(kernel, args)
    anns = kernel.annotations
    sig = parse_sig(args.sig, anns) if args.sig else default_sig(anns)
    ck = compile_kernel(kernel.pyfunc, sig, kernel.options, args.arch, dump=args.dump,
                        cache=not args.no_cache)
    return _emit(ck, args, sig, args.arch)


HELP = "compile a @simt.kernel or @tile.kernel to PTX (no GPU) and show its resource usage"
DESCRIPTION = ("Compile one @simt.kernel or @tile.kernel offline and print its PTX (resource usage on "
               "stderr). FILE is imported as a module, not run as a script: its "
               "`if __name__ == \"__main__\":` block does not run.")


def add_arguments(c: argparse.ArgumentParser) -> None:
    """The compile command's options."""
    c.add_argument("target", help="FILE.py::KERNEL (FILE is imported; its __main__ block does not run)")
    c.add_argument("--arch", default="sm_90", help="sm_80, sm_86, sm_89, sm_90, sm_100, ...")
    c.add_argument("--sig", help='parameter types, e.g. "f32[::1]@16,f32[:],i64"; tile kernels also '
                                 '"f16[:,::1]@16%%8,f32[:,::1]/128x64,=32"')
    c.add_argument("-o", "--output", help="write the PTX here instead of stdout")
    c.add_argument("--dump", help="comma-separated stages to dump to stderr (frontend, ir, llvm_ir, "
                                  "optimize, ptx, all; tile kernels: tile_frontend, tile_lower, ir, ...)")
    c.add_argument("--no-cache", action="store_true", help="bypass the disk cache")
    c.add_argument("--explain", action="store_true",
                   help="print where the kernel takes a slow path and why (source line and reason: scalar "
                        "instead of vector chunk accesses, local memory, spills) instead of the PTX")
