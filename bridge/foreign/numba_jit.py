"""numba-cuda `@cuda.jit` kernels → validated kernels: compiled by numba, launched by us.

Why: numba's own launch checks little (a wrong dtype recompiles or fails late) and runs on numba's
stream. Here `numba.cuda.compile_ptx(py_func, signature, cc=arch)` gives the PTX of the kernel for the
given numba signature (no GPU needed), and the contract is inferred from the signature's types: each
array its dtype and ndim, `readwrite` (`read` for readonly arrays) unless `access=` narrows it; each
number a scalar. The user adds relations, access modes and the grid rule.

numba's kernel ABI passes every array as 5 + 2·ndim parameters (numba-cuda's `_prepare_args`):
meminfo and parent pointers (null for device arrays), nitems and itemsize (i64), the data pointer,
ndim i64 extents and ndim i64 strides IN BYTES. Our launcher packs arrays as one pointer (`pointer`
ABI) or pointer + extents + strides in ELEMENTS (`view` ABI), so the contract spells numba's fields out:
meminfo / parent as optional u8 pointer arrays (passed None: null), nitems, itemsize, extents and
strides as i64 scalars, the array itself as a pointer-ABI array, and relations tie every scalar to the
array (`_kb_x_nitems == x.size`, `_kb_x_shape0 == x.shape[0]`, `_kb_x_stride0 == 4 * x.shape[1]`).
`NumbaKernel` fills those scalars from each argument's shape; the one native validator checks them
with everything else, so a wrong value is refused before launch like any bad argument. Byte strides
are a function of the shape only for contiguous arrays, so numba's `A` layout (`float32[:]`) is
narrowed to C-contiguous (`layout={"x": "F"}` for Fortran order). Any strides would need a launcher
ABI packing strides in bytes, or a relation term for strides: not there yet.

Not yet (refused when wrapped, ForeignKernelError): complex, record, tuple and pointer arguments;
kernels needing a link step (`link=`, grid sync / cooperative groups, NRT, reshape helpers);
`debug=True`, argument `extensions`, `shared_memory_carveout`.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from bridge.contract import ArgSpec, LaunchContract
from bridge.errors import ArgumentCountError, ContractDefinitionError, ForeignKernelError, LaunchContractError
from bridge.foreign.launch import ForeignKernel
from bridge.foreign.params import check_params, contract_params
from bridge.foreign.ptx import ptx_entries, ptx_params
from bridge.foreign.wrap import ForeignBuild, load

__all__ = ["NUMBA_DTYPES", "NumbaParam", "numba_params", "numba_contract", "expand_args", "NumbaBuild",
           "NumbaKernel", "build_numba", "numba"]

# numba type names (str(type)) -> contract dtypes; complex only as array elements
NUMBA_DTYPES: dict[str, str] = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128",
}
_ITEMSIZE = {"bool": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "f16": 2, "i32": 4, "u32": 4, "f32": 4,
             "i64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_DRIVER_EXTERNS = {"vprintf", "malloc", "free", "__assertfail"}   # resolved by the driver's PTX JIT
_REFUSED_OPTIONS = {   # dispatcher options whose kernels only numba's own launcher or linker can run
    "device": "a device function (@cuda.jit(device=True)) is not a kernel",
    "link": "link= files need numba's link step",
    "debug": "debug=True reports exceptions through numba's launcher",
    "extensions": "argument extensions convert arguments in numba's launcher",
    "shared_memory_carveout": "shared_memory_carveout is set by numba's launcher",
}


@dataclass(frozen=True)
class NumbaParam:
    """One kernel parameter as numba types it: an array (`ndim` >= 0; layout 'C', 'F' or 'A';
    `readonly`) or a scalar (`ndim` == -1) of contract dtype `dtype`."""

    name: str
    dtype: str
    ndim: int = -1
    layout: str = ""
    readonly: bool = False

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]


def _fail(kname: str, name: str, why: str) -> ForeignKernelError:
    return ForeignKernelError(f"{kname}: parameter '{name}': {why}", kernel=kname, arg_name=name)


def numba_params(kname: str, names: Sequence[str], argtypes: Sequence[Any]) -> list[NumbaParam]:
    """The parameters of a kernel from numba types (arrays: `.dtype`, `.ndim`, `.layout`, `.mutable`;
    scalars: their name); ForeignKernelError naming the parameter for a type not supported yet."""
    if len(names) != len(argtypes):
        raise ForeignKernelError(f"{kname}: the signature has {len(argtypes)} argument type(s) for the kernel's "
                                 f"{len(names)} parameter(s) ({', '.join(names)})", kernel=kname)
    out = []
    for name, ty in zip(names, argtypes):
        if hasattr(ty, "ndim") and hasattr(ty, "layout") and hasattr(ty, "dtype"):
            dt = NUMBA_DTYPES.get(str(ty.dtype))
            if dt is None or ty.layout not in ("C", "F", "A"):
                raise _fail(kname, name, f"{ty}: arrays of {', '.join(NUMBA_DTYPES)} in layout C, F or A "
                                         f"are supported")
            out.append(NumbaParam(name, dt, int(ty.ndim), ty.layout, not getattr(ty, "mutable", True)))
            continue
        dt = NUMBA_DTYPES.get(str(ty))
        if dt is None or dt in ("c64", "c128"):
            raise _fail(kname, name, f"{ty}: scalars of bool, integers and float16/32/64 are supported (numba "
                                     f"passes complex, records, tuples and pointers differently)")
        out.append(NumbaParam(name, dt))
    return out


def _strides(p: NumbaParam, layout: str) -> list[str]:
    """Each byte stride of a contiguous `layout` array as a relation term on its shape."""
    axes = range(p.ndim)
    inner = [range(d + 1, p.ndim) if layout == "C" else range(d) for d in axes]
    return [" * ".join([str(p.itemsize)] + [f"{p.name}.shape[{k}]" for k in ks]) for ks in inner]


def _array_args(p: NumbaParam, access: str, layout: str) -> tuple[list[ArgSpec], list[str]]:
    """numba's 5 + 2*ndim parameters of array `p` and the relations tying the scalars to it."""
    h = f"_kb_{p.name}_"
    args = [ArgSpec.array(h + "meminfo", "u8", abi="pointer", optional=True),
            ArgSpec.array(h + "parent", "u8", abi="pointer", optional=True),
            ArgSpec.scalar(h + "nitems", "i64"), ArgSpec.scalar(h + "itemsize", "i64"),
            ArgSpec.array(p.name, p.dtype, ndim=p.ndim, layout=layout, access=access, abi="pointer")]
    args += [ArgSpec.scalar(f"{h}shape{d}", "i64") for d in range(p.ndim)]
    args += [ArgSpec.scalar(f"{h}stride{d}", "i64") for d in range(p.ndim)]
    rel = [f"{h}nitems == {p.name}.size", f"{h}itemsize == {p.itemsize}"]
    rel += [f"{h}shape{d} == {p.name}.shape[{d}]" for d in range(p.ndim)]
    rel += [f"{h}stride{d} == {term}" for d, term in enumerate(_strides(p, layout))]
    return args, rel


def _layouts(kname: str, params: Sequence[NumbaParam], layout: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for p in params:
        if p.ndim < 0:
            continue
        want = layout.get(p.name, "F" if p.layout == "F" else "C")
        if want == "any":
            raise _fail(kname, p.name, "layout 'any' needs numba's byte strides for any strides, which the "
                                       "launcher does not pack yet (the view ABI packs strides in elements); "
                                       "'C' or 'F' are checked")
        if want not in ("C", "F") or (p.layout != "A" and want != p.layout):
            raise _fail(kname, p.name, f"layout {want!r}: numba compiled it as layout {p.layout!r}; expected "
                                       f"{'C or F' if p.layout == 'A' else repr(p.layout)}")
        out[p.name] = want
    return out


def _check_keys(kname: str, what: str, keys: Iterable[str], params: Sequence[NumbaParam]) -> None:
    arrays = {p.name for p in params if p.ndim >= 0}
    for key in keys:
        if key not in arrays:
            raise ContractDefinitionError(f"{kname}: {what}: {key!r} is not an array parameter (arrays: "
                                          f"{', '.join(sorted(arrays)) or 'none'})", kernel=kname, arg_name=key)


def numba_contract(kname: str, params: Sequence[NumbaParam], *, requires: Iterable[str] = (),
                   access: Mapping[str, str] | None = None, layout: Mapping[str, str] | None = None,
                   grid: Any = None, grid_from: str | None = None, **contract: Any) -> LaunchContract:
    """The contract of numba's parameter list for `params` (see the module docstring): the user's
    relations first, then the ones tying numba's extra fields to their arrays."""
    access, layout = dict(access or {}), dict(layout or {})
    _check_keys(kname, "access", access, params)
    _check_keys(kname, "layout", layout, params)
    if grid is not None:
        if not (isinstance(grid, tuple) and len(grid) == 2 and isinstance(grid[0], str)):
            raise ContractDefinitionError(f"{kname}: grid: expected (array name, tile) such as ('out', (16,)): "
                                          f"one block per tile of that array, got {grid!r}", kernel=kname)
        grid_from = grid[0]
        contract["grid_tile"] = tuple(grid[1]) if isinstance(grid[1], (tuple, list)) else (grid[1],)
    if grid_from is not None:
        _check_keys(kname, "grid_from", [grid_from], params)
    layouts = _layouts(kname, params, layout)
    args: list[ArgSpec] = []
    rel = [requires] if isinstance(requires, str) else list(requires)
    for p in params:
        if p.ndim < 0:
            args.append(ArgSpec.scalar(p.name, p.dtype))
            continue
        mode = access.get(p.name, "read" if p.readonly else "readwrite")
        if p.readonly and mode != "read":
            raise _fail(kname, p.name, f"a readonly array can only be 'read', got access {mode!r}")
        more, tie = _array_args(p, mode, layouts[p.name])
        args += more
        rel += tie
    return LaunchContract(kname, args, requires=rel, grid_from=grid_from, **contract)


def _shape(value: Any, ndim: int) -> tuple[int, ...]:
    """`value`'s extents, padded or cut to `ndim` (what the validator sees decides; a wrong ndim is
    refused there, before the relations); zeros when the object states none."""
    try:
        shape = getattr(value, "shape", None)
        if shape is None:
            shape = value.__cuda_array_interface__["shape"]
        dims = tuple(int(d) for d in shape)
    except Exception:   # noqa: BLE001 - a hostile or non-array object: the validator names it
        dims = ()
    return dims[:ndim] + (0,) * max(0, ndim - len(dims))


def expand_args(params: Sequence[NumbaParam], layouts: Mapping[str, str], args: Sequence[Any]) -> tuple:
    """The full argument tuple of a launch: numba's extra fields filled in around each array."""
    out: list[Any] = []
    for p, v in zip(params, args):
        if p.ndim < 0:
            out.append(v)
            continue
        dims = _shape(v, p.ndim)
        nitems = 1
        for d in dims:
            nitems *= d
        strides = [0] * p.ndim
        step = p.itemsize
        for d in (reversed(range(p.ndim)) if layouts[p.name] == "C" else range(p.ndim)):
            strides[d] = step
            step *= dims[d]
        out += [None, None, nitems, p.itemsize, v, *dims, *strides]
    return tuple(out)


@dataclass(frozen=True)
class NumbaBuild(ForeignBuild):
    """A numba kernel's build: `params` as numba typed them, `layouts` each array's contract layout."""

    params: tuple[NumbaParam, ...] = ()
    layouts: Mapping[str, str] | None = None

    def check(self) -> None:
        """As ForeignBuild.check, reading the PTX entry; numba declares a float16 scalar as its 16 bits
        (`.u16`), which is what the contract packs for f16."""
        expected = contract_params(self.contract, self.name)
        actual = ptx_params(self.image, self.name)
        actual = [replace(a, kind="f") if i < len(expected) and expected[i].kind == "f" and a.size == 2
                  and expected[i].size == 2 else a for i, a in enumerate(actual)]
        check_params(self.name, expected, actual, "numba's PTX entry")


def _options(kname: str, dispatcher: Any) -> dict[str, Any]:
    """The compile options of a CUDADispatcher; refuses those whose kernels we cannot load or launch."""
    opts = getattr(dispatcher, "targetoptions", None)
    if getattr(dispatcher, "py_func", None) is None or not isinstance(opts, dict):
        raise TypeError(f"bridge.foreign.numba: expected a @numba.cuda.jit kernel, got {type(dispatcher).__name__}")
    for key, why in _REFUSED_OPTIONS.items():
        if opts.get(key):
            raise ForeignKernelError(f"{kname}: {why}: not supported yet by bridge.foreign", kernel=kname)
    return opts


def _compile(dispatcher: Any, signature: Any, arch: int, kname: str) -> tuple[str, list[Any], str]:
    """(PTX, argument types, entry name) of the dispatcher's function for `signature` and sm_<arch>."""
    try:
        from numba import cuda
        try:
            from numba.cuda.core import sigutils
        except ImportError:     # numba-cuda before its own core
            from numba.core import sigutils
    except ImportError as exc:
        raise ImportError(f"bridge.foreign.numba needs numba-cuda (`pip install numba-cuda`): {exc}") from exc
    opts = _options(kname, dispatcher)
    argtypes, restype = sigutils.normalize_signature(signature)
    if restype is not None and str(restype) != "none":
        raise ForeignKernelError(f"{kname}: signature: a kernel returns void, got {restype}", kernel=kname)
    kw = {k: opts[k] for k in ("fastmath", "lineinfo", "opt", "launch_bounds") if opts.get(k) is not None}
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, device=False, debug=False, cc=(arch // 10, arch % 10),
                              **kw)
    externs = set(re.findall(r"\.extern\s+\.func\s*(?:\([^)]*\)\s*)?([\w$]+)", ptx)) - _DRIVER_EXTERNS
    if externs:
        raise ForeignKernelError(f"{kname}: the kernel calls {', '.join(sorted(externs))}, which numba links in "
                                 f"at load time (grid sync, NRT, helpers): not supported yet", kernel=kname)
    entries = list(ptx_entries(ptx))
    if len(entries) != 1:
        raise ForeignKernelError(f"{kname}: numba's PTX has {len(entries)} entries ({', '.join(entries)}), "
                                 f"expected the kernel's one", kernel=kname)
    return ptx, list(argtypes), entries[0]


def _renamed(ptx: str, entry: str, name: str) -> tuple[str, str]:
    """The PTX with numba's mangled entry name replaced by the function's (readable messages), unless
    that name is no identifier or the PTX already uses it (other than as an instruction, `add.f32`)."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or re.search(rf"(?<![\w$.%]){name}(?![\w$.])", ptx):
        return ptx, entry
    return ptx.replace(entry, name), name


def build_numba(dispatcher: Any, signature: Any, *, arch: int, requires: Iterable[str] = (),
                access: Mapping[str, str] | None = None, layout: Mapping[str, str] | None = None,
                **contract: Any) -> NumbaBuild:
    """Compile a `@numba.cuda.jit` kernel for `signature` and sm_<arch> and infer its contract, without
    loading it (no GPU needed). Keywords as `numba`."""
    py_func = getattr(dispatcher, "py_func", None)
    kname = getattr(py_func, "__name__", "kernel")
    ptx, argtypes, entry = _compile(dispatcher, signature, arch, kname)
    sig = inspect.signature(py_func)
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in sig.parameters.values()):
        raise ForeignKernelError(f"{kname}: *args / keyword-only parameters are not supported", kernel=kname)
    params = numba_params(kname, list(sig.parameters), argtypes)
    ptx, name = _renamed(ptx, entry, kname)
    if launch_bounds := (dispatcher.targetoptions.get("launch_bounds") or None):
        contract.setdefault("launch_bounds", launch_bounds if isinstance(launch_bounds, int) else launch_bounds[0])
    contract.setdefault("min_cc", arch)
    c = numba_contract(name, params, requires=requires, access=access, layout=layout, **contract)
    import numba as _numba
    info = {"source": "numba", "arch": arch, "compiler": f"numba {_numba.__version__}", "entry": entry,
            "signature": [str(t) for t in argtypes], "ptx": ptx}
    layouts = _layouts(kname, params, dict(layout or {}))
    return NumbaBuild(ptx.encode(), name, c, info=info, params=tuple(params), layouts=layouts)


class NumbaKernel(ForeignKernel):
    """A numba kernel launched by us: `k(*args, grid=, block=, shared_mem=, stream=)`, `k[grid, block](...)`,
    `k.launch(...)` with the kernel's own arguments; numba's extra fields are filled per launch and
    checked by the validator. `k.contract` is the full contract (what is validated), `k.params` the
    kernel's parameters as numba typed them, `k.info["entry"]` numba's mangled name."""

    @classmethod
    def _wrap(cls, kernel: Any, build: NumbaBuild) -> NumbaKernel:
        self = cls._create(kernel, (), build.contract, dict(build.info))
        self._direct = False                  # every launch expands the arguments (_launch)
        self.params, self.layouts, self._build = build.params, dict(build.layouts or {}), build
        user = {p.name: i for i, p in enumerate(build.params)}
        self._user = user
        self._full = []               # full argument position -> the user's position
        for i, p in enumerate(build.params):
            self._full += [i] * (1 if p.ndim < 0 else 5 + 2 * p.ndim)
        return self

    def _launch(self, args: tuple, grid: Any, block: Any, shared_mem: Any, stream: Any, peer: bool) -> None:
        full = self.full_args(args)
        try:
            self.kernel.launcher.launch(full, grid, block, shared_mem, stream, keep_all=True, peer_access=peer)
        except LaunchContractError as exc:
            self._renumber(exc)
            raise

    def full_args(self, args: tuple) -> tuple:
        """The tuple the launcher packs: numba's per-array fields filled in around each array."""
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise ArgumentCountError(f"{self.name}: expected {len(self.params)} arguments ({names}), got "
                                     f"{len(args)}", kernel=self.name)
        return expand_args(self.params, self.layouts, args)

    def _renumber(self, exc: LaunchContractError) -> None:
        """Positions in the validator's message count numba's extra fields; say the user's instead."""
        def user_pos(m: re.Match) -> str:
            name = m.group(1)
            owner = re.fullmatch(r"_kb_(\w+?)_(?:meminfo|parent|nitems|itemsize|shape\d+|stride\d+)", name)
            pos = self._user.get(owner.group(1) if owner else name)
            return m.group(0) if pos is None else f"'{name}' (#{pos})"
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (re.sub(r"'(\w+)' \(#(\d+)\)", user_pos, exc.args[0]),) + exc.args[1:]
        if isinstance(exc.arg, int) and 0 <= exc.arg < len(self._full):
            exc.arg = self._full[exc.arg]

    def on_device(self, device: Any) -> NumbaKernel:
        """This kernel loaded on `device`."""
        return NumbaKernel._wrap(self.kernel.on_device(device), self._build)

    def __repr__(self) -> str:
        return f"<bridge.foreign.NumbaKernel {self.name!r} on device {self.kernel.device} (numba ABI)>"


def numba(dispatcher: Any, signature: Any, *, device: Any = None, **kw: Any) -> NumbaKernel:
    """A validated kernel from a `@numba.cuda.jit` function, compiled by numba for `device`'s architecture:

        k = bridge.foreign.numba(saxpy, "void(float32, float32[::1], float32[::1], int64)",
                                 access={"x": "read"}, requires=["len(x) == n", "len(y) == n"],
                                 grid_from="y", block=256)
        k(2.0, x, y, n)

    `signature`: a numba signature (text or types). Inferred: arrays (dtype, ndim, layout `C` for `[::1]`,
    `F` for `[::1, :]`, `A` narrowed to C unless `layout={"x": "F"}`; readwrite, readonly arrays read),
    scalars. Keywords: access, layout, requires, grid_from (one thread per element) or grid=(array, tile)
    (one block per tile), and LaunchContract's (block, launch_bounds, shared_mem, domain, per_thread,
    inplace, ...)."""
    from bridge.foreign.wrap import device_arch
    build = build_numba(dispatcher, signature, arch=device_arch(device), **kw)
    return NumbaKernel._wrap(load(build, device=device), build)
