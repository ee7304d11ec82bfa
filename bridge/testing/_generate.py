"""`arguments(kernel, ...)`: launches that satisfy a kernel's contract, by construction.

Every launch handed out has been accepted by the real validator (`_native.validate`, host memory
standing in for device memory): first as shapes alone, then as the very arrays returned. Sizes come
from `_solve`; values and layouts from `_arrays`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from bridge import _native
from bridge.errors import ContractDefinitionError, GridSizeError, LaunchContractError, MissingContractError
from bridge.testing import _arrays, _solve

EDGES = (None, "one", "empty")
_ATTEMPTS = 64
_MAX_BYTES = 1 << 33             # one generated array at most (8 GiB)


class UnsatisfiableContractError(ContractDefinitionError):
    """No launch satisfying the contract was found (contradictory relations, or an edge case the
    contract does not allow, such as an empty launch under `len(x) > 0`)."""


class GridNotDerivableError(GridSizeError):
    """No launch grid that covers the kernel's work follows from its contract (it has no grid_from:
    its threads range over no argument it writes), and none was given: pass grid=. Raised before
    anything is generated or launched."""


def no_grid_message(contract: Any, who: str | None = None) -> str:
    """What GridNotDerivableError says: what cannot be derived, and what to pass instead."""
    who = who or contract.kernel
    return (f"{who}: cannot derive a launch grid: the contract has no grid_from (the kernel's threads range "
            f"over no argument it writes, e.g. it writes through atomics, shared memory or unsafe stores), "
            f"so no grid that covers its work follows from the contract; pass grid= (a tuple, or a callable "
            f"of the sizes dict such as grid=lambda s: (s['x'][0],) for a block per row of x)")


# ---------------------------------------------------------------------------------------- contracts
def contract_of(obj: Any, *, dtypes: Mapping[str, Any] | None = None,
                options: Mapping[str, Any] | None = None) -> Any:
    """The parsed `_native.Contract` of a contract (LaunchContract, native Contract, JSON text or dict)
    or of any kernel exposing one: `bridge.Kernel.contract`, or a `launch_contract(dtypes=, ...)` hook
    (DSL kernels, which are generic until specialised; `options` are passed to the hook)."""
    if isinstance(obj, _native.Contract):
        return obj
    native = getattr(obj, "native", None)
    if callable(native) and hasattr(obj, "to_json"):        # bridge.LaunchContract
        return native()
    if isinstance(obj, str):
        return _native.Contract(obj)
    if isinstance(obj, Mapping):
        return _native.Contract(json.dumps(dict(obj)))
    hook = getattr(obj, "launch_contract", None)
    if callable(hook):
        return contract_of(hook(dtypes=dtypes, **hook_options(hook, options, strict=True)))
    if hasattr(obj, "launcher") and hasattr(obj, "contract"):   # bridge.Kernel
        if obj.contract is None:
            raise MissingContractError(f"{obj.name}: kernel has no launch contract, so no launch can be "
                                       f"generated for it; give one with load_module(..., contracts=...)",
                                       kernel=obj.name)
        return contract_of(obj.contract)
    raise TypeError(f"expected a kernel with a launch contract (bridge.Kernel, @simt.kernel, @tile.kernel), "
                    f"a bridge.LaunchContract, a _native.Contract or contract JSON, got {type(obj).__name__}")


def hook_options(hook: Any, options: Mapping[str, Any] | None, strict: bool) -> dict[str, Any]:
    """The options a kernel hook takes (a differential check gives both sides the same options, and a
    SIMT kernel takes no tile_shapes); strict: an option the hook does not take is a TypeError."""
    import inspect
    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return dict(options or {})
    if any(p.kind is p.VAR_KEYWORD for p in params.values()) or strict:
        return dict(options or {})
    return {k: v for k, v in (options or {}).items() if k in params}


def host_limits() -> tuple[Any, Any]:
    """Device limits and function attributes under which generated launches are validated: host
    memory instead of device memory (as `simulate()`), any compute capability, generous shared memory."""
    limits = _native.DeviceLimits()
    limits.host_memory = True
    limits.cc = 1000
    limits.smem_per_block = limits.smem_per_block_optin = 1 << 20
    attrs = _native.FuncAttrs()
    attrs.max_dynamic_smem = 1 << 20
    return limits, attrs


def suggested_block(contract: Any) -> tuple[int, int, int]:
    """The exact block, or (min(launch bounds, 256), 1, 1) as the validator picks it."""
    if contract.block_exact is not None:
        return tuple(contract.block_exact)
    return (min(contract.max_threads or 256, 256), 1, 1)


def suggested_grid(contract: Any, shapes: Sequence[tuple[int, ...]] = ()) -> None:
    """None when the contract derives its grid (`grid_from`: the validator launches a thread for every
    element of that array, so the grid covers it). A contract without grid_from says nothing about how
    its threads map to the work (a warp per row, a block per partial histogram, ...), so any grid
    suggested from shapes alone could silently under-cover it: GridNotDerivableError, pass grid=."""
    if contract.grid_from is None:
        raise GridNotDerivableError(no_grid_message(contract), kernel=contract.kernel)
    return None


def relations_config(contract: Any) -> tuple[Any, Any]:
    """(grid, block) under which a launch's arguments and relations are validated when no grid is
    given: the contract's own for a grid_from contract; one block for a contract without grid_from.
    That grid only lets the validator check the arguments; it is never handed out as a launch grid."""
    if contract.grid_from is not None:
        return None, None
    return (1, 1, 1), suggested_block(contract)


# ---------------------------------------------------------------------------------------- Arguments
@dataclass
class Arguments(Sequence):
    """One generated launch: the argument values (a sequence: `kernel(*args)`) and how to replay it.

    `sizes` names every extent and integer scalar that relations tie together; `grid`/`block` are the
    launch configuration: the grid given to `arguments`, or None when the contract derives one from
    its grid_from (a contract without grid_from needs grid=); `fresh()` gives new copies of the
    written arguments with the same values (the read-only ones are shared).
    """
    kernel: str
    contract: Any
    names: tuple[str, ...]
    values: tuple
    sizes: dict[str, Any]
    seed: int | None
    size: int
    edge: str | None
    layouts: dict[str, str]
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int]
    library: str = "numpy"
    records: dict[str, _arrays.ArrayRecord] = field(default_factory=dict, repr=False)
    bases: dict[str, Any] = field(default_factory=dict, repr=False)
    request: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            if key not in self.names:
                raise KeyError(f"{self.kernel} has no argument {key!r}; it has {', '.join(self.names)}")
            return self.values[self.names.index(key)]
        return self.values[key]

    @property
    def written(self) -> tuple[str, ...]:
        """Names of the arguments the kernel may write (access write or readwrite)."""
        return tuple(n for n in self.names if n in self.records and self.records[n].written)

    def describe(self) -> str:
        """`x=(1001,), n=1001` and the layouts that were not C-contiguous: what a report shows."""
        parts = [f"{k}={v}" for k, v in self.sizes.items()]
        odd = [f"{k}={v}" for k, v in self.layouts.items() if v != "C"]
        text = ", ".join(parts) or "(no sizes)"
        if odd:
            text += "; layouts " + ", ".join(odd)
        if self.edge:
            text += f"; edge case {self.edge!r}"
        return text

    def replay(self) -> str:
        """The call that regenerates exactly these arguments."""
        r = self.request or Request(size=self.size, seed=self.seed, edge=self.edge)
        extra = "".join(f", {k}={v!r}" for k, v in (("edge", r.edge), ("shapes", r.shapes), ("scalars", r.scalars))
                        if v)
        if r.layouts not in ("mixed", {}):
            extra += f", layouts={dict(r.layouts) if not isinstance(r.layouts, str) else r.layouts!r}"
        if r.view_library == "torch" and r.library == "numpy":
            extra += ", library='torch'"
        if not r.readonly:
            extra += ", readonly=False"
        if r.values:
            extra += f", values=<the same {', '.join(r.values)}>"
        if r.grid is not None:
            extra += ", grid=<the same grid>" if callable(r.grid) else f", grid={r.grid!r}"
        elif self.contract.grid_from is None:        # arguments() needs one: the contract derives none
            extra += ", grid=<the grid the kernel launches with>"
        return f"bridge.testing.arguments(<{self.kernel}>, size={r.size}, seed={r.seed}{extra})"

    def to(self, library: str) -> "Arguments":
        """The same launch (values and layouts) with new arrays of `library`: numpy (host), bridge,
        cupy or torch (current device; torch cannot view the negative-stride layout)."""
        if library not in _arrays.ARRAY_LIBRARIES:
            raise ValueError(f"library: expected one of {', '.join(_arrays.ARRAY_LIBRARIES)}, got {library!r}")
        return self._materialise(library, written_only=False)

    def fresh(self) -> "Arguments":
        """New copies of the written arguments (same values, same layouts); read-only ones shared."""
        return self._materialise(self.library, written_only=True)

    def _materialise(self, library: str, written_only: bool) -> "Arguments":
        values, bases = list(self.values), dict(self.bases)
        for k, name in enumerate(self.names):
            rec = self.records.get(name)
            if rec is None or (written_only and not rec.written):
                continue
            if library == "torch" and rec.recipe.layout == "reversed":
                raise ValueError(f"{self.kernel}: argument '{name}' (#{k}) has a negative-stride layout, "
                                 f"which torch cannot view; generate with library='torch'")
            values[k], bases[name] = rec.host_view() if library == "numpy" else rec.device_view(library)
        return replace(self, values=tuple(values), library=library, bases=bases)

    def __repr__(self) -> str:
        return f"<bridge.testing.Arguments {self.kernel}: {self.describe()}; seed={self.seed}>"


# ---------------------------------------------------------------------------------------- generation
@dataclass
class Request:
    """Everything `arguments()` was asked for (kept for replay and for projections)."""
    size: int = 1000
    seed: int | None = None
    edge: str | None = None
    library: str = "numpy"
    layouts: str | Mapping[str, str] = "mixed"
    readonly: bool = True
    shapes: Mapping[str, Sequence[int]] | None = None
    scalars: Mapping[str, Any] | None = None
    values: Mapping[str, Any] | None = None
    grid: Any = None
    block: Any = None
    view_library: str | None = None      # layouts must be viewable there (default: library)
    relations_only: bool = False         # no grid needed: the caller gives each kernel its own


def _check_request(contract: Any, r: Request) -> dict[str, int]:
    names = {a["name"]: i for i, a in enumerate(contract.args)}
    if r.edge not in EDGES:
        raise ValueError(f"edge: expected None, 'one' or 'empty', got {r.edge!r}")
    if r.library not in _arrays.ARRAY_LIBRARIES:
        raise ValueError(f"library: expected one of {', '.join(_arrays.ARRAY_LIBRARIES)}, got {r.library!r}")
    if not isinstance(r.size, (int, np.integer)) or isinstance(r.size, bool) or r.size < 0:
        raise ValueError(f"size: expected a non-negative int, got {r.size!r}")
    for what, mapping in (("shapes", r.shapes), ("scalars", r.scalars), ("values", r.values)):
        for key in mapping or {}:
            if key not in names:
                raise KeyError(f"{contract.kernel}: {what}: no argument {key!r}; arguments are "
                               f"{', '.join(names)}")
    if isinstance(r.layouts, str) and r.layouts not in ("mixed", "contiguous"):
        raise ValueError(f"layouts: expected 'mixed', 'contiguous' or a mapping name -> layout, got {r.layouts!r}")
    return names


def _fixed(contract: Any, r: Request, names: dict[str, int]) -> tuple[dict, dict[int, int]]:
    """Sizes the caller fixed: shapes=, integer scalars=, and the shapes of arrays given in values=."""
    fixed: dict[tuple, int] = {}
    ndims: dict[int, int] = {}
    shapes = dict(r.shapes or {})
    for name, v in (r.values or {}).items():
        if not callable(v) and contract.args[names[name]]["kind"] == "array":
            shapes.setdefault(name, np.shape(v))
    for name, shape in shapes.items():
        i = names[name]
        spec = contract.args[i]
        shape = tuple(shape)
        if spec["kind"] != "array":
            raise ValueError(f"{contract.kernel}: shapes: '{name}' (#{i}) is a scalar; give it in scalars=")
        if (spec["ndim"] >= 0 and len(shape) != spec["ndim"]) or \
                not all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape):
            raise ValueError(f"{contract.kernel}: shapes: argument '{name}' (#{i}): expected "
                             f"{spec['ndim'] if spec['ndim'] >= 0 else 'some'} non-negative extents, got {shape!r}")
        ndims[i] = len(shape)
        for k, n in enumerate(shape):
            fixed[("dim", i, k)] = int(n)
    for name, value in (r.scalars or {}).items():
        i = names[name]
        if contract.args[i]["kind"] == "scalar" and contract.args[i]["dtype"] in _solve._INT_RANGE:
            fixed[("scalar", i)] = int(value)
    return fixed, ndims


def _descs(contract: Any, ndims: dict[int, int], values: dict, scalars: list) -> list:
    """Shape-only stand-ins (non-overlapping fake host pointers) for a first validation."""
    out, ptr = [], 1 << 20
    for i, a in enumerate(contract.args):
        if a["kind"] == "array":
            shape = [values[("dim", i, k)] for k in range(ndims[i])]
            dt = _arrays.numpy_dtype(a["dtype"])
            out.append(_native.ArrayDesc(ptr, shape, None, a["dtype"], 1, 0, False))
            ptr += (math.prod(shape) * dt.itemsize + 4096) // 4096 * 4096 + 4096
        else:
            out.append(scalars[i])
    return out


def _validate(contract: Any, args: Sequence[Any], grid: Any, block: Any) -> tuple:
    """The real validator, host memory standing in for device memory (NumPy arrays go through a
    bridge host view, which also carries bfloat16 / float8 that DLPack cannot)."""
    from bridge.array import asarray
    limits, attrs = host_limits()
    views = [asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    return _native.validate(contract, views, grid=grid, block=block, limits=limits, attrs=attrs)


def _launch_config(contract: Any, r: Request, args_for_callable: Any) -> tuple:
    """(grid, block) to validate with: the given grid (a callable of the sizes), else the contract's
    derived one (None), else (relations only) one block that stands in for the caller's grid."""
    grid = r.grid(args_for_callable) if callable(r.grid) else r.grid
    if grid is None and contract.grid_from is None:
        return relations_config(contract)
    return grid, r.block


def _layout_choice(contract: Any, r: Request, i: int, shape: tuple[int, ...], rng: np.random.Generator) -> str:
    spec = contract.args[i]
    allowed = _arrays.layouts_for(spec, shape, r.view_library or r.library)
    if not isinstance(r.layouts, str):
        want = r.layouts.get(spec["name"])
        if want is not None:
            if want not in allowed:
                raise ValueError(f"{contract.kernel}: argument '{spec['name']}' (#{i}): layout {want!r} is not "
                                 f"allowed here; allowed: {', '.join(allowed)}")
            return want
    if r.layouts == "contiguous" or 0 in shape:
        return allowed[0]
    if spec.get("align", 0) > _arrays.numpy_dtype(spec["dtype"]).itemsize:
        allowed = [x for x in allowed if x != "reversed"]   # keeps the start of the base: aligned
    return allowed[int(rng.integers(0, len(allowed)))]


def _build(contract: Any, r: Request, ndims: dict[int, int], sized: dict, rng: np.random.Generator,
           force_contiguous: set[int]) -> tuple[list, dict, dict, dict]:
    values: list = []
    bases: dict[str, Any] = {}
    records: dict[str, _arrays.ArrayRecord] = {}
    layouts: dict[str, str] = {}
    overrides = r.values or {}
    for i, a in enumerate(contract.args):
        name = a["name"]
        if a["kind"] == "scalar":
            if name in (r.scalars or {}):
                values.append(_arrays.numpy_dtype(a["dtype"]).type(r.scalars[name]))
            else:
                values.append(_arrays.scalar_value(a["dtype"], sized.get(("scalar", i)), rng))
            continue
        shape = tuple(sized[("dim", i, k)] for k in range(ndims[i]))
        layout = "C" if i in force_contiguous else _layout_choice(contract, r, i, shape, rng)
        dt = _arrays.numpy_dtype(a["dtype"])
        rec_recipe = _arrays.recipe(shape, layout, dt.itemsize)
        if math.prod(rec_recipe.base_shape) * dt.itemsize > _MAX_BYTES:
            raise ValueError(f"{contract.kernel}: argument '{name}' (#{i}) would take "
                             f"{math.prod(rec_recipe.base_shape) * dt.itemsize} bytes (shape {shape}); "
                             f"ask for a smaller size")
        base = _arrays.aligned_empty(rec_recipe.base_shape, dt)
        base[...] = _arrays.random_values(rng, a["dtype"], rec_recipe.base_shape)
        given = overrides.get(name)
        if given is not None:
            data = given(rng, shape, dt) if callable(given) else given
            rec_recipe.apply(base)[...] = np.asarray(data).astype(dt)
        readonly = r.readonly and a.get("access", "read") == "read"
        rec = _arrays.ArrayRecord(name, a, base, rec_recipe, readonly)
        records[name] = rec
        layouts[name] = layout
        view, bases[name] = rec.host_view()
        values.append(view)
    return values, records, layouts, bases


def _sizes_report(contract: Any, ndims: dict[int, int], sized: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, a in enumerate(contract.args):
        if a["kind"] == "array":
            out[a["name"]] = tuple(sized[("dim", i, k)] for k in range(ndims[i]))
        elif ("scalar", i) in sized:
            out[a["name"]] = sized[("scalar", i)]
    return out


def _draws(r: Request, pl: _solve.Plan, rng: np.random.Generator) -> Iterator[_solve.Draw]:
    if r.edge == "empty":
        yield _solve.Draw(r.size, "empty", rng)
        for root in pl.free:
            yield _solve.Draw(r.size, "empty", rng, empty_only=root)
        return
    for attempt in range(_ATTEMPTS):
        edge = r.edge if attempt == 0 or r.edge is None else None
        if r.edge == "one" and attempt > 0:
            return
        yield _solve.Draw(r.size, edge, rng, shared=attempt < _ATTEMPTS // 2)


def generate(contract: Any, r: Request) -> Arguments:
    """One launch satisfying `contract` (see `arguments`)."""
    names = _check_request(contract, r)
    fixed, given_ndims = _fixed(contract, r, names)
    ndims = _solve.choose_ndims(contract, given_ndims)
    p = _solve.problem(contract, ndims)
    pl = _solve.plan(p, fixed)
    kernel = contract.kernel
    if pl.conflicts:
        raise UnsatisfiableContractError(f"{kernel}: the contract's relations contradict each other: "
                                         f"{'; '.join(pl.conflicts)}", kernel=kernel)
    if r.grid is None and contract.grid_from is None and not r.relations_only:
        raise GridNotDerivableError(no_grid_message(contract), kernel=kernel)
    if r.seed is None:
        r = replace(r, seed=int(np.random.SeedSequence().entropy % 2**32))   # so it can be replayed
    rng = np.random.default_rng(r.seed)
    reasons: dict[str, int] = {}
    last = ""
    for d in _draws(r, pl, rng):
        sized = _solve.assign(p, pl, d)
        if sized is None:
            continue
        bad = _solve.failing(p, sized)
        if r.edge == "empty" and not any(sized[v] == 0 for v in sized if v[0] == "dim"):
            bad = bad or ["some array must be empty (the relations keep every array non-empty)"]
        if bad:
            for b in bad:
                reasons[b] = reasons.get(b, 0) + 1
            continue
        scalars = [_arrays.scalar_value(a["dtype"], sized.get(("scalar", i)), rng) if a["kind"] == "scalar"
                   else None for i, a in enumerate(contract.args)]
        for name, v in (r.scalars or {}).items():
            i = names[name]
            scalars[i] = _arrays.numpy_dtype(contract.args[i]["dtype"]).type(v)
        try:
            grid, block = _launch_config(contract, r, _sizes_report(contract, ndims, sized))
            _validate(contract, _descs(contract, ndims, sized, scalars), grid, block)
        except LaunchContractError as e:
            last = str(e)
            continue
        found = _finish(contract, r, ndims, sized, rng, grid, block)
        if found is not None:
            return found
    why = "; ".join(f"'{t}' failed {n}x" for t, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
    what = {"empty": "empty launch (some array of size 0)", "one": "launch with every free size 1"}.get(
        r.edge or "", "launch")
    raise UnsatisfiableContractError(
        f"{kernel}: found no {what} that satisfies the contract (relations {list(contract.requires)}); "
        f"{why or 'no candidate was rejected by a relation'}" + (f"; the validator said: {last}" if last else ""),
        kernel=kernel)


def _finish(contract: Any, r: Request, ndims: dict[int, int], sized: dict, rng: np.random.Generator,
            grid: Any, block: Any) -> Arguments | None:
    """Build the arrays and validate them as they are; a layout or alignment the contract refuses
    is rebuilt C-contiguous (twice at most)."""
    force: set[int] = set()
    for _ in range(3):
        values, records, layouts, bases = _build(contract, r, ndims, sized, rng, force)
        try:
            _validate(contract, values, grid, block)
        except LaunchContractError as e:
            if e.arg is None or e.arg in force or contract.args[e.arg]["kind"] != "array":
                raise UnsatisfiableContractError(
                    f"{contract.kernel}: generated arguments were refused by the validator: {e}",
                    kernel=contract.kernel) from e
            force.add(e.arg)
            continue
        if contract.grid_from is None and r.grid is None:     # relations only: the stand-in is no grid
            grid, block = None, r.block
        args = Arguments(contract.kernel, contract, tuple(a["name"] for a in contract.args), tuple(values),
                         _sizes_report(contract, ndims, sized), r.seed, r.size, r.edge, layouts,
                         grid, block if block is not None else suggested_block(contract), "numpy", records, bases, r)
        return args.to(r.library) if r.library != "numpy" else args
    return None
