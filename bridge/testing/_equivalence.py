"""`assert_equivalent(reference, candidate, ...)`: two kernels, the same generated inputs, every
written argument compared, and every element of a write-only output accounted for.

Why fresh copies per side: a kernel writes its outputs in place, so each side gets its own copy of
the written arguments, with the same initial values; read-only inputs are shared. Why poisoned
outputs (`_coverage`): two kernels that leave the same elements untouched agree on them, so a value
comparison alone can pass while testing almost nothing; each side's write-only outputs start as a
sentinel, the elements each side wrote are compared as sets, and a reference that writes only part of
an output is refused unless the caller says `partial=`. A mismatch names the argument, the first
differing index, both values, the coverage, the seed and the sizes, so the case replays.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from bridge.errors import (BlockSizeError, GridSizeError, LaunchContractError, NoDeviceError,
                           SharedMemoryError)
from bridge.testing import _compare, _coverage
from bridge.testing._generate import Arguments, Request, UnsatisfiableContractError, generate
from bridge.testing._sides import (IncompatibleContractsError, Side, joint_layouts, key, launch_configs,
                                   make_side, outputs_of, project, run, structural_differences)


class EquivalenceError(AssertionError):
    """The candidate's output differs from the reference's (or one of them failed) on a generated
    launch. Attributes say which argument, where, both values and how to replay it."""

    def __init__(self, message: str, *, argument: str | None = None, index: tuple | None = None,
                 expected: Any = None, actual: Any = None, seed: int | None = None,
                 sizes: Mapping[str, Any] | None = None, edge: str | None = None,
                 coverage: Mapping[str, tuple[int, int]] | None = None) -> None:
        super().__init__(message)
        self.argument, self.index, self.expected, self.actual = argument, index, expected, actual
        self.seed, self.sizes, self.edge = seed, dict(sizes or {}), edge
        self.coverage = dict(coverage or {})      # side ("reference"/"candidate") -> (written, total)


class CoverageError(EquivalenceError):
    """The elements the two kernels wrote make the comparison vacuous or differ: the reference wrote
    only part of a write-only output (and `partial=` does not allow it), or one side wrote elements
    the other left untouched. `coverage` has (written, total) per side."""


@dataclass
class EquivalenceReport:
    """What `assert_equivalent` ran: one line per launch (seed, edge case, sizes, elements written)
    and the arguments it compared; `coverage` has, per output, how many of its elements the reference
    wrote over all launches (both sides wrote the same ones); `skipped` says which edge cases the
    contract rules out (and why)."""
    reference: str
    candidate: str
    compared: tuple[str, ...]
    launches: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    coverage: dict[str, _coverage.Coverage] = field(default_factory=dict)

    @property
    def full_coverage(self) -> bool:
        """True when the reference wrote every element of every write-only output."""
        return all(c.full for c in self.coverage.values() if c.poisoned)

    def __str__(self) -> str:
        lines = [f"{self.candidate} matches {self.reference} on {len(self.launches)} launch(es), "
                 f"comparing {', '.join(self.compared) or 'nothing'}:"]
        if self.coverage:
            lines.append("  coverage: " + "; ".join(c.text(n) for n, c in self.coverage.items()))
        lines += [f"  {x}" for x in self.launches] + [f"  skipped: {x}" for x in self.skipped]
        return "\n".join(lines)


def _sides(reference: Any, candidate: Any, dtypes: Any, options: Any) -> tuple[Side, Side, Side]:
    ref = make_side(reference, "reference", dtypes, options)
    cand = make_side(candidate, "candidate", dtypes, options)
    unused = set(options or {}) - set(ref.options) - set(cand.options)
    if unused:
        raise TypeError(f"options {sorted(unused)} are taken by neither the {ref.label} nor the {cand.label}")
    if ref.contract is None and cand.contract is None:
        raise TypeError("assert_equivalent: at least one side must be a kernel with a launch contract "
                        "(the arguments are generated from it); both are plain Python functions")
    return ref, cand, (ref if ref.contract is not None else cand)


def check_compatible(reference: Any, candidate: Any, *, dtypes: Any = None,
                     options: Mapping[str, Any] | None = None, size: int = 200, seed: int = 0) -> None:
    """Raise IncompatibleContractsError unless the two kernels' contracts describe the same job:
    the same arrays (dtype, rank, written or not), the same non-size scalars, and relations that
    accept each other's generated launches (checked both ways, by the validator, on a normal launch,
    all-ones sizes and an empty launch where the source allows one)."""
    ref, cand, _ = _sides(reference, candidate, dtypes, options)
    if ref.contract is None or cand.contract is None:
        return
    diffs = structural_differences(ref, cand)
    if diffs:
        raise IncompatibleContractsError(
            f"{cand.label} and {ref.label} have incompatible contracts: " + "; ".join(diffs), diffs)
    for src, dst in ((ref, cand), (cand, ref)):
        layouts = joint_layouts(ref.contract, cand.contract, src.contract)
        for edge in (None, "one", "empty"):
            try:
                args = generate(src.contract, Request(size=size, seed=seed, edge=edge, layouts=layouts,
                                                      relations_only=True))
            except UnsatisfiableContractError:
                if edge is None:
                    raise
                continue
            project(args, dst.contract, src.label, dst.label)


def _where(ref: Side, cand: Side, device: bool | None) -> bool:
    """True when the kernels run on the GPU."""
    homes = {ref.home, cand.home}
    if device is False and "device" in homes:
        side = ref if ref.home == "device" else cand
        raise ValueError(f"assert_equivalent: device=False, but the {side.label} runs on the GPU only")
    on_device = bool(device) or "device" in homes
    if on_device and homes <= {"host"}:
        raise ValueError("assert_equivalent: device=True, but both sides run on the host")
    if on_device:
        import bridge
        if not bridge.gpu_available():
            why = next((f"the {x.label} runs on the GPU only" for x in (ref, cand) if x.home == "device"),
                       "device=True was given")
            raise NoDeviceError(f"assert_equivalent needs a GPU ({why}), but none is usable: "
                                f"{bridge.gpu_unavailable_reason()}")
    return on_device


def _launches(trials: int, size: int | Sequence[int], seed: int, edges: bool) -> list[tuple[int, int, str | None]]:
    sizes = [int(size)] if isinstance(size, (int, np.integer)) else [int(x) for x in size]
    if not sizes or min(sizes) < 0:
        raise ValueError(f"size: expected a non-negative int or a non-empty sequence of them, got {size!r}")
    out = [(sizes[t % len(sizes)], seed + t, None) for t in range(trials)]
    if edges:
        out += [(sizes[0], seed + trials, "one"), (sizes[0], seed + trials + 1, "empty")]
    return out


@dataclass
class _Launch:
    """One generated launch as both sides see it: the generated arguments, each side's projection
    (host arrays), launch configuration and what it is called in reports."""
    gen: Arguments
    lives: dict[str, Arguments]
    configs: dict[str, tuple[Any, Any, str]]
    trial: str

    def where(self) -> str:
        return f"{self.trial}: seed={self.gen.seed}, sizes {self.gen.describe()}"

    def grids(self) -> str:
        return f"grids: reference {self.configs['reference'][2]}; candidate {self.configs['candidate'][2]}"


def _coverage_text(ref: Side, cand: Side, counts: Mapping[str, tuple[int, int]]) -> str:
    parts = []
    for side in (ref, cand):
        w, n = counts[side.role]
        parts.append(f"{side.role} wrote {w} of {n} ({_coverage.percent(w, n)})")
    return "coverage: " + ", ".join(parts)


def _mismatch_error(ref: Side, cand: Side, launch: _Launch, name: str, m: _compare.Mismatch,
                    initial: np.ndarray | None, tol: str, counts: Mapping[str, tuple[int, int]] | None
                    ) -> EquivalenceError:
    gen = launch.gen
    pos = gen.names.index(name)
    note = ""
    if initial is not None and m.index != () and _compare.close(
            np.asarray(initial[m.index]), np.asarray(m.actual), None, None, None):
        note = " (unchanged from its initial value: the candidate did not write it)"
    cover = f"\n  {_coverage_text(ref, cand, counts)}" if counts else ""
    msg = (f"{cand.label} differs from the {ref.label} in argument '{name}' (#{pos}): {m.count} of {m.total} "
           f"element(s) differ ({tol}); first at index {m.index}: reference {_compare.value_text(m.expected)}, "
           f"candidate {_compare.value_text(m.actual)}{note}{cover}\n  {launch.where()}\n  {launch.grids()}"
           f"\n  replay: {gen.replay()}")
    return EquivalenceError(msg, argument=name, index=m.index, expected=m.expected, actual=m.actual,
                            seed=gen.seed, sizes=gen.sizes, edge=gen.edge, coverage=counts)


def _coverage_error(ref: Side, cand: Side, launch: _Launch, name: str, what: str, mask: np.ndarray,
                    counts: Mapping[str, tuple[int, int]]) -> CoverageError:
    gen = launch.gen
    index = _compare.first_index(mask)
    msg = (f"{what}; first at index {index}\n  {_coverage_text(ref, cand, counts)}\n  {launch.where()}"
           f"\n  {launch.grids()}\n  replay: {gen.replay()}")
    return CoverageError(msg, argument=name, index=index, seed=gen.seed, sizes=gen.sizes, edge=gen.edge,
                         coverage=counts)


def _live(side: Side, gen: Arguments) -> Arguments:
    """The generated launch as a launch of this side (projected onto its contract; host arrays)."""
    if side.contract is not None and side.contract is not gen.contract:
        return project(gen, side.contract, "generated launch", side.label)
    return gen


def _run_side(side: Side, gen: Arguments, launch: _Launch, poisoned: frozenset[str], which: int,
              on_device: bool, library: str) -> dict[str, np.ndarray]:
    """Run one side on fresh copies of its arguments, the write-only outputs in `poisoned` filled with
    sentinel `which`; host copies of the written arguments, by the generated launch's names."""
    on_host = side.home == "host" or not on_device
    live = launch.lives[side.role]
    records = {n: _coverage.poison(r, which) if key(n) in poisoned else r for n, r in live.records.items()}
    live = replace(live, records=records).to("numpy" if on_host else library)
    written, trial = gen.written, launch.trial
    config = launch.configs[side.role][:2]
    try:
        result = run(side, live, config, on_host)
    except (BlockSizeError, GridSizeError, SharedMemoryError) as e:       # the launch configuration
        raise type(e)(f"{side.label}: the launch configuration was refused ({trial}, seed={gen.seed}, sizes "
                      f"{gen.describe()}; {launch.configs[side.role][2]}): {e}", kernel=e.kernel, arg=e.arg,
                      arg_name=e.arg_name) from e
    except LaunchContractError as e:
        raise IncompatibleContractsError(f"{side.label} refused a generated launch ({trial}, seed={gen.seed}, "
                                         f"sizes {gen.describe()}): {e}", [str(e)]) from e
    except Exception as e:
        raise EquivalenceError(f"{side.label} failed with {type(e).__name__}: {e}\n  {launch.where()}"
                               f"\n  replay: {gen.replay()}", seed=gen.seed, sizes=gen.sizes, edge=gen.edge) from e
    local = {name: ({key(n): n for n in live.names}[key(name)]) for name in written}
    outs = outputs_of(side, live, result, tuple(local.values()))
    outs = {name: outs[local[name]] for name in written}
    if side.contract is not None:
        for name in written:
            rec = live.records[local[name]]
            changed = _compare.outside_writes(rec.base, _to_host_base(live.bases[local[name]]), rec.mask())
            if changed is not None:
                raise EquivalenceError(f"{side.label} wrote outside argument '{name}': element {changed} of its "
                                       f"base allocation (layout {rec.recipe.layout}) changed\n  {launch.where()}",
                                       argument=name, seed=gen.seed, sizes=gen.sizes, edge=gen.edge)
    return outs


def _observe(side: Side, gen: Arguments, launch: _Launch, poisoned: frozenset[str], on_device: bool,
             library: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(outputs, written): the side's outputs and, per poisoned output, where it wrote. An element that
    still holds the sentinel was written only if it does not hold the second sentinel in a second run
    (made only when some element matched the first: a kernel may write the sentinel's value)."""
    dtypes = {a["name"]: a["dtype"] for a in gen.contract.args}
    outs = _run_side(side, gen, launch, poisoned, 0, on_device, library)
    wrote = {n: ~_coverage.untouched(outs[n], dtypes[n], 0) for n in gen.written if key(n) in poisoned}
    if any(not w.all() for w in wrote.values()):
        again = _run_side(side, gen, launch, poisoned, 1, on_device, library)
        for n in wrote:
            if again[n].shape == wrote[n].shape:
                wrote[n] |= ~_coverage.untouched(again[n], dtypes[n], 1)
    return outs, wrote


def _poisonable(ref: Side, cand: Side, written: tuple[str, ...]) -> frozenset[str]:
    """The written arguments that are write-only for every side with a contract (by key): those are
    poisoned. A read-write one keeps its generated values: they are inputs of the kernel."""
    out = set()
    for name in written:
        accesses = [a.get("access") for side in (ref, cand) if side.contract is not None
                    for a in side.contract.args if key(a["name"]) == key(name)]
        if accesses and all(x == "write" for x in accesses):
            out.add(key(name))
    return frozenset(out)


def _check_output(ref: Side, cand: Side, launch: _Launch, name: str, got: tuple[np.ndarray, np.ndarray],
                  wrote: tuple[np.ndarray | None, np.ndarray | None], partial: frozenset[str],
                  tols: tuple[Any, Any, Any]) -> tuple[int, int]:
    """Compare one output of one launch; (elements the reference wrote, elements) on success."""
    expected, actual = got
    wr, wc = wrote
    tol = _compare.tolerance_text(*tols)
    if wr is None or wc is None or expected.shape != actual.shape:        # read-write, or a shape mismatch
        m = _compare.first_mismatch(expected, actual, *tols)
        if m is not None:
            rec = launch.gen.records.get(name)
            initial = rec.recipe.apply(rec.base) if rec is not None else None
            raise _mismatch_error(ref, cand, launch, name, m, initial, tol, None)
        return int(expected.size), int(expected.size)
    n = int(expected.size)
    counts = {"reference": (int(np.count_nonzero(wr)), n), "candidate": (int(np.count_nonzero(wc)), n)}
    pos = launch.gen.names.index(name)
    w = counts["reference"][0]
    if w < n and name not in partial:
        raise _coverage_error(ref, cand, launch, name, (
            f"the {ref.label} wrote only {w} of {n} element(s) of output '{name}' (#{pos}) "
            f"({_coverage.percent(w, n)}): the comparison would test only those. Launch it with a grid that "
            f"covers the work (grid=, or configured(kernel, grid=...)), or pass partial=True (or "
            f"partial=['{name}']) if the reference writes only part of '{name}' by design"), ~wr, counts)
    if np.any(wr & ~wc):
        k = int(np.count_nonzero(wr & ~wc))
        raise _coverage_error(ref, cand, launch, name, (
            f"{cand.label} left {k} element(s) of output '{name}' (#{pos}) untouched that the {ref.label} "
            f"wrote"), wr & ~wc, counts)
    if np.any(wc & ~wr):
        k = int(np.count_nonzero(wc & ~wr))
        raise _coverage_error(ref, cand, launch, name, (
            f"{cand.label} wrote {k} element(s) of output '{name}' (#{pos}) that the {ref.label} left "
            f"untouched"), wc & ~wr, counts)
    m = _compare.first_mismatch(expected, actual, *tols, where=wr)
    if m is not None:
        raise _mismatch_error(ref, cand, launch, name, m, None, tol, counts)
    return w, n


def _to_host_base(base: Any) -> np.ndarray:
    from bridge.testing._arrays import to_host
    return to_host(base)


def assert_equivalent(reference: Any, candidate: Any, *, trials: int = 3, size: int | Sequence[int] = 1000,
                      seed: int | None = None, edges: bool = True, rtol: float | None = None,
                      atol: float | None = None, ulps: int | None = None, device: bool | None = None,
                      library: str = "bridge", grid: Any = None, block: Any = None, dtypes: Any = None,
                      options: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None, scalars: Mapping[str, Any] | None = None,
                      layouts: str = "mixed", partial: bool | Iterable[str] = False) -> EquivalenceReport:
    """Run `reference` and `candidate` on the same generated launches and compare every written
    argument; raise EquivalenceError on the first difference (argument, index, both values, coverage,
    seed, sizes, replay call), IncompatibleContractsError when the contracts do not describe the same job.

    reference / candidate: bridge.Kernel (C++ or PTX module kernel: GPU), @simt.kernel or
    @tile.kernel (simulator, or GPU with device=True or when the other side needs it), a plain Python
    function taking the same arguments as the candidate (NumPy arrays; writes the outputs in place or
    returns them), `simulated(k)` (always the simulator) or `configured(k, grid=, block=)`.
    trials: launches of `size` elements (a sequence cycles), seeds seed, seed+1, ...; edges: also
    all-ones sizes and an empty launch where the contracts allow one. Comparison: exact (NaN equals
    NaN) unless rtol/atol or ulps is given. library: device arrays (bridge, cupy, torch).
    Coverage: write-only outputs start as a sentinel (NaN with a distinctive payload for floats, a
    distinctive byte pattern otherwise; the same on both sides); both sides must write the same
    elements (CoverageError), and the reference must write all of each one unless `partial=True` (or
    a collection of output names) says it writes part by design. Read-write outputs keep their
    generated values (inputs). The report's `coverage` says how much was written.
    grid/block: tuples or callables of the sizes dict, for both sides (configured() for one). A side
    whose contract has no grid_from runs with the other side's grid; when neither side has one,
    grid= is required (GridNotDerivableError: no grid is guessed). values: name -> array or
    fn(rng, shape, dtype); shapes / scalars: fixed sizes (as for `arguments`).
    """
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ValueError(f"trials: expected an int >= 1, got {trials!r}")
    if library not in ("bridge", "cupy", "torch"):
        raise ValueError(f"library: expected bridge, cupy or torch (device arrays), got {library!r}")
    ref, cand, driver = _sides(reference, candidate, dtypes, options)
    for side in (ref, cand):
        if side.home == "none":
            raise TypeError(f"assert_equivalent: the {side.label} is a contract, not something that runs; "
                            f"pass the kernel (check_compatible compares contracts alone)")
    written = tuple(a["name"] for a in driver.contract.args if a["kind"] == "array" and a.get("access") != "read")
    allowed_partial = _coverage.partial_names(partial, written)
    if ref.contract is not None and cand.contract is not None:
        check_compatible(reference, candidate, dtypes=dtypes, options=options)
        layout_spec: Any = joint_layouts(ref.contract, cand.contract, driver.contract) \
            if layouts == "mixed" else layouts
    else:
        layout_spec = layouts
    on_device = _where(ref, cand, device)
    base_seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
    poisoned = _poisonable(ref, cand, written)
    report = EquivalenceReport(ref.label, cand.label, written)
    report.coverage = {n: _coverage.Coverage(poisoned=key(n) in poisoned) for n in written}
    for n, (sz, s, edge) in enumerate(_launches(trials, size, base_seed, edges)):
        try:
            gen = generate(driver.contract, Request(size=sz, seed=s, edge=edge, layouts=layout_spec,
                                                    values=values, shapes=shapes, scalars=scalars,
                                                    library="numpy", view_library=library, relations_only=True))
        except UnsatisfiableContractError as e:
            if edge is None:
                raise
            report.skipped.append(f"edge case {edge!r}: {e}")
            continue
        trial = f"launch {n + 1} ({'edge case ' + repr(edge) if edge else f'trial {n + 1} of {trials}'})"
        lives = {x.role: _live(x, gen) for x in (ref, cand)}
        launch = _Launch(gen, lives, launch_configs((ref, cand), lives, grid, block), trial)
        got_ref, wrote_ref = _observe(ref, gen, launch, poisoned, on_device, library)
        got_cand, wrote_cand = _observe(cand, gen, launch, poisoned, on_device, library)
        line = []
        for name in written:
            w, total = _check_output(ref, cand, launch, name, (got_ref[name], got_cand[name]),
                                     (wrote_ref.get(name), wrote_cand.get(name)), allowed_partial,
                                     (rtol, atol, ulps))
            report.coverage[name].add(w, total)
            if key(name) in poisoned:
                line.append(f"{name} {w} of {total}")
        report.launches.append(f"seed={gen.seed}: {gen.describe()}" + (
            f"; written: {', '.join(line)}" if line else ""))
    return report
