"""Host side of the tile model: `tile.partition(array, tile_shape)`, the `@tile.kernel` object, argument
specialisation, simulation on NumPy arrays and launch through the bridge.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

import numpy as np

from bridge.errors import (ArgumentCountError, ArgumentKindError, DTypeError, NdimError,
                           ShapeRelationError)

from dsl.ir.types import ScalarType
from dsl.tile import ir as T
from dsl.tile.api import _Annot
from dsl.tile.frontend import TileFrontend
from dsl.tile.sim import simulate as _simulate
from dsl.tile.types import (ArrayParamType, ConstParamType, PartitionParamType, ScalarParamType,
                            as_scalar_type, is_pow2, np_dtype, scalar_of_numpy)


def _dtype_of(array: object) -> ScalarType | None:
    dt = getattr(array, "dtype", None)
    if dt is None:
        return None
    st = as_scalar_type(dt)
    if st is None:
        st = as_scalar_type(str(dt).replace("torch.", ""))
    return st


def _is_c_contiguous(arr: object) -> bool:
    """C-contiguity of NumPy, CuPy, torch or bridge arrays without copying anything."""
    flag = getattr(arr, "is_c_contiguous", None)
    if isinstance(flag, bool):
        return flag
    flags = getattr(arr, "flags", None)
    if flags is not None:
        try:
            return bool(flags["C_CONTIGUOUS"])
        except (KeyError, TypeError):
            return bool(getattr(flags, "c_contiguous", False))
    is_contig = getattr(arr, "is_contiguous", None)
    if callable(is_contig):
        return bool(is_contig())
    cai = getattr(arr, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return cai.get("strides") is None
    return False


def _data_pointer(arr: object) -> int | None:
    """Address of the first element (NumPy, CUDA Array Interface producers, bridge arrays)."""
    ptr = getattr(arr, "ptr", None)           # bridge.Array (also for dtypes CAI cannot name)
    if isinstance(ptr, int):
        return ptr
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        try:
            iface = getattr(arr, attr, None)
        except Exception:  # noqa: BLE001 - e.g. torch CPU tensors raise for the CUDA interface
            iface = None
        if isinstance(iface, dict) and "data" in iface:
            return int(iface["data"][0] or 0)
    data_ptr = getattr(arr, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    return None


class Partition:
    """`tile.partition(array, tile_shape)`: `array` cut into tiles of `tile_shape` (powers of two).

    As a kernel argument it defines the grid (ceil(shape / tile) blocks per axis) and gives tile
    block b write access to tile b only. `tile.Partition[T, ndim]` is the matching annotation.
    """

    def __init__(self, array: object, tile_shape: tuple[int, ...] | int) -> None:
        if isinstance(tile_shape, int):
            tile_shape = (tile_shape,)
        shape = getattr(array, "shape", None)
        if shape is None:
            raise TypeError(f"tile.partition: argument 'array': expected an array, got "
                            f"{type(array).__name__}")
        shape = tuple(int(s) for s in shape)
        if not isinstance(tile_shape, tuple) or len(tile_shape) != len(shape) or \
                not all(isinstance(t, int) and is_pow2(t) for t in tile_shape):
            raise ValueError(f"tile.partition: argument 'tile_shape': expected a tuple of {len(shape)} "
                             f"powers of two (one per array axis), got {tile_shape!r}")
        if _dtype_of(array) is None:
            raise TypeError(f"tile.partition: argument 'array': unsupported dtype "
                            f"{getattr(array, 'dtype', None)}")
        self.array = array
        self.tile_shape = tile_shape
        self.shape = shape

    def __class_getitem__(cls, item) -> _Annot:
        return _Annot("Partition", item if isinstance(item, tuple) else (item,))

    @property
    def grid(self) -> tuple[int, ...]:
        """Tile blocks per axis: ceil(shape[k] / tile_shape[k])."""
        return tuple(-(-s // t) for s, t in zip(self.shape, self.tile_shape))

    @property
    def num_tiles(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    def __repr__(self) -> str:
        return f"tile.Partition(shape={self.shape}, tile_shape={self.tile_shape}, grid={self.grid})"


def partition(array: object, tile_shape: tuple[int, ...] | int) -> Partition:
    """Partition `array` into tiles of `tile_shape`; pass the result as a tile.Partition argument."""
    return Partition(array, tile_shape)


@dataclass(frozen=True)
class _ParamSpec:
    name: str
    kind: str            # "array" | "partition" | "scalar" | "const"
    dtype: object        # annotation's dtype (ScalarType, TypeVar, or None)
    ndim: int | None


def _is_typevar(obj: object) -> bool:
    from dsl.types import is_typevar
    return is_typevar(obj)


def _param_specs(pyfunc) -> list[_ParamSpec]:
    sig = inspect.signature(pyfunc)
    try:
        hints = dict(pyfunc.__annotations__)
    except AttributeError:  # pragma: no cover
        hints = {}
    specs = []
    for name in sig.parameters:
        ann = hints.get(name, inspect.Parameter.empty)
        if isinstance(ann, str):
            ann = eval(ann, pyfunc.__globals__)  # noqa: S307 - the user's own annotation text
        if ann is inspect.Parameter.empty:
            raise TypeError(f"{pyfunc.__name__}: parameter '{name}' needs an annotation "
                            f"(tile.Array[T], tile.Partition[T], a scalar type or tile.Constant)")
        if ann is Partition:
            ann = _Annot("Partition")
        if isinstance(ann, _Annot):
            dtype = ann.args[0] if ann.args else None
            ndim = ann.args[1] if len(ann.args) > 1 else None
            kind = {"Array": "array", "Partition": "partition", "Constant": "const"}[ann.kind]
            if kind != "const" and dtype is not None and not _is_typevar(dtype) \
                    and as_scalar_type(dtype) is None:
                raise TypeError(f"{pyfunc.__name__}: parameter '{name}': {dtype!r} is not a dtype")
            specs.append(_ParamSpec(name, kind, None if kind == "const" else dtype, ndim))
            continue
        st = as_scalar_type(ann) if not _is_typevar(ann) else None
        if st is None:
            raise TypeError(f"{pyfunc.__name__}: parameter '{name}': unsupported annotation {ann!r}")
        specs.append(_ParamSpec(name, "scalar", st, None))
    return specs


class TileKernel:
    """A @tile.kernel: specialises on argument dtypes/ndims/tile shapes/constants at first use."""

    def __init__(self, pyfunc, num_warps: int | None = None, persistent: bool = False) -> None:
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.num_warps = num_warps
        self.persistent = persistent
        self.specs = _param_specs(pyfunc)
        self._ir_cache: dict[tuple, T.TileFunction] = {}      # signature → tile IR (explicit cache)
        self._gpu_cache: dict[tuple, object] = {}             # (signature, arch) → compiled kernel
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    # -------------------------------------------------------------------------------- signatures
    def signature(self, args: tuple) -> tuple:
        if len(args) != len(self.specs):
            raise ArgumentCountError(f"{self.name}: expected {len(self.specs)} arguments "
                                     f"({', '.join(s.name for s in self.specs)}), got {len(args)}",
                                     kernel=self.name)
        bindings: dict[object, ScalarType] = {}
        sig: list = []
        for i, (spec, arg) in enumerate(zip(self.specs, args)):
            where = f"{self.name}: argument '{spec.name}' (#{i})"
            info = {"kernel": self.name, "arg": i, "arg_name": spec.name}
            if spec.kind == "const":
                try:
                    hash(arg)
                except TypeError:
                    raise TypeError(f"{where}: a tile.Constant must be hashable, got {arg!r}") from None
                sig.append(ConstParamType(arg))
                continue
            if spec.kind == "scalar":
                if not isinstance(arg, (int, float, bool, np.generic)):
                    raise ArgumentKindError(f"{where}: expected a {spec.dtype} scalar, got "
                                            f"{type(arg).__name__}", **info)
                sig.append(ScalarParamType(spec.dtype))  # type: ignore[arg-type]
                continue
            if spec.kind == "partition":
                if not isinstance(arg, Partition):
                    raise ArgumentKindError(f"{where}: expected tile.partition(array, tile_shape), "
                                            f"got {type(arg).__name__}", **info)
                shape, array = arg.shape, arg.array
            else:
                if isinstance(arg, Partition):
                    raise ArgumentKindError(f"{where}: expected a tile.Array (a plain array), got a "
                                            f"Partition", **info)
                shape = getattr(arg, "shape", None)
                array = arg
                if shape is None:
                    raise ArgumentKindError(f"{where}: expected an array, got {type(arg).__name__}",
                                            **info)
            dt = _dtype_of(array)
            want = spec.dtype
            if _is_typevar(want):
                want = bindings.setdefault(want, dt)  # type: ignore[arg-type]
            want_st = as_scalar_type(want) if want is not None else dt
            if dt != want_st:
                raise DTypeError(f"{where}: expected {want_st} array, got {getattr(array, 'dtype', None)} "
                                 f"array of shape {tuple(shape)}", **info)
            ndim = len(shape)
            if spec.ndim is not None and ndim != spec.ndim:
                raise NdimError(f"{where}: expected a {spec.ndim}-d array, got shape {tuple(shape)}",
                                **info)
            if spec.kind == "partition":
                sig.append(PartitionParamType(dt, ndim, arg.tile_shape))  # type: ignore[arg-type]
            else:
                sig.append(ArrayParamType(dt, ndim))  # type: ignore[arg-type]
        return tuple(sig)

    def tile_ir(self, *args) -> T.TileFunction:
        """The tile IR of the specialisation for `args` (arrays may be NumPy stand-ins)."""
        sig = self.signature(args)
        fn = self._ir_cache.get(sig)
        if fn is None:
            fn = TileFrontend(self.pyfunc, list(sig), self.name).build()
            self._ir_cache[sig] = fn
        return fn

    def grid(self, args: tuple) -> tuple[int, ...]:
        """Tile blocks per axis, from the partitions (all partitions must agree)."""
        parts = [(s.name, a) for s, a in zip(self.specs, args) if isinstance(a, Partition)]
        if not parts:
            raise TypeError(f"{self.name}: no tile.Partition argument: the partition defines the grid")
        name0, p0 = parts[0]
        for name, p in parts[1:]:
            if p.grid != p0.grid:
                raise ShapeRelationError(
                    f"{self.name}: argument '{name}': partition grid {p.grid} differs from '{name0}' "
                    f"grid {p0.grid}; every tile block must own one tile of each", kernel=self.name,
                    arg_name=name)
        return p0.grid

    # -------------------------------------------------------------------------------- CPU
    def simulate(self, *args) -> None:
        """Run on the CPU: NumPy arrays in, partitions of NumPy arrays written in place."""
        fn = self.tile_ir(*args)
        grid = self.grid(args)
        bound: dict[int, object] = {}
        for i, (spec, arg) in enumerate(zip(self.specs, args)):
            if spec.kind == "const":
                continue
            if spec.kind == "scalar":
                bound[i] = np.asarray(arg).astype(np_dtype(spec.dtype))  # type: ignore[arg-type]
                continue
            arr = arg.array if isinstance(arg, Partition) else arg
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{self.name}: argument '{spec.name}' (#{i}): simulate() needs NumPy "
                                f"arrays, got {type(arr).__name__}")
            if spec.kind == "partition" and not arr.flags.writeable:
                raise ValueError(f"{self.name}: argument '{spec.name}' (#{i}): the partition's array is "
                                 f"read-only")
            if scalar_of_numpy(arr.dtype) is None:
                raise TypeError(f"{self.name}: argument '{spec.name}' (#{i}): unsupported dtype {arr.dtype}")
            bound[i] = arr
        if 0 in grid:
            return
        _simulate(fn, bound, grid)

    def simulate_lowered(self, *args, num_warps: int | None = None, blocks: int | None = None) -> None:
        """Run the GPU lowering (the SIMT IR the backend compiles) on the SIMT CPU simulator: checks
        the thread mapping, shared-memory staging and warp reductions without a GPU. `blocks`: the
        grid of a persistent kernel (default: one block per tile)."""
        from dsl.sim.launch import run
        from dsl.tile.lower import lower, pick_threads
        fn = self.tile_ir(*args)
        threads = pick_threads(fn, num_warps if num_warps is not None else self.num_warps)
        # inline-PTX paths (tensor cores) have no CPU semantics: simulate the portable lowering
        facts = {k: dict(v, aligned16=False) for k, v in self.facts(args).items()}
        simt_fn = lower(fn, threads, self.name, facts, persistent=self.persistent)
        flat = [a.array if isinstance(a, Partition) else a
                for spec, a in zip(self.specs, args) if spec.kind != "const"]
        specs = [s for s in self.specs if s.kind != "const"]
        flat = [np.asarray(a).astype(np_dtype(s.dtype))[()]  # type: ignore[arg-type]
                if s.kind == "scalar" else a for s, a in zip(specs, flat)]
        total = 1
        for g in self.grid(args):
            total *= g
        if self.persistent and blocks is not None:
            total = min(total, blocks)
        if total:
            run(simt_fn, flat, (total, 1, 1), (threads, 1, 1))

    # -------------------------------------------------------------------------------- GPU
    def ptx(self, *args, arch: str = "sm_90") -> str:
        """PTX of the specialisation for `args` (NumPy stand-ins are fine; no GPU needed)."""
        return self.compile(args, arch).ptx

    def facts(self, args: tuple) -> dict[str, dict]:
        """Per array parameter, what the compiler may specialise on (like Triton): C-contiguity,
        16-byte alignment of the data pointer, last extent divisible by 8."""
        out = {}
        for spec, arg in zip(self.specs, args):
            if spec.kind in ("array", "partition"):
                arr = arg.array if isinstance(arg, Partition) else arg
                shape = tuple(getattr(arr, "shape", ()))
                ptr = _data_pointer(arr)
                out[spec.name] = {"layout": "C" if _is_c_contiguous(arr) else "any",
                                  "aligned16": ptr is not None and ptr % 16 == 0,
                                  "div8": bool(shape) and shape[-1] % 8 == 0}
        return out

    def layouts(self, args: tuple) -> dict[str, str]:
        return {k: v["layout"] for k, v in self.facts(args).items()}

    def compile(self, args: tuple, arch: str):
        """Compile (cached per signature, layouts and arch) → dsl.tile.compile.CompiledTile."""
        from dsl.tile.compile import compile_tile
        sig = self.signature(args)
        facts = self.facts(args)
        key = (sig, tuple((k, tuple(sorted(v.items()))) for k, v in sorted(facts.items())), arch)
        ck = self._gpu_cache.get(key)
        if ck is None:
            ck = compile_tile(self.tile_ir(*args), arch, num_warps=self.num_warps, facts=facts,
                              persistent=self.persistent)
            self._gpu_cache[key] = ck
        return ck

    def __call__(self, *args, stream: object = None) -> None:
        if os.environ.get("KB_SIMULATE") == "1":
            return self.simulate(*args)
        from dsl.tile.launch import launch
        return launch(self, args, stream)

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
        facts = {s.name: {"layout": "any", "aligned16": False, "div8": False}
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


def kernel(fn=None, *, num_warps: int | None = None, persistent: bool = False):
    """`@tile.kernel`, `@tile.kernel(num_warps=8)` or `@tile.kernel(persistent=True)` (a grid of
    about two blocks per SM, each looping over tiles t = block, block + grid, ...; the same tile
    semantics, see docs/tile.md). The options are checked at the `def` (DslCompileError)."""
    from dsl.options import OptionError, check_symbol_names, check_tile_options

    def wrap(f) -> TileKernel:
        try:
            check_symbol_names(f)
            warps, persist = check_tile_options(num_warps, persistent)
        except OptionError as err:
            from dsl.frontend.decorator import raise_option_error
            raise_option_error(f, "tile.kernel", err)
        return TileKernel(f, warps, persist)

    return wrap(fn) if fn is not None else wrap
