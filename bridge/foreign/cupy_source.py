"""CuPy `RawKernel` / `RawModule` → a validated bridge.Kernel, compiled by us from the same source.

Why recompile: CuPy's own launch is unchecked and runs on CuPy's stream. We take the object's `code`,
`name`, `options` and `backend`, compile the text for the target device's architecture the way CuPy
does (NVRTC with `-ftz=true` and `--device-as-default-execution-space`, CuPy's and CUDA's include
directories; nvcc when `backend == "nvcc"` or NVRTC cannot be loaded), and load the cubin through the
module path: it runs on the bridge's stream, on any device, validated. The contract comes from the
kernel's C signature in the code (`extern "C" __global__ void name(...)`) unless one is given. CuPy
itself is never imported unless installed (only for its include directory); any object with these
attributes works. An `ElementwiseKernel` is generated anew (elementwise.py). Not yet: `jitify=True`,
cooperative groups, templates through `name_expressions`, `ReductionKernel` (refused).
"""
from __future__ import annotations

import re
from typing import Any

from bridge.errors import ForeignKernelError
from bridge.foreign.compile_cuda import compile_like_cupy
from bridge.foreign.launch import ForeignKernel
from bridge.foreign.signature import parse_signature, strip_comments
from bridge.foreign.wrap import ForeignBuild, as_contract, load
from bridge.kernel import Kernel

__all__ = ["kernel_signature", "build_cupy", "cupy"]

def kernel_signature(code: str, name: str) -> str:
    """The `void name(...)` signature of `__global__` kernel `name` in CUDA source `code` (comments
    removed; `__launch_bounds__` kept), for `declare`. ForeignKernelError when it is not there."""
    text = strip_comments(code)
    head = re.compile(r"\b__global__\b(?P<pre>[^;{}()]*(?:__launch_bounds__\s*\([^)]*\)[^;{}()]*)?)\bvoid\b"
                      r"(?P<mid>\s*(?:__launch_bounds__\s*\([^)]*\)\s*)?)" + re.escape(name) + r"\s*\(")
    m = head.search(text)
    if m is None:
        kernels = re.findall(r"\b__global__\b[^;{}]*?\bvoid\b\s*(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(",
                             text)
        raise ForeignKernelError(f"{name}: the source has no `__global__ void {name}(...)` (it has: "
                                 f"{', '.join(kernels) or 'none'})", kernel=name)
    depth, end = 1, m.end()
    while end < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    params = text[m.end(): end - 1]
    bounds = re.search(r"__launch_bounds__\s*\([^)]*\)", m.group("pre") + m.group("mid"))
    return f"void {bounds.group(0) + ' ' if bounds else ''}{name}({params})"


def _source_of(obj: Any, name: str | None) -> tuple[str, str, tuple[str, ...], str]:
    """(code, kernel name, options, backend) of a RawKernel / RawModule-like object."""
    for attr, why in (("jitify", "jitify=True"), ("enable_cooperative_groups", "cooperative groups")):
        if getattr(obj, attr, False):
            raise ForeignKernelError(f"{name or getattr(obj, 'name', 'kernel')}: {why} is not supported yet "
                                     f"(bridge.foreign takes RawKernel/RawModule source compiled plainly)")
    code = getattr(obj, "code", None)
    if not isinstance(code, str):
        raise TypeError(f"bridge.foreign.cupy: expected a cupy.RawKernel / RawModule (an object with the source "
                        f"text as `.code`), got {type(obj).__name__}")
    kname = name or getattr(obj, "name", None)
    if not isinstance(kname, str) or not kname:
        raise TypeError("bridge.foreign.cupy: a RawModule has several kernels: give name='...'")
    backend = getattr(obj, "backend", "nvrtc") or "nvrtc"
    if backend not in ("nvrtc", "nvcc"):
        raise ForeignKernelError(f"{kname}: backend {backend!r}: expected 'nvrtc' or 'nvcc'", kernel=kname)
    return code, kname, tuple(getattr(obj, "options", ()) or ()), backend


def build_cupy(obj: Any, name: str | None = None, contract: Any = None, *, arch: int,
               **declare_kw: Any) -> ForeignBuild:
    """Compile a RawKernel / RawModule's source for sm_<arch> and pair it with its contract (from the C
    signature in the code unless `contract` is given), without loading it (no GPU needed)."""
    code, kname, options, backend = _source_of(obj, name)
    if contract is None:
        contract = kernel_signature(code, kname)
        parse_signature(contract)         # a kernel we cannot declare fails here, naming the parameter
    c = as_contract(contract, kname, declare_kw)
    cubin, compiler = compile_like_cupy(code, kname, options, backend, arch)
    info = {"source": "cupy", "arch": arch, "compiler": compiler, "options": options, "backend": backend}
    return ForeignBuild(cubin, kname, c, info=info)


def cupy(obj: Any, name: str | None = None, contract: Any = None, *, device: Any = None,
         **declare_kw: Any) -> Kernel | ForeignKernel:
    """A validated bridge.Kernel from a CuPy `RawKernel` (or `RawModule` with `name=`):

        k = bridge.foreign.cupy(raw, requires=["len(x) == n", "len(y) == n"], grid_from="y")

    compiled from `raw.code` for `device`'s architecture (default: the current device), contract from
    the kernel's C signature in the code (`declare` keywords apply) unless `contract` is given. An
    `ElementwiseKernel` goes to `bridge.foreign.elementwise` (its keywords; example arguments as
    `examples=(...)`); a `ReductionKernel` is refused (ForeignKernelError)."""
    from bridge.foreign.wrap import device_arch
    if hasattr(obj, "operation") or hasattr(obj, "reduce_expr"):     # ElementwiseKernel / ReductionKernel
        from bridge.foreign.elementwise import elementwise
        if name is not None or contract is not None:
            raise TypeError(f"bridge.foreign.cupy: {type(obj).__name__}: its contract is generated; name= and "
                            f"contract= are for RawKernel / RawModule")
        examples = tuple(declare_kw.pop("examples", ()))
        return elementwise(obj, *examples, device=device, **declare_kw)
    return load(build_cupy(obj, name, contract, arch=device_arch(device), **declare_kw), device=device)
