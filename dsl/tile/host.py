"""Host side of the tile model: `tile.partition(array, tile_shape)` and the `@tile.kernel` object.

A tile kernel goes through the same launch path as a SIMT kernel: the native Dispatcher keys a call
on its arguments (a partition's tile shape and a constant's value included) and, on a hit, launches
without leaving C++; the contract derives the grid (one block per tile), the block and the dynamic
shared memory, and the one validator refuses bad calls. On a miss the kernel specialises
(`signature`), compiles through the disk cache and hands the Dispatcher its Launcher. `simulate()`
validates through the same validator (host memory standing in for device memory) before the tile
simulator runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from bridge import _native
from bridge.errors import ArgumentCountError, ArgumentKindError, DTypeError, NdimError

from dsl.annotations import ParamAnnotation, parse_annotations
from dsl.ir.types import ScalarType
from dsl.no_device import add_simulate_hint
from dsl.observe import specialised
from dsl.once import fill_once, new_lock
from dsl.runmode import _ENV_DATA, _SIM_KEY, simulating
from dsl.tile.api import _Annot
from dsl.tile.types import (ArrayParamType, ConstParamType, PartitionParamType, ScalarParamType,
                            as_scalar_type, np_dtype, scalar_of_numpy)
from dsl.types import is_typevar as _is_typevar
from dsl.typevars import TypeVarMismatch, bind_dtype

if TYPE_CHECKING:
    from dsl.backend.inspect import KernelInfo

_PASS, _PARTITION, _CONSTANT = 0, 1, 2   # Dispatcher plan kinds (cpp/native/launcher.cpp)


class Partition(_native.Tiling):
    """`tile.partition(array, tile_shape)`: `array` cut into tiles of `tile_shape` (powers of two).

    As a kernel argument it defines the grid (one tile block per tile) and gives tile block b write
    access to tile b only. `tile.Partition[T, ndim]` is the matching annotation. The array is viewed
    through the one intake path (any DLPack / CAI producer, NumPy for the simulator) and read again
    at every launch.
    """

    def __class_getitem__(cls, item) -> _Annot:
        return _Annot("Partition", item if isinstance(item, tuple) else (item,))

    def __repr__(self) -> str:
        return f"tile.Partition(shape={self.shape}, tile_shape={self.tile_shape}, grid={self.grid})"


def partition(array: object, tile_shape: tuple[int, ...] | int) -> Partition:
    """Partition `array` into tiles of `tile_shape`; pass the result as a tile.Partition argument."""
    return Partition(array, tile_shape)


def _value_type(value: object) -> ScalarType:
    """The dtype a scalar argument's value has (what binds a TypeVar-typed scalar parameter): its
    NumPy dtype, bool, i64 for Python ints, f64 for Python floats (as SIMT signatures do)."""
    if isinstance(value, np.generic):
        return scalar_of_numpy(value.dtype) or as_scalar_type("f64")  # type: ignore[return-value]
    if isinstance(value, bool):
        return as_scalar_type("bool")  # type: ignore[return-value]
    return as_scalar_type("i64" if isinstance(value, int) else "f64")  # type: ignore[return-value]


def _view(array: object) -> Any:
    """The one intake path's view of an array (NumPy host arrays included), or None."""
    if isinstance(array, _native.ArrayBase):
        return array
    try:
        return _native.ArrayBase(array)
    except TypeError:
        return None


def _facts_key(facts: dict[str, dict]) -> tuple:
    """`facts` as a hashable, order-free key of the in-memory caches."""
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in facts.items()))


class TileKernel:
    """A @tile.kernel: specialises on argument dtypes/ndims/tile shapes/constants at first use."""

    def __init__(self, pyfunc, num_warps: int | None = None, persistent: bool = False,
                 lineinfo: bool = True, requires: tuple[str, ...] = (), group_m: int | None = None,
                 launch: Any = None, lowering: tuple[tuple[str, Any], ...] = ()) -> None:
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.num_warps = num_warps
        self.persistent = persistent
        self.lineinfo = lineinfo          # PTX line tables (docs/dsl.md, "Line info")
        self.requires = tuple(requires)   # contract relations, as @simt.kernel(requires=) (checked at the def)
        self.group_m = group_m            # block order of a 2-D tile grid (dsl/tile/lower/tiles.py)
        self.launch = launch              # launch features (dsl.options.LaunchFeatures; dsl/tile/launch.py)
        self.lowering = tuple(lowering)   # lowering switches this kernel fixes (dsl/tile/switches.py)
        self.specs: list[ParamAnnotation] = parse_annotations(pyfunc, "tile", "kernel")
        # documented caches: tile IR per signature, compiled kernels per (signature, facts, arch),
        # host-memory validators per signature, and the native dispatcher; filled once per key
        # whichever threads ask (dsl/once.py)
        self._ir_cache: dict[tuple, Any] = {}
        self._gpu_cache: dict[tuple, Any] = {}
        self._sim_validators: dict[tuple, Any] = {}
        self._fill_lock = new_lock()
        self._dispatcher: Any = None
        self._fast: Any = None            # the dispatcher's fastcall (`k(*args)` without keywords)
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    # -------------------------------------------------------------------------------- signatures
    def signature(self, args: tuple) -> tuple:
        """The specialisation these arguments select (raises the bridge's typed errors). TypeVars
        bind through the one binder (dsl/typevars.py), from arrays first, then from scalars."""
        return self._signature(args, {})

    def specialisation(self, args: tuple) -> tuple[tuple, dict[str, dict]]:
        """(signature, facts) of these arguments, each array viewed once: what a compile miss
        computes and passes on (the key, the compile, the specialisation log)."""
        views: dict[int, Any] = {}
        sig = self._signature(args, views)
        return sig, self._facts_of(views)

    def _signature(self, args: tuple, views: dict[int, Any]) -> tuple:
        """signature(), keeping the view of each array argument in `views` (by position)."""
        if len(args) != len(self.specs):
            raise ArgumentCountError(f"{self.name}: expected {len(self.specs)} arguments "
                                     f"({', '.join(s.name for s in self.specs)}), got {len(args)}",
                                     kernel=self.name)
        bindings: dict[object, ScalarType] = {}
        out: list[object] = [None] * len(args)
        for i in sorted(range(len(args)), key=lambda k: self.specs[k].kind not in ("array", "partition")):
            out[i] = self._param_type(i, self.specs[i], args[i], bindings, views)
        return tuple(out)

    def _param_type(self, i: int, spec: ParamAnnotation, arg: object, bindings: dict,
                    views: dict[int, Any]) -> object:
        where = f"{self.name}: argument '{spec.name}' (#{i})"
        info = {"kernel": self.name, "arg": i, "arg_name": spec.name}
        if spec.kind == "const":
            try:
                hash(arg)
            except TypeError:
                raise TypeError(f"{where}: a tile.Constant must be hashable, got {arg!r}") from None
            return ConstParamType(arg)
        if spec.kind == "scalar":
            if not isinstance(arg, (int, float, bool, np.generic)):
                raise ArgumentKindError(f"{where}: expected a {spec.dtype} scalar, got "
                                        f"{type(arg).__name__}", **info)
            return ScalarParamType(bind_dtype(bindings, spec.dtype, _value_type(arg), exact=False))
        if spec.kind == "partition":
            if not isinstance(arg, Partition):
                raise ArgumentKindError(f"{where}: expected tile.partition(array, tile_shape), "
                                        f"got {type(arg).__name__}", **info)
            view = _view(arg.array)
        else:
            if isinstance(arg, Partition):
                raise ArgumentKindError(f"{where}: expected a tile.Array (a plain array), got a "
                                        f"Partition", **info)
            view = _view(arg)
            if view is None:
                raise ArgumentKindError(f"{where}: expected an array, got {type(arg).__name__}",
                                        **info)
        views[i] = view
        dt = as_scalar_type(view.dtype_tag)
        if dt is None:
            raise DTypeError(f"{where}: arrays of dtype {view.dtype_name} are not supported by the DSL", **info)
        try:
            bind_dtype(bindings, spec.dtype, dt)
        except TypeVarMismatch as m:
            raise DTypeError(f"{where}: expected {m.expected} array, got {view.dtype_name} "
                             f"array of shape {tuple(view.shape)}", **info) from None
        if spec.ndim is not None and view.ndim != spec.ndim:
            raise NdimError(f"{where}: expected a {spec.ndim}-d array, got shape {tuple(view.shape)}",
                            **info)
        if spec.kind == "partition":
            if view.ndim == 0:     # as the annotation's ndim: a partition has tiles along an axis
                raise NdimError(f"{where}: a partition needs at least one axis, got a 0-d array; "
                                f"partition a (1,) array instead", **info)
            return PartitionParamType(dt, view.ndim, arg.tile_shape)  # type: ignore[union-attr]
        return ArrayParamType(dt, view.ndim, atomic=spec.writable)   # writable: tile.Atomic

    def facts(self, args: tuple) -> dict[str, dict]:
        """Per array parameter, what the compiler may specialise on (like Triton): C-contiguity,
        16-byte alignment of the data pointer, last extent divisible by 8, and by 16 for 1-byte
        elements (their 16-byte rows; no other dtype reads it) — read through the one intake path,
        the same facts the native Dispatcher keys on."""
        return self._facts_of({i: _view(arg.array if isinstance(arg, Partition) else arg)
                               for i, (spec, arg) in enumerate(zip(self.specs, args))
                               if spec.kind in ("array", "partition")})

    def _facts_of(self, views: dict[int, Any]) -> dict[str, dict]:
        """facts() from the views of the array arguments (by position)."""
        out = {}
        for i, spec in enumerate(self.specs):
            if spec.kind in ("array", "partition"):
                view = views[i]
                shape = tuple(view.shape)
                out[spec.name] = {"layout": "C" if view.is_c_contiguous else "any",
                                  "aligned16": view.ptr % 16 == 0,
                                  "div8": bool(shape) and shape[-1] % 8 == 0,
                                  "div16": view.itemsize == 1 and bool(shape) and shape[-1] % 16 == 0}
        return out

    def tile_ir(self, *args) -> Any:
        """The tile IR of the specialisation for `args` (arrays may be NumPy stand-ins)."""
        return self._ir_for(self.signature(args))

    def _ir_for(self, sig: tuple) -> Any:
        def make() -> Any:
            from dsl.tile.frontend import TileFrontend
            return TileFrontend(self.pyfunc, list(sig), self.name, self.requires, self.group_m, self.launch).build()
        return fill_once(self._ir_cache, sig, self._fill_lock, make)

    def ir(self, *args, arch: str = "sm_90") -> str:
        """The typed IR this specialisation compiles to (the tile program lowered onto threads for
        `arch`) as text, like a SIMT kernel's `ir()` (returned, not printed)."""
        from dsl.compiler import run_pipeline
        from dsl.ir.printer import format_function
        from dsl.tile.compile import tile_context
        sig, facts = self.specialisation(args)
        ctx = tile_context(arch, num_warps=self.num_warps, facts=facts, persistent=self.persistent,
                           lineinfo=self.lineinfo, dump=(), kernel=self, name=self.name)
        return format_function(run_pipeline(self._ir_for(sig), ctx, start="tile_lower", stop="tile_lower"))

    def _flat(self, args: tuple) -> tuple:
        """The kernel's launch arguments: partitions as their arrays, constants left out."""
        return tuple(a.array if isinstance(a, Partition) else a
                     for spec, a in zip(self.specs, args) if spec.kind != "const")

    # -------------------------------------------------------------------------------- CPU
    def validate_host(self, *args) -> tuple:
        """Validate a call with host (NumPy) arrays through the native validator, as `simulate()`
        does, without running it; returns (grid, block, shared_mem, skip)."""
        sig, facts = self.specialisation(args)
        return self._sim_validator(sig, facts, self._ir_for(sig)).validate_only(self._flat(args))

    def simulate(self, *args) -> None:
        """Run on the CPU: NumPy arrays in, partitions of NumPy arrays written in place.

        The call goes through the native validator first (host memory standing in for device
        memory), so the simulator refuses what a GPU launch refuses, with the same error."""
        sig, facts = self.specialisation(args)
        fn = self._ir_for(sig)
        _grid, _block, _smem, skip = self._sim_validator(sig, facts, fn).validate_only(self._flat(args))
        if skip:
            return
        from dsl.tile.sim import simulate as run_tiles
        bound: dict[int, object] = {}
        for i, (spec, arg) in enumerate(zip(self.specs, args)):
            if spec.kind == "const":
                continue
            if spec.kind == "scalar":
                bound[i] = np.asarray(arg).astype(np_dtype(sig[i].dtype))
                continue
            arr = arg.array if isinstance(arg, Partition) else arg
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{self.name}: argument '{spec.name}' (#{i}): simulate() needs NumPy "
                                f"arrays, got {type(arr).__name__}")
            bound[i] = arr
        grid = next(a.grid for a in args if isinstance(a, Partition))
        run_tiles(fn, bound, grid)

    def _sim_validator(self, sig: tuple, facts: dict[str, dict], fn: Any) -> Any:
        """A driver-less native Launcher over this specialisation's contract (cached per signature)."""
        key = (sig, _facts_key(facts))

        def make() -> Any:
            import json
            from dsl.sim.validator import host_launcher
            from dsl.tile.compile import validator_contract
            from dsl.tile.lower import pick_threads
            contract = validator_contract(fn, pick_threads(fn, self.num_warps), facts, self.persistent)
            return host_launcher(json.dumps(contract), fn.name)
        return fill_once(self._sim_validators, key, self._fill_lock, make)

    def simulate_lowered(self, *args, num_warps: int | None = None, blocks: int | None = None,
                         tensor_cores: bool = False, arch: str = "sm_89") -> None:
        """Run the GPU lowering (the SIMT IR the backend compiles) on the SIMT CPU simulator: checks
        the thread mapping, shared-memory staging and warp reductions without a GPU. `blocks`: the
        grid of a persistent kernel (default: one block per tile). `tensor_cores`: lower as a GPU
        build for `arch` does ("sm_80", "sm_89" or "sm_90"), with the arrays' own launch facts: the
        cp.async GEMM loop, ldmatrix fragments, mma.sync (f16/bf16/tf32/f8, dsl/tile/ptx/sm80.py), on
        sm_90 the TMA + wgmma loop (dsl/tile/ptx/sm90.py), and the tensor-core tile.matmul all run
        through the CPU semantics of their PTX; without it, the portable lowering (target 0: no
        tensor-core path reads the facts). Either way the arrays' facts pick the vector accesses of
        distributed tiles (dsl/tile/lower/runs.py), which the simulator checks for alignment. The launch is
        validated first against the lowered kernel's own contract (the one builder, the one native
        validator, tensor maps included), as a GPU launch of it would be."""
        import json
        from dsl.sim.launch import run
        from dsl.sim.validator import host_launcher
        from dsl.tile.compile import contract_for
        from dsl.tile.lower import lower, pick_threads
        sig, facts = self.specialisation(args)
        fn = self._ir_for(sig)
        threads = pick_threads(fn, num_warps if num_warps is not None else self.num_warps)
        info: dict = {}
        from dsl.backend.target import parse_arch
        from dsl.tile.compile import lowering_switches
        from dsl.tile.switches import lowering_only
        simt_fn = lower(fn, threads, self.name, facts, info, persistent=self.persistent,
                        cc=parse_arch(arch) if tensor_cores else 0,
                        **dict(lowering_only(lowering_switches(self.lowering)), tc_matmul=tensor_cores))
        contract = contract_for(simt_fn, fn, facts, info["relied"], self.persistent,
                                dynamic_smem=info["dynamic_smem"])
        types = [t for s, t in zip(self.specs, sig) if s.kind != "const"]
        flat = tuple(np.asarray(a).astype(np_dtype(t.dtype))[()] if isinstance(t, ScalarParamType) else a
                     for t, a in zip(types, self._flat(args)))
        tiles = next(a.num_tiles for a in args if isinstance(a, Partition))
        grid = None                                # derived by the validator: one block per tile
        if self.persistent and tiles:
            grid = tiles if blocks is None else \
                min(tiles, blocks) if isinstance(blocks, int) and not isinstance(blocks, bool) else blocks
        g, b, smem, skip = host_launcher(json.dumps(contract), self.name).validate_only(flat, grid=grid)
        if not skip:
            run(simt_fn, list(flat), g, b, smem)

    # -------------------------------------------------------------------------------- GPU
    def ptx(self, *args, arch: str = "sm_90") -> str:
        """PTX of the specialisation for `args` (NumPy stand-ins are fine; no GPU needed)."""
        return self.compile(args, arch).ptx

    def compile(self, args: tuple, arch: str) -> Any:
        """Compile (cached per signature, facts and arch, in memory and on disk) →
        dsl.tile.compile.CompiledTile."""
        sig, facts = self.specialisation(args)
        return self._compile(sig, facts, arch)

    def _compile(self, sig: tuple, facts: dict[str, dict], arch: str) -> Any:
        from dsl.tile.compile import compile_cached
        return fill_once(self._gpu_cache, self._gpu_key(sig, facts, arch), self._fill_lock,
                         lambda: compile_cached(self, sig, facts, arch))

    def _gpu_key(self, sig: tuple, facts: dict[str, dict], arch: str) -> tuple:
        from dsl.tile.compile import switches_key
        return (sig, _facts_key(facts), arch, switches_key(self.lowering))

    def compiled_in_process(self, sig: tuple, facts: dict[str, dict], arch: str) -> bool:
        """Is this specialisation compiled in this process already (no compile, no disk read to come)?"""
        return self._gpu_key(sig, facts, arch) in self._gpu_cache

    def inspect(self, *args, arch: str = "sm_90") -> KernelInfo:
        """Registers, spills and shared memory (`ptxas -v`), the contract, and SASS when available:
        a KernelInfo (`print(info)` for a short report)."""
        from dsl.backend.inspect import inspect_ptx
        ck = self.compile(args, arch)
        return inspect_ptx(self.name, ck.name, ck.ptx, ck.contract_json, ck.metadata, ck.metadata["arch"])

    def _miss(self, args: tuple, device: int | None = None) -> Any:
        """Dispatcher miss: specialise for these arguments on the launch's device (its arch), compile
        (disk cache first), return that device's native Launcher (the Dispatcher keeps it)."""
        import bridge
        try:
            dev = bridge.Device(device) if device is not None else bridge.current_device()
        except bridge.NoDeviceError as exc:
            add_simulate_hint(exc, self.name)     # same error, with how to run it without a GPU
            raise
        sig, facts = self.specialisation(args)      # each array viewed once (issue 33)
        ck = self._compile(sig, facts, dev.arch)
        specialised(self, self.name, (*sig, facts), ck.metadata.get("arch"))  # observe
        return bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json, device=dev.ordinal).launcher

    @property
    def dispatcher(self) -> Any:
        if self._dispatcher is None:
            plan = [_CONSTANT if s.kind == "const" else _PARTITION if s.kind == "partition" else _PASS
                    for s in self.specs]
            self._dispatcher = _native.Dispatcher(self._miss, plan=plan, key_div8=True,
                                                  names=[s.name for s in self.specs], kernel=self.name,
                                                  pass_device=True)   # the device is in the key
        return self._dispatcher

    def __call__(self, *args, **kw) -> None:
        """`k(*args, stream=None)`. Without keywords (and without KB_SIMULATE) one C call: the
        dispatcher's fastcall on this call's own argument tuple (see SimtKernel.__call__)."""
        if not kw and _SIM_KEY not in _ENV_DATA:
            (self._fast or self._fastcall())(*args)
            return
        if set(kw) - {"stream"}:
            raise TypeError(f"{self.name}: unexpected keyword argument(s) {', '.join(sorted(set(kw) - {'stream'}))}; "
                            f"a tile launch takes stream=")
        if simulating():
            return self.simulate(*args)
        d = self._dispatcher or self.dispatcher
        d(*args, stream=kw.get("stream"))

    def _fastcall(self) -> Any:
        self._fast = self.dispatcher.fastcall
        return self._fast

    def __repr__(self) -> str:
        return f"<tile.kernel {self.name}>"

    # -------------------------------------------------------------------------------- contract hooks
    # (bridge.testing): the contract of one specialisation without arrays, and the call that maps the
    # contract's flat arguments (constants left out) onto this kernel's parameters.
    _DEFAULT_TILES = {1: (256,), 2: (16, 16), 3: (4, 8, 8)}

    def _choice(self, dtypes=None, ndims=None, tile_shapes=None, constants=None) -> list:
        """Stand-in arguments for a stated choice: dtypes by TypeVar or parameter name, ndims and
        tile_shapes by parameter name (default tiles 256 / 16x16 / 4x8x8), constants by name."""
        dtypes, ndims = dict(dtypes or {}), dict(ndims or {})
        tiles, consts = dict(tile_shapes or {}), dict(constants or {})
        out = []
        for spec in self.specs:
            if spec.kind == "const":
                if spec.name not in consts:
                    raise TypeError(f"{self.name}: parameter '{spec.name}' is a tile.Constant: give "
                                    f"options={{'constants': {{{spec.name!r}: ...}}}}")
                out.append(consts[spec.name])
                continue
            dt = spec.dtype
            if dt is None or _is_typevar(dt):
                key = spec.name if dt is None else getattr(dt, "__name__", None) or getattr(dt, "name", None)
                if key not in dtypes and spec.name not in dtypes:
                    raise TypeError(f"{self.name}: parameter '{spec.name}' has a generic dtype: give "
                                    f"dtypes={{{key!r}: ...}}")
                dt = dtypes.get(key, dtypes.get(spec.name))
            npdt = np_dtype(as_scalar_type(dt) or as_scalar_type(str(dt)))
            if spec.kind == "scalar":
                out.append(npdt.type(1))
                continue
            tile = tiles.get(spec.name)
            nd = spec.ndim or ndims.get(spec.name) or (len(tile) if tile else 1)
            arr = np.zeros((1,) * nd, npdt)
            out.append(Partition(arr, tuple(tile or self._DEFAULT_TILES[nd])) if spec.kind == "partition" else arr)
        return out

    def launch_contract(self, *, dtypes=None, ndims=None, tile_shapes=None, constants=None,
                        arch: str = "sm_90"):
        """The LaunchContract of the specialisation for this choice, compiled without arrays: arrays
        of any strides and alignment (the most general contract of the kernel)."""
        from bridge.contract import LaunchContract
        from dsl.tile.compile import compile_tile
        args = self._choice(dtypes, ndims, tile_shapes, constants)
        facts = {s.name: {"layout": "any", "aligned16": False, "div8": False, "div16": False}
                 for s in self.specs if s.kind in ("array", "partition")}
        ck = compile_tile(self.tile_ir(*args), arch, num_warps=self.num_warps, facts=facts,
                          persistent=self.persistent)
        return LaunchContract.from_json(ck.contract_json)

    def contract_call(self, args, *, dtypes=None, ndims=None, tile_shapes=None, constants=None,
                      arch: str = "sm_90") -> tuple:
        """This kernel's call arguments for the contract's flat arguments `args` (partition arrays
        wrapped in their tile shape, constants put back)."""
        tiles, consts = dict(tile_shapes or {}), dict(constants or {})
        flat = iter(args)
        call = []
        for spec in self.specs:
            if spec.kind == "const":
                call.append(consts[spec.name])
            elif spec.kind == "partition":
                arr = next(flat)
                tile = tiles.get(spec.name) or self._DEFAULT_TILES[len(np.shape(arr))]
                call.append(Partition(arr, tuple(tile)))
            else:
                call.append(next(flat))
        return tuple(call)


def kernel(fn=None, *, num_warps: int | None = None, persistent: bool = False,
           lineinfo: bool | None = None, requires: Any = (), group_m: int | None = None,
           pdl: bool = False, cooperative: bool = False, cluster: Any = None, cluster_nonportable: bool = False,
           lowering: dict | None = None):
    """`@tile.kernel`, `@tile.kernel(num_warps=8)` or `@tile.kernel(persistent=True)` (a grid of
    about two blocks per SM, each looping over tiles t = block, block + grid, ...; the same tile
    semantics, see docs/tile.md). `lineinfo=` as for @simt.kernel (default on unless
    `KB_LINEINFO=0`). `requires=`: relations of the launch contract, the language and checks of
    @simt.kernel(requires=) (docs/architecture.md). `group_m=`: the order of the blocks over a 2-D
    tile grid, in groups of that many tile rows (1: row-major; default: 8 for GEMM kernels, which
    share operand panels in L2 that way, else 1). `pdl=`, `cooperative=`, `cluster=n` (and
    `cluster_nonportable=`): the launch features, as @simt.kernel's (docs/tile.md, "Launch features";
    the cluster is n consecutive tile blocks). `lowering=`: lowering switches this kernel fixes, over the
    environment's (dsl/tile/switches.py; e.g. {"loop_pipeline": "ws", "setmaxnreg": "240/24"}; docs/tile.md,
    "Per-kernel lowering"). The options are checked at the `def` (DslCompileError)."""
    from dsl.options import (OptionError, check_group_m, check_lineinfo, check_requires,
                             check_symbol_names, check_tile_options)

    def wrap(f) -> TileKernel:
        try:
            check_symbol_names(f)
            warps, persist = check_tile_options(num_warps, persistent)
            lines = check_lineinfo(lineinfo)
            rels = check_requires(requires, _relation_names(f))
            group = check_group_m(group_m)
            from dsl.tile.launch import check_tile_launch
            launch = check_tile_launch(pdl, cooperative, cluster, cluster_nonportable, persist)
            from dsl.tile.switches import check_lowering
            fixed = check_lowering(lowering)
        except OptionError as err:
            from dsl.frontend.decorator import raise_option_error
            raise_option_error(f, "tile.kernel", err)
        return TileKernel(f, warps, persist, lines, rels, group, launch, fixed)

    return wrap(fn) if fn is not None else wrap


def _relation_names(f) -> tuple[str, ...] | None:
    """The parameters a relation may name: every one but the tile.Constants (they are folded, not
    launch arguments); None when the annotations cannot be read here (the kernel's own error
    comes at its first use)."""
    from dsl.annotations import AnnotationError
    try:
        return tuple(s.name for s in parse_annotations(f, "tile", "kernel") if s.kind != "const")
    except AnnotationError:       # raised again by TileKernel, at the parameter
        return None
