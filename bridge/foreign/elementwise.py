"""CuPy `ElementwiseKernel` → a validated bridge.Kernel, from source we generate ourselves.

Why our own source and not CuPy's: CuPy generates a kernel per call signature, passing each array as
a `CArray` struct (pointer, size, shape and byte strides) and the loop as a `CIndexer`; those structs
are CuPy's private ABI. Here the kernel's declared parameters, operation, preamble, `loop_prep` and
`after_loop` are put into a kernel of our ABI, for the dtypes and ndims fixed at wrap time
(elementwise_params.py), and compiled like a RawKernel (NVRTC, or nvcc; `compile_cuda`):

- the loop is CuPy's: `for (i = global thread; i < _ind.size(); i += all threads) { _ind.set(i); ... }`
  with `i` and `_ind.size()` / `_ind.get()` as CuPy's operation sees them;
- a non-raw array `x` is a reference to its element i (`const T &x` for inputs, `T &x` for outputs),
  read from a C-contiguous array of the loop's shape: one pointer (`abi: pointer`), and a relation
  `x.shape == <grid array>.shape` (no broadcasting);
- a raw array is a small struct with CuPy's `CArray` surface (`x[i]` flat, `x[idx]` with an index
  array, `x.size()`, `x.shape()`, `x.strides()` in bytes), passed as pointer + extents + strides
  (`abi: view`) and of any shape;
- the loop's extent comes from the grid array (the first non-raw output, else input), also passed as
  a view: nothing is added to the user's arguments, so the result is a plain `bridge.Kernel` (the
  native fastcall, no Python per launch);
- contract: inputs read, outputs write (`access=` may say readwrite), `block=block_size` (CuPy's default
  128, exact), and one block per `block_size` elements along the grid array's last axis, at most
  `2048 // block_size` blocks per SM (the loop strides over the rest, as CuPy's does).

Not reproduced: broadcasting, non-contiguous arrays (CuPy passes strides; a strided view is refused by
the validator as a LayoutError), `size=` for kernels with only raw arrays, complex dtypes and code
that relies on CuPy's headers (`float16`, `complex<T>`, `thrust`): the compiler's error says so.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from bridge.contract import ArgSpec, LaunchContract
from bridge.errors import ForeignKernelError
from bridge.foreign.compile_cuda import compile_like_cupy
from bridge.foreign.elementwise_params import C_NAMES, ElementwiseSpec, Resolved, parse_params, resolve, spec_of
from bridge.foreign.wrap import ForeignBuild, load
from bridge.kernel import Kernel

__all__ = ["elementwise_spec", "elementwise_source", "elementwise_contract", "build_elementwise", "elementwise"]

_RAW_ARRAY = r"""
template <typename _KbE, int _KbN>
struct _kb_raw_array {            // CuPy's CArray surface over a C-contiguous view
  _KbE* data_; long long size_; long long shape_[_KbN]; long long strides_[_KbN];
  __device__ _kb_raw_array(_KbE* p, const long long* e, const long long* s) : data_(p), size_(1) {
    for (int d = 0; d < _KbN; ++d) {
      shape_[d] = e[d]; strides_[d] = s[d] * (long long)sizeof(_KbE); size_ *= e[d];
    }
  }
  __device__ long long size() const { return size_; }
  __device__ const long long* shape() const { return shape_; }
  __device__ const long long* strides() const { return strides_; }
  __device__ _KbE* data() const { return data_; }
  __device__ _KbE& operator[](long long i) const { return data_[i]; }
  template <typename _KbI> __device__ _KbE& operator[](const _KbI (&idx)[_KbN]) const {
    long long off = 0;
    for (int d = 0; d < _KbN; ++d) off += strides_[d] * (long long)idx[d];
    return *reinterpret_cast<_KbE*>(reinterpret_cast<char*>(data_) + off);
  }
};
struct _kb_indexer {              // CuPy's CIndexer as an elementwise operation sees it
  long long size_, i_;
  __device__ long long size() const { return size_; }
  __device__ long long get() const { return i_; }
  __device__ void set(long long i) { i_ = i; }
};
"""


def elementwise_spec(in_params: str, out_params: str, operation: str, name: str = "kernel", *,
                     preamble: str = "", loop_prep: str = "", after_loop: str = "",
                     options: Sequence[str] = ()) -> ElementwiseSpec:
    """An ElementwiseKernel's definition written as for `cupy.ElementwiseKernel(...)`, without CuPy."""
    if not name.isidentifier():
        raise ForeignKernelError(f"{name!r}: not a valid kernel name", kernel=name)
    spec = ElementwiseSpec(parse_params(in_params, is_out=False, kname=name),
                           parse_params(out_params, is_out=True, kname=name), operation, name, preamble,
                           loop_prep, after_loop, tuple(options))
    names = [p.name for p in spec.params]
    for bad in ("i", "_ind"):
        if bad in names:
            raise ForeignKernelError(f"{name}: parameter '{bad}': the name is the loop's own", kernel=name,
                                     arg_name=bad)
    if len(set(names)) != len(names):
        raise ForeignKernelError(f"{name}: a parameter is named twice ({', '.join(names)})", kernel=name)
    return spec


def _grid_array(spec: ElementwiseSpec, params: Sequence[Resolved]) -> Resolved:
    """The array whose shape is the loop's: the first non-raw output, else the first non-raw input."""
    loop = [r for r in params if r.is_array and not r.param.raw]
    pick = next((r for r in loop if r.param.is_out), loop[0] if loop else None)
    if pick is None:
        raise ForeignKernelError(f"{spec.name}: every array is raw, so CuPy takes the loop's size from "
                                 f"`size=` at each call; bridge.foreign needs one non-raw array to derive it "
                                 f"from", kernel=spec.name)
    return pick


def _declarations(params: Sequence[Resolved], grid: Resolved) -> tuple[list[str], list[str]]:
    """(kernel parameters, statements before the loop): views for raw arrays and the grid array."""
    decl, setup = [], []
    for r in params:
        c = r.param.ctype if r.param.dtype is None else C_NAMES[r.dtype]
        const = "" if r.param.is_out else "const "
        if not r.is_array:
            decl.append(f"{c} {r.name}")
            continue
        ptr = f"_kb_ptr_{r.name}" if r.param.raw else f"_raw_{r.name}"
        decl.append(f"{const}{c}* {ptr}")
        if r.param.raw or r is grid:
            ext = [f"_kb_{r.name}_e{d}" for d in range(r.ndim)]
            strides = [f"_kb_{r.name}_s{d}" for d in range(r.ndim)]
            decl += [f"long long {e}" for e in ext + strides]
        if r.param.raw:
            setup.append(f"const long long _kb_{r.name}_ext[{r.ndim}] = {{{', '.join(ext)}}};")
            setup.append(f"const long long _kb_{r.name}_str[{r.ndim}] = {{{', '.join(strides)}}};")
            setup.append(f"const _kb_raw_array<{const}{c}, {r.ndim}> {r.name}({ptr}, _kb_{r.name}_ext, "
                         f"_kb_{r.name}_str);")
    return decl, setup


def elementwise_source(spec: ElementwiseSpec, params: Sequence[Resolved], block_size: int = 128) -> str:
    """The CUDA source of the kernel for resolved `params` (see the module docstring)."""
    grid = _grid_array(spec, params)
    used = {r.dtype for r in params}
    heads = ["#include <cuda_fp16.h>"] * ("f16" in used) + ["#include <cuda_bf16.h>"] * ("bf16" in used)
    placeholders = sorted({(r.param.ctype, r.dtype) for r in params if r.param.dtype is None})
    typedefs = [f"typedef {C_NAMES[dt]} {ct};" for ct, dt in placeholders]
    decl, setup = _declarations(params, grid)
    size = " * ".join(f"_kb_{grid.name}_e{d}" for d in range(grid.ndim))
    refs = []
    for r in params:
        if r.is_array and not r.param.raw:
            c = r.param.ctype if r.param.dtype is None else C_NAMES[r.dtype]
            refs.append(f"{'' if r.param.is_out else 'const '}{c} &{r.name} = _raw_{r.name}[i];")
    body = "\n    ".join(refs + [spec.operation.strip().rstrip(";") + ";"])
    return "\n".join([f"// generated by bridge.foreign.elementwise from the ElementwiseKernel '{spec.name}'",
                      *heads, *typedefs, _RAW_ARRAY, spec.preamble, "",
                      f'extern "C" __global__ void __launch_bounds__({block_size}) {spec.name}(',
                      "    " + ",\n    ".join(decl) + ") {",
                      *("  " + s for s in setup),
                      f"  _kb_indexer _ind; _ind.size_ = {size}; _ind.i_ = 0;",
                      *([f"  {spec.loop_prep};"] if spec.loop_prep.strip() else []),
                      "  #pragma unroll 1",
                      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < _ind.size();",
                      "       i += (long long)blockDim.x * gridDim.x) {",
                      "    _ind.set(i);",
                      f"    {body}",
                      "  }",
                      *([f"  {spec.after_loop};"] if spec.after_loop.strip() else []),
                      "}", ""])


def elementwise_contract(spec: ElementwiseSpec, params: Sequence[Resolved], *, block_size: int = 128,
                         access: Mapping[str, str] | None = None, requires: Iterable[str] = (),
                         **contract: Any) -> LaunchContract:
    """The contract of the generated kernel (see the module docstring)."""
    grid = _grid_array(spec, params)
    access = dict(access or {})
    outs = {r.name for r in params if r.is_array and r.param.is_out}
    for n, mode in access.items():
        if n not in outs or mode not in ("write", "readwrite"):
            raise ForeignKernelError(f"{spec.name}: access: {n!r}: expected an output array ({', '.join(outs)}) "
                                     f"and 'write' or 'readwrite', got {mode!r}", kernel=spec.name, arg_name=n)
    args, rel = [], []
    for r in params:
        if not r.is_array:
            args.append(ArgSpec.scalar(r.name, r.dtype))
            continue
        mode = access.get(r.name, "write") if r.param.is_out else "read"
        view = r.param.raw or r is grid
        args.append(ArgSpec.array(r.name, r.dtype, ndim=r.ndim, layout="C", access=mode,
                                  abi="view" if view else "pointer"))
        if not r.param.raw and r is not grid:
            rel.append(f"{r.name}.shape == {grid.name}.shape")
    rel += [requires] if isinstance(requires, str) else list(requires)
    tile = (1,) * (grid.ndim - 1) + (block_size,)
    contract.setdefault("max_blocks_per_sm", max(1, 2048 // block_size))
    return LaunchContract(spec.name, args, block=block_size, requires=rel, grid_from=grid.name, grid_tile=tile,
                          **contract)


def build_elementwise(obj: Any, *examples: Any, arch: int, types: Mapping[str, Any] | None = None,
                      scalars: Sequence[str] = (), ndim: int | Mapping[str, int] | None = None,
                      block_size: int = 128, backend: str = "nvrtc", **contract: Any) -> ForeignBuild:
    """Generate, compile for sm_<arch> and check the kernel of a `cupy.ElementwiseKernel` (or an
    `elementwise_spec(...)`), without loading it (no GPU needed). Keywords as `elementwise`."""
    spec = spec_of(obj)
    if not isinstance(block_size, int) or not 1 <= block_size <= 1024:
        raise ForeignKernelError(f"{spec.name}: block_size: expected 1..1024, got {block_size!r}", kernel=spec.name)
    params = resolve(spec, examples, types=types, scalars=scalars, ndim=ndim)
    code = elementwise_source(spec, params, block_size)
    c = elementwise_contract(spec, params, block_size=block_size, min_cc=arch, **contract)
    cubin, compiler = compile_like_cupy(code, spec.name, spec.options, backend, arch)
    info = {"source": "cupy.ElementwiseKernel", "arch": arch, "compiler": compiler, "code": code,
            "types": {r.name: r.dtype for r in params}}
    build = ForeignBuild(cubin, spec.name, c, info=info)
    build.check()
    return build


def elementwise(obj: Any, *examples: Any, device: Any = None, **kw: Any) -> Kernel:
    """A validated bridge.Kernel from a `cupy.ElementwiseKernel` (or `elementwise_spec(...)`):

        ek = cupy.ElementwiseKernel("T x, T a", "T y", "y = a * x + y", "axpy")
        k = bridge.foreign.elementwise(ek, x, 2.0, y)             # example arguments fix T and ndim
        k(x, 2.0, y)                                              # every input and output, in order

    Types: example arguments (all inputs and outputs) or `types={"T": "float32"}`, `scalars=("a",)`
    (inputs passed by value) and `ndim=` (an int, or per parameter). Keywords: `block_size` (128),
    `access={"y": "readwrite"}`, `requires=`, `backend` ('nvrtc' or 'nvcc') and LaunchContract's
    (inplace, ...)."""
    from bridge.foreign.wrap import device_arch
    spec = spec_of(obj)                   # a ReductionKernel or a non-kernel is refused before any device work
    k = load(build_elementwise(spec, *examples, arch=device_arch(device), **kw), device=device)
    assert isinstance(k, Kernel)
    return k
