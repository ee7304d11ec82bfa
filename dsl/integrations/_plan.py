"""What a generated op does with each kernel parameter; shared by the torch and JAX integrations.

An op is planned once, when it is created, from the kernel's declared parameters and its contract's
relations: read-only arrays and (unbound) scalars are op inputs; writable arrays (SIMT DisjointSlice,
tile Partition, tile.Atomic) are outputs the op allocates, or in-place inputs the caller passes (`mutates=`);
a tile Partition the body only loads is an input (loaded_only_partitions);
`static=` binds scalars/constants at creation. Each allocated output needs a shape (relations or
`out_shapes=`) and a dtype (its annotation, a TypeVar bound by an input, or `out_dtypes=`); when
neither determines it the op is refused there, with the kernel and the argument named.

Nothing here imports torch or jax: the frameworks hand in (dtype name, shape) facts of their arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from bridge import dtypes
from bridge import errors as E
from dsl.integrations._relations import ShapeRule, derive_shapes
from dsl.types import is_typevar

LONG = {row.name: row.long_name for row in dtypes.kernel_rows()}   # "f32" -> "float32"
DSL_DTYPES = frozenset(LONG)     # element types DSL kernels take (the dtype table's kernel rows)


@dataclass(frozen=True)
class Param:
    """One kernel parameter as an op sees it."""
    name: str
    index: int           # 0-based position in the kernel's signature (as error messages count)
    kind: str            # "array" | "partition" | "scalar" | "const"
    writable: bool
    dtype: Any           # dtype name ("f32"), a dsl.TypeVar, or None (any dtype)
    ndim: int | None     # declared ndim, None when any

    @property
    def is_array(self) -> bool:
        return self.kind in ("array", "partition")

    def where(self, kernel: str) -> str:
        return f"{kernel}: argument '{self.name}' (#{self.index})"


def _dtype_of_annotation(d: Any) -> Any:
    if d is None or is_typevar(d):
        return d
    name = getattr(d, "name", None)
    return name if isinstance(name, str) and name in DSL_DTYPES else None


def kernel_params(kernel: Any, api: str) -> tuple[str, list[Param], tuple[str, ...], bool]:
    """(kernel name, parameters, requires relations, is_tile) of a @simt.kernel or @tile.kernel, or of a
    bridge.Kernel / bridge.foreign kernel (from its contract: dsl/integrations/_foreign.py)."""
    from dsl.integrations._foreign import foreign_params, is_foreign
    from dsl.simt.kernel import SimtKernel
    from dsl.tile.host import TileKernel
    if is_foreign(kernel):
        return foreign_params(kernel, Param)
    if isinstance(kernel, SimtKernel):
        params = [Param(a.name, k, "array" if a.kind == "array" else "scalar", bool(a.writable),
                        _dtype_of_annotation(a.dtype), a.ndim if a.kind == "array" else None)
                  for k, a in enumerate(kernel.annotations)]
        return kernel.__name__, params, tuple(kernel.options.requires), False
    if isinstance(kernel, TileKernel):
        # written: partitions, and tile.Atomic arrays (any block adds into them: never a read-only input)
        params = [Param(s.name, k, s.kind, s.writable, _dtype_of_annotation(s.dtype), s.ndim)
                  for k, s in enumerate(kernel.specs)]
        return kernel.name, params, (), True
    raise TypeError(f"{api}: expected a @simt.kernel, a @tile.kernel, a bridge.Kernel or a bridge.foreign "
                    f"kernel, got {type(kernel).__name__}")


def standin_args(params: Sequence[Param], dtype_of: Mapping[str, Any], tiles: Mapping[str, Any],
                 scalars: Mapping[str, Any]) -> list[Any]:
    """A kernel's arguments as one-element NumPy stand-ins (partitions cut by `tiles`; f32 where `dtype_of`
    names no dtype; scalars from `scalars`), enough to build its tile IR or contract without device memory:
    what the plan and the integrations ask of a kernel's body (which partitions it stores, which outputs it
    reads)."""
    import numpy as np
    args: list[Any] = []
    for p in params:
        if not p.is_array:
            args.append(scalars[p.name])
            continue
        ndim = p.ndim if p.ndim is not None else len(tiles.get(p.name, (1,)))
        a = np.zeros((1,) * ndim, dtypes.to_numpy(dtype_of.get(p.name) or "f32"))
        if p.kind == "partition":
            from dsl.tile import partition
            a = partition(a, tiles[p.name])
        args.append(a)
    return args


def loaded_only_partitions(kernel: Any, params: Sequence[Param], static: Mapping[str, Any],
                           tiles: Mapping[str, Any]) -> frozenset[str]:
    """The tile kernel's partitions its body never stores (read-only in its contract: the input a global
    reduction's grid is cut from), so op inputs rather than outputs. Found in the tile IR of a stand-in
    specialisation: one tile of each partition (its `tiles=` value, or ones where that is a callable),
    f32 where a dtype is open; a kernel that does not build so keeps every partition an output (as before
    2026-12-07)."""
    from dsl.tile.ir import stored_partitions
    dtype_of = {p.name: p.dtype for p in params if isinstance(p.dtype, str)}
    tile_of = {p.name: tuple(t) if (t := tiles.get(p.name)) is not None and not callable(t) else (1,) * (p.ndim or 1)
               for p in params if p.kind == "partition"}
    scalars = {p.name: static[p.name] if p.name in static else dtypes.to_numpy(dtype_of.get(p.name) or "f32").type(0)
               for p in params if not p.is_array}
    try:
        stored = stored_partitions(kernel.tile_ir(*standin_args(params, dtype_of, tile_of, scalars)))
    except Exception:              # noqa: BLE001 - any failure to build keeps the conservative plan
        return frozenset()
    return frozenset(p.name for p in params if p.kind == "partition" and p.name not in stored)


Rule = Any   # a value, or a callable of the op's inputs (positionally, in op order)


def apply_rule(rule: Rule, inputs: Sequence[Any]) -> Any:
    return rule(*inputs) if callable(rule) else rule


def _names(value: Any, what: str, api: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise TypeError(f"{api}: {what}: expected a parameter name or a sequence of names, got "
                        f"{type(value).__name__}") from None
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"{api}: {what}: expected parameter names (str), got {n!r}")
    return names


def _mapping(value: Any, what: str, api: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{api}: {what}: expected a dict of parameter name -> value, got {type(value).__name__}")
    for n in value:
        if not isinstance(n, str):
            raise TypeError(f"{api}: {what}: expected parameter names (str) as keys, got {n!r}")
    return dict(value)


class OpPlan:
    """The roles of a kernel's parameters in a generated op, checked when the op is created."""

    def __init__(self, kernel: Any, api: str, *, mutates: Iterable[str] | str | None = None,
                 out_shapes: Mapping[str, Rule] | None = None, out_dtypes: Mapping[str, Any] | None = None,
                 static: Mapping[str, Any] | None = None, grid: Rule = None, block: Rule = None,
                 tiles: Mapping[str, Rule] | None = None) -> None:
        self.kernel = kernel
        self.api = api
        self.name, self.params, self.requires, self.is_tile = kernel_params(kernel, api)
        from dsl.integrations._foreign import is_foreign
        self.is_foreign = is_foreign(kernel)     # launched as compiled (no simulator; _foreign.py)
        mutated, self.static, tile_rules = (_names(mutates, "mutates", api), _mapping(static, "static", api),
                                            _mapping(tiles, "tiles", api))
        if self.is_tile:            # a partition the body only loads (a reduction's grid) is an input
            loaded = loaded_only_partitions(kernel, self.params, self.static, tile_rules) - set(mutated)
            self.params = [replace(p, writable=False) if p.name in loaded else p for p in self.params]
        self.by_name = {p.name: p for p in self.params}
        self.mutates = frozenset(self._check_names(mutated, "mutates", lambda p: p.writable, "writable"))
        self._check_names(tuple(self.static), "static", lambda p: p.kind in ("scalar", "const"),
                          "scalar or tile.Constant")
        for p in self.params:
            if p.kind == "const" and p.name not in self.static:
                raise E.ContractDefinitionError(
                    f"{api}: {p.where(self.name)}: a tile.Constant is compiled into the kernel; bind it "
                    f"when the op is created with static={{'{p.name}': value}}", kernel=self.name,
                    arg=p.index, arg_name=p.name)
        self.inputs = [p for p in self.params if (p.is_array and (not p.writable or p.name in self.mutates))
                       or (p.kind == "scalar" and p.name not in self.static)]
        self.outputs = [p for p in self.params if p.writable and p.name not in self.mutates]
        self.writable = [p for p in self.params if p.writable]
        self.grid, self.block = grid, block
        if self.is_tile and (grid is not None or block is not None):
            raise ValueError(f"{api}: {self.name}: a tile kernel's grid is its partitions' (tiles=) and its "
                             f"block is chosen by the compiler; grid=/block= are for SIMT kernels")
        self.tiles = self._plan_tiles(tile_rules)
        self.shape_rules, self.shape_order = self._plan_shapes(_mapping(out_shapes, "out_shapes", api))
        self.out_dtypes = self._plan_dtypes(_mapping(out_dtypes, "out_dtypes", api))

    # ------------------------------------------------------------------ creation-time checks
    def _check_names(self, names: Sequence[str], what: str, ok: Callable[[Param], bool], kind: str) -> Sequence[str]:
        for n in names:
            p = self.by_name.get(n)
            if p is None or not ok(p):
                allowed = [q.name for q in self.params if ok(q)]
                got = "not a parameter" if p is None else f"parameter #{p.index} is not {kind}"
                raise ValueError(f"{self.api}: {self.name}: {what}: '{n}' ({got}); {kind} parameters are: "
                                 f"{', '.join(allowed) or 'none'}")
        return names

    def _plan_tiles(self, tiles: dict[str, Rule]) -> dict[str, Rule]:
        if tiles and not self.is_tile:
            raise ValueError(f"{self.api}: {self.name}: tiles= is for tile kernels (tile.Partition parameters)")
        self._check_names(tuple(tiles), "tiles", lambda p: p.kind == "partition", "tile.Partition")
        for p in self.params:
            if p.kind == "partition" and p.name not in tiles:
                raise E.ContractDefinitionError(
                    f"{self.api}: {p.where(self.name)}: a tile.Partition needs its tile shape; give "
                    f"tiles={{'{p.name}': (tile extents...) or callable(*inputs)}}", kernel=self.name,
                    arg=p.index, arg_name=p.name)
        return tiles

    def _plan_shapes(self, given: dict[str, Rule]) -> tuple[dict[str, Any], list[str]]:
        self._check_names(tuple(given), "out_shapes", lambda p: p.writable and p.name not in self.mutates,
                          "an allocated output (writable, not in mutates)")
        arrays = [p.name for p in self.inputs if p.is_array]
        scalars = [p.name for p in self.params if p.kind in ("scalar", "const")]
        derived, order = derive_shapes(self.requires, {p.name: p.ndim for p in self.outputs if p.name not in given},
                                       arrays, scalars)
        rules: dict[str, Any] = dict(given)
        rules.update(derived)
        for p in self.outputs:
            if p.name not in rules:
                rel = "; ".join(self.requires) if self.requires else "none"
                raise E.ContractDefinitionError(
                    f"{self.api}: {p.where(self.name)}: the contract does not determine the shape of this "
                    f"output (relations: {rel}); give out_shapes={{'{p.name}': shape or callable(*inputs)}}, "
                    f"a relation such as \"{p.name}.shape == x.shape\", or pass it in with "
                    f"mutates=('{p.name}',)", kernel=self.name, arg=p.index, arg_name=p.name)
        return rules, [n for n in given if n not in derived] + order

    def _plan_dtypes(self, given: dict[str, Any]) -> dict[str, Any]:
        from bridge import dtypes
        self._check_names(tuple(given), "out_dtypes", lambda p: p.writable and p.name not in self.mutates,
                          "an allocated output (writable, not in mutates)")
        out: dict[str, Any] = {}
        bound_by_inputs = {p.dtype for p in self.inputs if p.is_array and is_typevar(p.dtype)}
        for p in self.outputs:
            if p.name in given:
                try:
                    name = dtypes.normalize(given[p.name], arg=p.name)
                except E.DTypeError as exc:
                    raise E.DTypeError(f"{self.api}: {p.where(self.name)}: out_dtypes: {exc}", kernel=self.name,
                                       arg=p.index, arg_name=p.name) from None
                if name not in DSL_DTYPES or (isinstance(p.dtype, str) and p.dtype != name):
                    want = LONG.get(p.dtype, "a DSL element type") if isinstance(p.dtype, str) else "a DSL element type"
                    raise E.DTypeError(f"{self.api}: {p.where(self.name)}: out_dtypes: expected {want}, got "
                                       f"{LONG.get(name, name)}", kernel=self.name, arg=p.index, arg_name=p.name)
                out[p.name] = name
            elif isinstance(p.dtype, str) or (is_typevar(p.dtype) and p.dtype in bound_by_inputs):
                out[p.name] = p.dtype
            else:
                what = f"its dtype {p.dtype!r} is bound by no input array" if is_typevar(p.dtype) else \
                    "it declares no dtype"
                raise E.ContractDefinitionError(
                    f"{self.api}: {p.where(self.name)}: {what}; give out_dtypes={{'{p.name}': dtype}}",
                    kernel=self.name, arg=p.index, arg_name=p.name)
        return out

    # ------------------------------------------------------------------ call-time
    def split(self, args: Sequence[Any]) -> dict[str, Any]:
        """The op's positional inputs by parameter name (count checked)."""
        if len(args) != len(self.inputs):
            raise E.ArgumentCountError(f"{self.name}: expected {len(self.inputs)} inputs "
                                       f"({', '.join(p.name for p in self.inputs)}), got {len(args)}",
                                       kernel=self.name)
        return {p.name: a for p, a in zip(self.inputs, args)}

    def bind(self, facts: Mapping[str, tuple[str | None, str, tuple]]) -> dict[Any, str]:
        """Check the input arrays' dtypes and ndims (typed errors naming the argument) and bind TypeVars.

        facts: input array name -> (dtype name or None when the DSL has no such type, its printable
        name, shape)."""
        binding: dict[Any, str] = {}
        for p in self.inputs:
            if not p.is_array:
                continue
            dt, text, shape = facts[p.name]
            info = {"kernel": self.name, "arg": p.index, "arg_name": p.name}
            if dt is None or dt not in DSL_DTYPES:
                raise E.DTypeError(f"{p.where(self.name)}: arrays of dtype {text} are not supported by the DSL",
                                   **info)
            want = binding.setdefault(p.dtype, dt) if is_typevar(p.dtype) else p.dtype
            if want is not None and dt != want:
                bound = " (bound by an earlier argument)" if is_typevar(p.dtype) else ""
                raise E.DTypeError(f"{p.where(self.name)}: expected {LONG[want]} array{bound}, got {LONG[dt]} "
                                   f"array of shape {tuple(shape)}", **info)
            if p.ndim is not None and len(shape) != p.ndim:
                raise E.NdimError(f"{p.where(self.name)}: expected a {p.ndim}-D array, got a {len(shape)}-D "
                                  f"array of shape {tuple(shape)}", **info)
        return binding

    def output_dtype(self, p: Param, binding: Mapping[Any, str]) -> str:
        d = self.out_dtypes[p.name]
        return binding[d] if is_typevar(d) else d

    def output_shapes(self, named: Mapping[str, Any], shapes: Mapping[str, tuple],
                      inputs: Sequence[Any]) -> dict[str, tuple]:
        """Shapes of the allocated outputs. named: the op's inputs by name; shapes: input array shapes."""
        env: dict[str, Any] = dict(shapes)
        for p in self.params:
            if p.kind in ("scalar", "const"):
                env[p.name] = self.static[p.name] if p.name in self.static else named.get(p.name)
        out: dict[str, tuple] = {}
        for name in self.shape_order:
            rule = self.shape_rules[name]
            p = self.by_name[name]
            if isinstance(rule, ShapeRule):
                shape = rule.shape(env, p.ndim)
            else:
                shape = apply_rule(rule, inputs)
                shape = (shape,) if isinstance(shape, int) else tuple(shape)
            if p.ndim is not None and len(shape) != p.ndim:
                raise E.NdimError(f"{p.where(self.name)}: the output shape rule gave {shape}, a "
                                  f"{len(shape)}-D shape; the kernel declares {p.ndim}-D", kernel=self.name,
                                  arg=p.index, arg_name=p.name)
            for s in shape:
                if isinstance(s, int) and s < 0:
                    raise E.ShapeRelationError(f"{p.where(self.name)}: the output shape rule gave {shape}, "
                                               f"which has a negative extent", kernel=self.name, arg=p.index,
                                               arg_name=p.name)
            out[name] = shape
            env[name] = shape
        return out

    def tile_shape(self, p: Param, inputs: Sequence[Any]) -> tuple[int, ...]:
        t = apply_rule(self.tiles[p.name], inputs)
        return (t,) if isinstance(t, int) else tuple(t)

    def kernel_args(self, named: Mapping[str, Any], outputs: Mapping[str, Any], inputs: Sequence[Any],
                    partition: Callable[[Any, tuple], Any] | None = None) -> list[Any]:
        """The kernel's arguments in signature order: inputs, outputs, static values; for tile kernels
        partitions built by `partition(array, tile_shape)` (tile.partition)."""
        args: list[Any] = []
        for p in self.params:
            if p.name in self.static:
                v = self.static[p.name]
            elif p.name in outputs:
                v = outputs[p.name]
            else:
                v = named[p.name]
            if p.kind == "partition":
                assert partition is not None
                v = partition(v, self.tile_shape(p, inputs))
            args.append(v)
        return args

    def launch_config(self, inputs: Sequence[Any]) -> tuple[Any, Any]:
        return apply_rule(self.grid, inputs), apply_rule(self.block, inputs)
