"""`@triton.jit` functions → validated kernels: compiled by Triton's own API, launched by us.

Why through Triton's compiler and not its launcher: Triton specialises and compiles well, but its
launch checks nothing and picks its own stream. Here `triton.compile(ASTSource(fn, signature,
constexprs, attrs), target=GPUTarget("cuda", arch, 32))` gives the cubin and its metadata, and the
contract is inferred from what Triton knows: each `*fp32`-style pointer is a 1-D C-contiguous array of
that dtype (`ndim=` for more axes; read for `*k` const pointers, else readwrite unless `access=` says
otherwise), each integer or float a scalar; `num_warps` fixes the block (32 * num_warps, exact), the
metadata's `shared` the dynamic shared memory (exact), the compiled arch the minimum compute
capability. Pointers are compiled with Triton's 16-byte divisibility hint (what its JIT assumes for
aligned tensors) and the contract checks exactly that (`align=16`; `pointer_align=None` drops both).
Relations (`requires=`) and grid tiles may name constexprs: their values are written in.

Triton 3.x appends hidden scratch pointers (global_scratch, profile_scratch) to every kernel; their
number is read from the compiled PTX. When the kernel needs no scratch and its code never reads them
(the PTX names them only in the `.entry` list), they are removed from the PTX, which Triton's own
ptxas re-assembles with the options Triton used (`make_cubin`): the kernel is then a plain
`bridge.Kernel`, launched by the native fastcall with nothing filled in Python. Otherwise the
ForeignKernel wrapper (launch.py) passes them at each launch. Not yet:
clusters (num_ctas > 1), cooperative grids, programmatic dependent launch, tensor descriptors,
profiling scratch: refused when the kernel is wrapped (ForeignKernelError).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import numpy as np

from bridge import dtypes
from bridge.contract import ArgSpec, LaunchContract
from bridge.errors import ContractDefinitionError, ForeignKernelError
from bridge.foreign.launch import ForeignKernel, Hidden
from bridge.foreign.ptx import ptx_params
from bridge.foreign.wrap import ForeignBuild, load
from bridge.kernel import Kernel

__all__ = ["TRITON_DTYPES", "triton_signature", "build_triton", "triton"]

# Triton's type names -> contract dtypes (pointers are these with a leading `*`, `*k` when const)
TRITON_DTYPES: dict[str, str] = {
    "i1": "bool", "u1": "bool", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64",
    "fp16": "f16", "bf16": "bf16", "fp32": "f32", "f32": "f32", "fp64": "f64",
    "fp8e4nv": "f8e4m3fn", "fp8e5": "f8e5m2", "fp8e4b8": "f8e4m3fnuz", "fp8e5b16": "f8e5m2fnuz",
}
_TO_TRITON = {v: k for k, v in TRITON_DTYPES.items() if k not in ("u1", "f32")}
_HIDDEN_NAMES = ("global_scratch", "profile_scratch")   # Triton 3.x's trailing parameters, in order


def _params(fn: Any, constexprs: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(all parameter names, the non-constexpr ones) of a JITFunction."""
    params = getattr(fn, "params", None)
    if params is None or not hasattr(fn, "arg_names"):
        raise TypeError(f"bridge.foreign.triton: expected a @triton.jit function, got {type(fn).__name__}")
    names = list(fn.arg_names)
    for key in constexprs:
        if key not in names:
            raise ContractDefinitionError(f"{fn.__name__}: constexprs: no parameter named {key!r} "
                                          f"(parameters: {', '.join(names)})", kernel=fn.__name__, arg_name=key)
    runtime = [p.name for p in params if not p.is_constexpr and p.name not in constexprs]
    return names, runtime


def _triton_name(dtype: Any, name: str, kernel: str) -> str:
    dt = dtypes.normalize(dtype, arg=name)
    if dt not in _TO_TRITON:
        raise ContractDefinitionError(f"{kernel}: argument '{name}': Triton has no type for {dt}", kernel=kernel,
                                      arg_name=name)
    return _TO_TRITON[dt]


def _example_type(value: Any, name: str, kernel: str) -> tuple[str, int]:
    """(Triton type, ndim) of one example argument."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, np.generic):
        return "*" + _triton_name(value.dtype, name, kernel), len(value.shape)
    if isinstance(value, (bool, np.bool_)):
        return "i1", 0
    if isinstance(value, np.generic):
        return _triton_name(value.dtype, name, kernel), 0
    if isinstance(value, int):
        return ("i32" if -2**31 <= value < 2**31 else "i64" if -2**63 <= value < 2**63 else "u64"), 0
    if isinstance(value, float):
        return "fp32", 0
    raise ContractDefinitionError(f"{kernel}: argument '{name}': expected an array, a number or a NumPy scalar "
                                  f"as an example, got {type(value).__name__}", kernel=kernel, arg_name=name)


def triton_signature(fn: Any, signature: Any, constexprs: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
    """({param: Triton type or 'constexpr'} for every parameter, {param: ndim of its example array}) from
    a {name: type} dict, a "*fp32, *fp32, i32" string or example arguments, each for the
    non-constexpr parameters in order."""
    kname = fn.__name__
    names, runtime = _params(fn, constexprs)
    ndims: dict[str, int] = {}
    if isinstance(signature, Mapping):
        extra = set(signature) - set(runtime)
        missing = [n for n in runtime if n not in signature]
        if extra or missing:
            raise ContractDefinitionError(f"{kname}: signature: expected types for {', '.join(runtime)}; "
                                          f"missing {missing}, not runtime parameters {sorted(extra)}", kernel=kname)
        types = {n: str(signature[n]).strip() for n in runtime}
    else:
        items = [t.strip() for t in signature.split(",")] if isinstance(signature, str) else list(signature)
        if len(items) != len(runtime):
            raise ContractDefinitionError(f"{kname}: signature: {len(items)} entries for the {len(runtime)} "
                                          f"non-constexpr parameters ({', '.join(runtime)})", kernel=kname)
        types = {}
        for n, item in zip(runtime, items):
            if isinstance(signature, str):
                types[n] = item
            else:
                types[n], nd = _example_type(item, n, kname)
                if nd:
                    ndims[n] = nd
    full = {n: types.get(n, "constexpr") for n in names}
    for n, t in types.items():
        base = t[2:] if t.startswith("*k") else t[1:] if t.startswith("*") else t
        if base not in TRITON_DTYPES:
            raise ContractDefinitionError(f"{kname}: argument '{n}': Triton type {t!r} is not supported (pointers "
                                          f"'*T'/'*kT' and scalars of {', '.join(TRITON_DTYPES)}; tensor "
                                          f"descriptors come later)", kernel=kname, arg_name=n)
    return full, ndims


def _substitute(text: str, constexprs: Mapping[str, Any]) -> str:
    """A relation with each integer constexpr's name replaced by its value."""
    for name, value in constexprs.items():
        if isinstance(value, (int, np.integer)):
            text = re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", str(int(value)), text)
    return text


def _arg_specs(types: Mapping[str, str], access: Mapping[str, str], ndim: Mapping[str, int],
               pointer_align: int | None) -> list[ArgSpec]:
    out = []
    for n, t in types.items():
        if t == "constexpr":
            continue
        if t.startswith("*"):
            const = t.startswith("*k")
            dt = TRITON_DTYPES[t[2:] if const else t[1:]]
            out.append(ArgSpec.array(n, dt, ndim=ndim.get(n, 1), layout="C", abi="pointer",
                                     access=access.get(n, "read" if const else "readwrite"),
                                     align=pointer_align or 0))
        else:
            out.append(ArgSpec.scalar(n, TRITON_DTYPES[t]))
    return out


def _hidden(kname: str, md: Any, ptx: str, n_user: int) -> tuple[Hidden, ...]:
    """The trailing parameters Triton added, from the PTX entry's length; refuses what we cannot fill."""
    for attr, why in (("launch_cooperative_grid", "cooperative grids"), ("launch_pdl", "programmatic dependent "
                      "launch"), ("tensordesc_meta", "tensor descriptors")):
        if getattr(md, attr, None):
            raise ForeignKernelError(f"{kname}: {why} are not supported yet by bridge.foreign", kernel=kname)
    if getattr(md, "num_ctas", 1) != 1:
        raise ForeignKernelError(f"{kname}: num_ctas={md.num_ctas} (clusters) is not supported yet", kernel=kname)
    if getattr(md, "profile_scratch_size", 0):
        raise ForeignKernelError(f"{kname}: the kernel was compiled with profiling instrumentation (profile "
                                 f"scratch {md.profile_scratch_size} bytes); compile it without", kernel=kname)
    params = ptx_params(ptx, md.name)
    n_hidden = len(params) - n_user
    if not 0 <= n_hidden <= len(_HIDDEN_NAMES) or any(p.size != 8 for p in params[n_user:]):
        raise ForeignKernelError(f"{kname}: Triton's compiled kernel has {len(params)} parameters for {n_user} "
                                 f"runtime arguments: this Triton version's parameter layout is not known",
                                 kernel=kname)
    align = int(getattr(md, "global_scratch_align", 1) or 1)
    if align > 256:
        raise ForeignKernelError(f"{kname}: global scratch aligned to {align} bytes (bridge allocations give 256)",
                                 kernel=kname)
    sizes = {"global_scratch": int(getattr(md, "global_scratch_size", 0) or 0)}
    return tuple(Hidden("_kb_" + h, sizes.get(h, 0), align) for h in _HIDDEN_NAMES[:n_hidden])


def _without_hidden(ptx: str, entry: str, n_user: int) -> str | None:
    """The PTX with the entry's parameters past the first `n_user` removed, or None when the code
    reads any of them (then they must be passed)."""
    m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    decls = [d for d in m.group(1).split(",") if d.strip()]
    for d in decls[n_user:]:
        name = re.findall(r"[A-Za-z_$%][\w$]*", d.split("[")[0])[-1]
        if len(re.findall(rf"(?<![\w$]){re.escape(name)}(?![\w$])", ptx)) != 1:    # used beyond its declaration
            return None
    kept = ",".join(decls[:n_user])
    return ptx[: m.start(1)] + kept + ("\n" if kept else "") + ptx[m.end(1):]


def _reassemble(ptx: str, arch: int, options: Mapping[str, Any]) -> tuple[bytes, str]:
    """(image, how) of edited PTX: a cubin from Triton's own ptxas with the options Triton compiled
    with, or the PTX itself (the driver compiles it at load) when Triton's backend API differs."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        backend = make_backend(GPUTarget("cuda", arch, 32))
        return bytes(backend.make_cubin(ptx, {}, backend.parse_options(dict(options)), arch)), "triton ptxas"
    except (ImportError, AttributeError, TypeError) as exc:
        return ptx.encode(), f"PTX, compiled by the driver at load (Triton's ptxas API: {type(exc).__name__})"


def _grid_tile(grid: Any, constexprs: Mapping[str, Any], kname: str) -> tuple[str | None, tuple[int, ...] | None]:
    if grid is None:
        return None, None
    if not (isinstance(grid, tuple) and len(grid) == 2 and isinstance(grid[0], str)):
        raise ContractDefinitionError(f"{kname}: grid: expected (array name, tile) such as ('out', 'BLOCK') or "
                                      f"('x', (1,)): one program per tile of that array, got {grid!r}", kernel=kname)
    tile = grid[1] if isinstance(grid[1], (tuple, list)) else (grid[1],)
    out = []
    for t in tile:
        value = constexprs.get(t, t) if isinstance(t, str) else t
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ContractDefinitionError(f"{kname}: grid: tile entry {t!r} is not a positive int or the name of "
                                          f"an integer constexpr", kernel=kname)
        out.append(int(value))
    return grid[0], tuple(out)


def build_triton(fn: Any, signature: Any, *, arch: int, constexprs: Mapping[str, Any] | None = None,
                 num_warps: int = 4, num_stages: int = 3, requires: Iterable[str] = (),
                 access: Mapping[str, str] | None = None, ndim: Mapping[str, int] | None = None,
                 grid: Any = None, pointer_align: int | None = 16, divisible: Mapping[str, int] | None = None,
                 options: Mapping[str, Any] | None = None, drop_unused: bool = True,
                 **contract: Any) -> ForeignBuild:
    """Compile `fn` with Triton for sm_<arch> and infer its contract, without loading it (no GPU needed)."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        raise ImportError(f"bridge.foreign.triton needs Triton (`pip install triton`): {exc}") from exc
    cx = dict(constexprs or {})
    kname = getattr(fn, "__name__", "kernel")
    types, example_ndim = triton_signature(fn, signature, cx)
    names = list(types)
    for key, source in (("access", access or {}), ("ndim", ndim or {}), ("divisible", divisible or {})):
        for n in source:
            if types.get(n, "constexpr") == "constexpr":
                raise ContractDefinitionError(f"{kname}: {key}: {n!r} is not a runtime parameter", kernel=kname,
                                              arg_name=n)
    attrs: dict[tuple[int], list[list[Any]]] = {}
    for i, n in enumerate(names):
        if types[n].startswith("*") and pointer_align:
            attrs[(i,)] = [["tt.divisibility", int(pointer_align)]]
        elif n in (divisible or {}):
            attrs[(i,)] = [["tt.divisibility", int(divisible[n])]]
    for p in fn.params:                       # constexprs with defaults the caller left out
        if types[p.name] == "constexpr" and p.name not in cx and p.has_default:
            cx[p.name] = p.default
    src = ASTSource(fn, types, constexprs=cx, attrs=attrs)
    opts = {"num_warps": num_warps, "num_stages": num_stages, **(options or {})}
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=opts)
    md = compiled.metadata
    args = _arg_specs(types, access or {}, {**example_ndim, **(ndim or {})}, pointer_align)
    ptx, image, how = compiled.asm["ptx"], bytes(compiled.asm["cubin"]), "triton"
    hidden = _hidden(kname, md, ptx, len(args))
    if drop_unused and hidden and not any(h.per_program for h in hidden):
        stripped = _without_hidden(ptx, md.name, len(args))
        if stripped is not None:
            (image, how), ptx, hidden = _reassemble(stripped, arch, opts), stripped, ()
    args += [ArgSpec.array(h.name, "u8", access="readwrite", abi="pointer", optional=True) for h in hidden]
    rel = [_substitute(r, cx) for r in ([requires] if isinstance(requires, str) else requires)]
    rel += [f"{n} % {int(k)} == 0" for n, k in (divisible or {}).items()]
    grid_from, grid_tile = _grid_tile(grid, cx, kname)
    c = LaunchContract(md.name, args, block=32 * int(md.num_warps), shared_mem=int(md.shared), min_cc=arch,
                       requires=rel, grid_from=grid_from, grid_tile=grid_tile, **contract)
    info = {"source": "triton", "arch": arch, "compiler": f"triton {triton.__version__}", "signature": types,
            "constexprs": cx, "metadata": md, "ptx": ptx, "image": how}
    return ForeignBuild(image, md.name, c, hidden, info)


def triton(fn: Any, signature: Any, *, device: Any = None, **kw: Any) -> Kernel | ForeignKernel:
    """A validated kernel from a `@triton.jit` function, compiled by Triton for `device`'s architecture:

        k = bridge.foreign.triton(add_kernel, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                  access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                                  grid=("out", "BLOCK"))
        k(x, y, out, n)

    `signature`: Triton types for the non-constexpr parameters ("*fp32, i32", or {name: type}) or example
    arguments (arrays, ints, floats) to infer them from. Keywords: constexprs, num_warps, num_stages,
    access, ndim, requires (may name constexprs), grid=(array, tile) for one program per tile (tile
    entries may be constexpr names), pointer_align, divisible={int param: k}, options (more Triton
    compile options) and LaunchContract's (inplace, ...). Triton's hidden scratch parameters: when the
    compiled code reads none of them (no scratch) they are dropped (`drop_unused=True`) and the result
    is a plain bridge.Kernel (the native fastcall); otherwise, or with `drop_unused=False`, a
    ForeignKernel whose launches fill them."""
    from bridge.foreign.wrap import device_arch
    return load(build_triton(fn, signature, arch=device_arch(device), **kw), device=device)
