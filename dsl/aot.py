"""`python -m dsl.aot module.py --arch sm_90 -o build/`: DSL kernels for C++ applications.

Why: a C++ code base ports kernel by kernel. For every `@simt.kernel` in `module.py` this writes
`<stem>.<kernel>.ptx` (and `<stem>.<kernel>.fatbin` with SASS for the arch + PTX, when nvcc is found)
and `<stem>_kernels.h`, a header of typed launch functions (device pointers + sizes + stream) that
validate the launch contract through `kernelbridge/contract.hpp` before launching (see
dsl/aot_header.py). Each PTX/fatbin also carries its kernel's contract and checksum in the format of
KB_CONTRACT (`__kb_contract_<k>`, `__kb_checksum_<k>`), so `bridge.load_module` finds it. Arrays are C-contiguous; generic kernels name their dtypes in a module-level
`__aot__ = {"kernel": [dsl.f32, ...]}` (one dtype per parameter, the element dtype for arrays).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from dsl.errors import DslCompileError, DslToolError
from dsl.aot_header import AotKernel, AotParam, identifier, render_header
from dsl.link import _arch_number, find_nvcc
from dsl.userfile import load_user_file


class AotError(DslToolError, ValueError):
    """The module cannot be compiled ahead of time (the message says which kernel and why)."""


def load_module(path: str | os.PathLike) -> Any:
    """The user's module file, run (dsl/userfile.py); AotError when there is no such file."""
    if not Path(path).is_file():
        raise AotError(f"{Path(path).resolve()}: no such file")
    return load_user_file(path, "_kb_aot_")


def kernels_of(module: Any) -> list[Any]:
    """The module's @simt.kernel objects, in definition order."""
    from dsl.simt.kernel import SimtKernel
    return [v for v in vars(module).values() if isinstance(v, SimtKernel)]


def signature_for(kernel: Any, dtypes: Sequence[Any] | None = None) -> tuple[list, tuple[AotParam, ...]]:
    """IR signature (C-contiguous arrays, no 16-byte alignment assumed) and the launcher's params."""
    from dsl.ir import types as irt
    anns = kernel.annotations
    if dtypes is not None and len(dtypes) != len(anns):
        raise AotError(f"__aot__[{kernel.__name__!r}] gives {len(dtypes)} dtypes for {len(anns)} parameters")
    if len(anns) > 32:
        raise AotError(f"{kernel.__name__}: {len(anns)} parameters; AOT launchers take at most 32")
    sig, params = [], []
    for i, a in enumerate(anns):
        dt = a.dtype
        if dtypes is not None:
            dt = getattr(dtypes[i], "ir", dtypes[i])
            dt = irt.SCALARS.get(dt, dt) if isinstance(dt, str) else dt
        if not isinstance(dt, irt.ScalarType):
            raise AotError(f"{kernel.__name__}: parameter '{a.name}' has generic dtype {a.dtype}; name it in "
                           f"`__aot__ = {{{kernel.__name__!r}: [...]}}`")
        if a.kind == "array":
            sig.append(irt.ArrayType(dt, a.ndim, a.writable, "C", False))
        else:
            if dt.name in ("f16", "bf16"):
                raise AotError(f"{kernel.__name__}: scalar parameter '{a.name}' is {dt.name}; AOT launchers "
                               "take f32/f64/integer scalars")
            sig.append(dt)
        params.append(AotParam(a.name, a.kind, dt.name, a.ndim, a.writable))
    return sig, tuple(params)


def with_embedded_contract(ptx: str, symbol: str, contract_json: str) -> str:
    """`ptx` plus the contract globals KB_CONTRACT would emit (`__kb_contract_<symbol>` and its
    checksum `__kb_checksum_<symbol>`), so `bridge.load_module` of the PTX or of a fatbin built from
    it finds the verified contract without side files."""
    from bridge.fatbin import ptx_contract_directives
    return (ptx.rstrip("\n") + "\n\n// kernelbridge launch contract of " + symbol + " (read by bridge.fatbin)\n"
            + ptx_contract_directives(symbol, contract_json))


def compile_module(path: str | os.PathLike, arch: str, out_dir: str | os.PathLike, *,
                   fatbin: bool | None = None, namespace: str | None = None) -> dict[str, Path]:
    """Compile every kernel of `path` for `arch`; write PTX (+ fatbin) and the header. Returns paths."""
    from dsl.compiler import compile_kernel
    num = _arch_number(arch)
    mod = load_module(path)
    kernels = kernels_of(mod)
    if not kernels:
        raise AotError(f"{path}: no @simt.kernel found")
    table = getattr(mod, "__aot__", {}) or {}
    stem = identifier(Path(path).stem)
    ptx_parts, infos = [], []
    for k in kernels:
        sig, params = signature_for(k, table.get(k.__name__))
        ck = compile_kernel(k.pyfunc, sig, k.options, f"sm_{num}")
        if json.loads(ck.contract_json).get("cooperative"):
            # the generated C++ launcher calls cuLaunchKernel: without the cooperative attribute nothing
            # guarantees the co-residency its grid barrier needs (PDL and compiled clusters need no attribute)
            raise AotError(f"{path}: {k.__name__}: cooperative=True kernels cannot be exported to the C++ "
                           "launcher yet (it launches with cuLaunchKernel); launch it through bridge instead")
        ptx_parts.append(with_embedded_contract(ck.ptx, ck.name, ck.contract_json))
        grid_from = json.loads(ck.contract_json).get("grid_from") is not None
        infos.append(AotKernel(k.__name__, ck.name, ck.contract_json, params, grid_from))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    nvcc = find_nvcc()
    if fatbin is None:
        fatbin = nvcc is not None
    if fatbin and nvcc is None:
        raise AotError("--fatbin needs nvcc (PATH, CUDA_HOME or KB_NVCC)")
    images: list[tuple[bytes, str]] = []
    for info, ptx in zip(infos, ptx_parts):   # one image per kernel: each DSL PTX is a whole module
        ptx_path = out / f"{stem}.{info.name}.ptx"
        ptx_path.write_text(ptx)
        written[f"ptx:{info.name}"] = ptx_path
        if not fatbin:
            images.append((ptx.encode(), "ptx"))
            continue
        fb = out / f"{stem}.{info.name}.fatbin"
        cmd = [nvcc, "-fatbin", f"-gencode=arch=compute_{num},code=[sm_{num},compute_{num}]", "-o", str(fb),
               str(ptx_path)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise AotError(f"nvcc failed to build the fatbin ({' '.join(cmd)}):\n{r.stderr.strip()}")
        written[f"fatbin:{info.name}"] = fb
        images.append((fb.read_bytes(), "fatbin"))
    header = out / f"{stem}_kernels.h"
    ns = namespace or f"{stem}_kernels"
    header.write_text(render_header(ns, Path(path).name, f"sm_{num}", images, infos))
    written["header"] = header
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsl.aot", description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="Python file defining @simt.kernel functions")
    ap.add_argument("--arch", default="sm_90", help="target, e.g. sm_80, sm_90 (default sm_90)")
    ap.add_argument("-o", "--output", default="build", help="output directory (default build/)")
    ap.add_argument("--namespace", default=None, help="C++ namespace (default <stem>_kernels)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--fatbin", dest="fatbin", action="store_true", default=None,
                   help="embed a fatbin (SASS + PTX; needs nvcc). Default: when nvcc is found")
    g.add_argument("--ptx-only", dest="fatbin", action="store_false", help="embed PTX only (JIT at load)")
    ns = ap.parse_args(argv)
    try:
        written = compile_module(ns.module, ns.arch, ns.output, fatbin=ns.fatbin, namespace=ns.namespace)
    except (AotError, ValueError, TypeError, DslCompileError) as e:
        print(f"dsl.aot: error: {e}", file=sys.stderr)
        return 2
    for kind, p in written.items():
        print(f"{kind}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
