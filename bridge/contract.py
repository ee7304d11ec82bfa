"""Building launch contracts from Python (users, `load_module(contracts=...)`, the DSL).

Why a thin builder: the schema and every check live in ONE C++ validator
(cpp/include/kernelbridge/contract.hpp, bound as `bridge._native.Contract`). This module only spells
Python values (dtype objects, ints, tuples) as the JSON of docs/architecture.md and parses it at
construction, so a malformed contract fails where it is written, with `ContractDefinitionError`.
`native_contract` is the one place any contract value (LaunchContract, JSON text, a mapping) becomes
the parsed `_native.Contract` that modules, kernels and the simulator's validator hold.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from bridge import _native
from bridge import dtypes as _dtypes
from bridge.errors import ContractDefinitionError, DTypeError

__all__ = ["ArgSpec", "LaunchContract"]

_LAYOUTS = {"any": "any", "C": "C", "F": "F", "c": "C", "f": "F"}
_ACCESS = ("read", "write", "readwrite", "atomic")   # atomic: written only through atomics (tile.Atomic)
_ABIS = ("pointer", "view")


def _dtype_name(dtype: Any, arg: str) -> str:
    """Contract spelling ("f32") of a name, NumPy/ml_dtypes/torch dtype or DSL type with `.name`."""
    if isinstance(dtype, str) and dtype == "any":
        return "any"
    try:
        return _dtypes.normalize(dtype, arg=arg)
    except DTypeError:
        name = getattr(dtype, "name", None)
        if isinstance(name, str) and not isinstance(dtype, str):
            try:
                return _dtypes.normalize(name, arg=arg)
            except DTypeError:
                pass
    raise ContractDefinitionError(
        f"argument '{arg}': expected a dtype ({', '.join(_dtypes.NAMES)}, 'any', or a NumPy/ml_dtypes/torch "
        f"dtype of one of them), got {dtype!r}", arg_name=arg)


def _dims(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    """An int or 1..3 ints → a 3-tuple padded with 1."""
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise ContractDefinitionError(f"{what}: expected an int or a tuple of 1 to 3 ints, got {value!r}")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _flag(value: Any, kernel: str, what: str) -> bool:
    """A contract's True/False option (pdl, cooperative, cluster_nonportable)."""
    if not isinstance(value, bool):
        raise ContractDefinitionError(f"{kernel}: invalid contract: {what}: expected True or False, got {value!r}",
                                      kernel=kernel)
    return value


@dataclass(frozen=True)
class ArgSpec:
    """One declared kernel argument; build with `ArgSpec.array(...)` or `ArgSpec.scalar(...)`."""

    name: str
    kind: str
    dtype: str
    ndim: int = -1
    layout: str = "any"
    access: str = "read"
    align: int = 0
    abi: str = "view"
    optional: bool = False

    @classmethod
    def array(cls, name: str, dtype: Any, ndim: int = 1, layout: str = "any", access: str = "read",
              align: int = 0, abi: str = "view", optional: bool = False) -> "ArgSpec":
        """An array argument. layout: any/C/F; access: read/write/readwrite/atomic; abi: view/pointer.
        optional=True: a launch may pass None for it (a null pointer and zero extents reach the
        kernel, which must test it; relations naming it are skipped at that launch)."""
        if layout not in _LAYOUTS:
            raise ContractDefinitionError(f"argument '{name}': layout: expected one of any, C, F, got {layout!r}",
                                          arg_name=name)
        if access not in _ACCESS:
            raise ContractDefinitionError(
                f"argument '{name}': access: expected one of {', '.join(_ACCESS)}, got {access!r}", arg_name=name)
        if abi not in _ABIS:
            raise ContractDefinitionError(f"argument '{name}': abi: expected one of {', '.join(_ABIS)}, got {abi!r}",
                                          arg_name=name)
        if not isinstance(optional, bool):
            raise ContractDefinitionError(f"argument '{name}': optional: expected True or False, got {optional!r}",
                                          arg_name=name)
        return cls(name, "array", _dtype_name(dtype, name), ndim, _LAYOUTS[layout], access, align, abi, optional)

    @classmethod
    def scalar(cls, name: str, dtype: Any) -> "ArgSpec":
        """A scalar argument, passed by value in its dtype's size."""
        return cls(name, "scalar", _dtype_name(dtype, name))

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "scalar":
            return {"name": self.name, "kind": "scalar", "dtype": self.dtype}
        d = {"name": self.name, "kind": "array", "dtype": self.dtype, "ndim": self.ndim, "layout": self.layout,
             "align": self.align, "access": self.access, "abi": self.abi}
        if self.optional:           # only when set: other contracts keep their JSON text
            d["optional"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ArgSpec":
        if d.get("kind") == "scalar":
            return cls.scalar(d["name"], d["dtype"])
        return cls.array(d["name"], d["dtype"], ndim=d.get("ndim", -1), layout=d.get("layout", "any"),
                         access=d.get("access", "read"), align=d.get("align", 0), abi=d.get("abi", "pointer"),
                         optional=d.get("optional", False))


class LaunchContract:
    """What a kernel requires of a launch; parsed (and so checked) by the native validator at construction.

    block: int or tuple = exact block; launch_bounds: max threads per block; shared_mem: exact dynamic
    bytes or ("max", n); requires: relations such as "len(a) == len(out)"; inplace: pairs of argument
    names allowed to overlap (relations may also name the resolved launch: grid.x|y|z, block.x|y|z,
    checked once the grid is known, e.g. "grid.x == len(partials)"); grid_from: the array whose shape derives the grid when none is given —
    one thread per element (`per_thread` elements per thread along each axis), or with `grid_tile`
    one block per tile of that shape (grid.x = number of tiles, at most `max_blocks_per_sm` * SMs
    when that is > 0). strict_domain: the kernel's threads own elements by their `domain`-D index, so
    a launch must have grid and block extent 1 on every other axis (DSL kernels that write a
    DisjointSlice at the ThreadIndex or in chunk loops set it).

    Launch features (docs/architecture.md "Launch features"; launched with cuLaunchKernelEx attributes):
    pdl: the kernel executes `griddepcontrol.wait` before reading anything a predecessor wrote, so it is
    launched with programmatic stream serialization on sm_90+ (normally elsewhere); cooperative: a
    grid-wide sync kernel, refused when its grid is larger than what can be co-resident; cluster: the
    thread-block cluster dims (an int or 1..3 ints; at most 8 blocks, 16 with cluster_nonportable).
    """

    def __init__(self, kernel: str, args: Iterable[ArgSpec], domain: int = 1,
                 block: int | Sequence[int] | None = None, launch_bounds: int | None = None,
                 shared_mem: int | tuple[str, int] = 0, min_cc: int = 0, requires: Iterable[str] = (),
                 inplace: Iterable[Sequence[str]] = (), grid_from: str | None = None,
                 per_thread: int | Sequence[int] = (1, 1, 1),
                 fault_sites: Iterable[Mapping[str, Any]] = (), grid_tile: Sequence[int] | None = None,
                 max_blocks_per_sm: int = 0, strict_domain: bool = False, pdl: bool = False,
                 cooperative: bool = False, cluster: int | Sequence[int] | None = None,
                 cluster_nonportable: bool = False) -> None:
        self.kernel = kernel
        self.args = tuple(args)
        for k, a in enumerate(self.args):
            if not isinstance(a, ArgSpec):
                raise ContractDefinitionError(
                    f"{kernel}: invalid contract: args[{k}]: expected an ArgSpec, got {type(a).__name__}", kernel=kernel)
        self.domain = domain
        self.strict_domain = strict_domain
        self.block = None if block is None else _dims(block, f"{kernel}: block")
        if block is not None and launch_bounds is not None:
            raise ContractDefinitionError(f"{kernel}: invalid contract: give block (exact) or launch_bounds, not both",
                                          kernel=kernel)
        self.launch_bounds = launch_bounds
        if isinstance(shared_mem, tuple):
            if len(shared_mem) != 2 or shared_mem[0] != "max":
                raise ContractDefinitionError(
                    f"{kernel}: invalid contract: shared_mem: expected bytes or ('max', bytes), got {shared_mem!r}",
                    kernel=kernel)
            self.shared_mem: int | tuple[str, int] = ("max", shared_mem[1])
        else:
            self.shared_mem = shared_mem
        self.min_cc = min_cc
        self.requires = tuple(requires) if not isinstance(requires, str) else (requires,)
        self.inplace = tuple(tuple(p) for p in inplace)
        self.grid_from = grid_from
        self.per_thread = _dims(per_thread, f"{kernel}: per_thread")
        self.grid_tile = None if grid_tile is None else tuple(grid_tile)
        self.max_blocks_per_sm = max_blocks_per_sm
        self.fault_sites = tuple(dict(s) for s in fault_sites)
        self.pdl = _flag(pdl, kernel, "pdl")
        self.cooperative = _flag(cooperative, kernel, "cooperative")
        self.cluster = None if cluster is None else _dims(cluster, f"{kernel}: invalid contract: cluster")
        self.cluster_nonportable = _flag(cluster_nonportable, kernel, "cluster_nonportable")
        self._native = None
        self.native()  # parse now: a malformed contract fails here, not at the first launch

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"version": 1, "kernel": self.kernel, "domain": self.domain}
        if self.strict_domain:
            d["strict_domain"] = self.strict_domain
        if self.block is not None:
            d["block"] = {"exact": list(self.block)}
        elif self.launch_bounds is not None:
            d["block"] = {"max_threads": self.launch_bounds}
        if isinstance(self.shared_mem, tuple):
            d["dynamic_smem"] = {"max": self.shared_mem[1]}
        else:
            d["dynamic_smem"] = {"exact": self.shared_mem}
        d["min_cc"] = self.min_cc
        d["args"] = [a.to_dict() for a in self.args]
        d["requires"] = list(self.requires)
        d["inplace"] = [list(p) for p in self.inplace]
        if self.grid_from is not None and self.grid_tile is not None:
            d["grid_from"] = {"arg": self.grid_from, "tile": list(self.grid_tile)}
            if self.max_blocks_per_sm:
                d["grid_from"]["max_blocks_per_sm"] = self.max_blocks_per_sm
        elif self.grid_from is not None:
            d["grid_from"] = {"arg": self.grid_from, "per_thread": list(self.per_thread)}
        if self.fault_sites:
            d["fault_sites"] = [dict(s) for s in self.fault_sites]
        for key in ("pdl", "cooperative"):       # only when set: other contracts keep their JSON text
            if getattr(self, key):
                d[key] = True
        if self.cluster is not None:
            d["cluster"] = list(self.cluster)
        if self.cluster_nonportable:
            d["cluster_nonportable"] = True
        return d

    def to_json(self) -> str:
        """The contract as schema-v1 JSON text (what modules embed and the native side parses)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "LaunchContract":
        """Parse schema-v1 JSON (validated natively first, so errors name the JSON field)."""
        c = _native.Contract(text)  # raises ContractDefinitionError for malformed text
        block = c.block_exact
        smem_kind, smem = c.dynamic_smem
        pairs = c.inplace
        out = cls(c.kernel, [ArgSpec.from_dict(a) for a in c.args], domain=c.domain, block=block,
                  launch_bounds=c.max_threads or None, shared_mem=smem if smem_kind == "exact" else ("max", smem),
                  min_cc=c.min_cc, requires=c.requires, inplace=pairs, grid_from=c.grid_from,
                  per_thread=c.per_thread, fault_sites=c.fault_sites, grid_tile=c.grid_tile,
                  max_blocks_per_sm=c.max_blocks_per_sm, strict_domain=c.strict_domain, pdl=c.pdl,
                  cooperative=c.cooperative, cluster=c.cluster, cluster_nonportable=c.cluster_nonportable)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchContract":
        """The inverse of `to_dict` (the mapping is parsed natively first, like `from_json`)."""
        return cls.from_json(json.dumps(dict(d), separators=(",", ":")))

    def native(self) -> Any:
        """The parsed `bridge._native.Contract` (cached: contracts are immutable once built)."""
        if self._native is None:
            self._native = _native.Contract(self.to_json())
        return self._native

    def validate(self, args: Sequence[Any], grid: Any = None, block: Any = None, smem: int | None = None,
                 limits: Any = None, attrs: Any = None,
                 occupancy: Any = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Check a launch (args: `_native.ArrayDesc` or scalars); returns the resolved (grid, block).
        occupancy: None (skip the occupancy checks of cooperative grids and clusters) or an object with
        `blocks_per_sm(threads, smem)` and `active_clusters(grid, block, smem, cluster)`."""
        return _native.validate(self.native(), list(args), grid=grid, block=block, smem=smem, limits=limits,
                                attrs=attrs, occupancy=occupancy)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LaunchContract) and self.native().to_json() == other.native().to_json()

    def __hash__(self) -> int:
        return hash(self.native().to_json())

    def __repr__(self) -> str:
        return f"LaunchContract({self.to_json()})"


def native_contract(value: Any, kernel: str) -> Any:
    """A `_native.Contract` from a LaunchContract, a `_native.Contract` or contract JSON text."""
    if isinstance(value, _native.Contract):
        return value
    for attr in ("native", "_native"):
        inner = getattr(value, attr, None)
        if isinstance(inner, _native.Contract):
            return inner
    if isinstance(value, Mapping):
        value = json.dumps(dict(value))
    elif not isinstance(value, str) and hasattr(value, "to_json"):
        value = value.to_json()
    if not isinstance(value, str):
        raise TypeError(f"contracts[{kernel!r}]: expected a LaunchContract or its JSON text, "
                        f"got {type(value).__name__}")
    return _native.Contract.from_json(value) if hasattr(_native.Contract, "from_json") else _native.Contract(value)
