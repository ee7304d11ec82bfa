"""`assert_equivalent(reference, candidate, ...)`: two kernels, the same generated inputs, every
written argument compared.

Why fresh copies per side: a kernel writes its outputs in place, so each side gets its own copy of
the written arguments, with the same initial values; read-only inputs are shared. A mismatch names
the argument, the first differing index, both values, the seed and the sizes, so the case replays.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from bridge.errors import (BlockSizeError, GridSizeError, LaunchContractError, NoDeviceError,
                           SharedMemoryError)
from bridge.testing import _compare
from bridge.testing._generate import Arguments, Request, UnsatisfiableContractError, generate
from bridge.testing._sides import (IncompatibleContractsError, Side, joint_layouts, key, make_side,
                                   outputs_of, project, run, structural_differences)


class EquivalenceError(AssertionError):
    """The candidate's output differs from the reference's (or one of them failed) on a generated
    launch. Attributes say which argument, where, both values and how to replay it."""

    def __init__(self, message: str, *, argument: str | None = None, index: tuple | None = None,
                 expected: Any = None, actual: Any = None, seed: int | None = None,
                 sizes: Mapping[str, Any] | None = None, edge: str | None = None) -> None:
        super().__init__(message)
        self.argument, self.index, self.expected, self.actual = argument, index, expected, actual
        self.seed, self.sizes, self.edge = seed, dict(sizes or {}), edge


@dataclass
class EquivalenceReport:
    """What `assert_equivalent` ran: one line per launch (seed, edge case, sizes) and the arguments
    it compared; `skipped` says which edge cases the contract rules out (and why)."""
    reference: str
    candidate: str
    compared: tuple[str, ...]
    launches: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.candidate} matches {self.reference} on {len(self.launches)} launch(es), "
                 f"comparing {', '.join(self.compared) or 'nothing'}:"]
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
                args = generate(src.contract, Request(size=size, seed=seed, edge=edge, layouts=layouts))
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


def _mismatch_error(ref: Side, cand: Side, gen: Arguments, name: str, m: _compare.Mismatch,
                    initial: np.ndarray | None, tol: str, trial: str) -> EquivalenceError:
    pos = gen.names.index(name)
    note = ""
    if initial is not None and m.index != () and _compare.close(
            np.asarray(initial[m.index]), np.asarray(m.actual), None, None, None):
        note = " (unchanged from its initial value: the candidate did not write it)"
    msg = (f"{cand.label} differs from the {ref.label} in argument '{name}' (#{pos}): {m.count} of {m.total} "
           f"element(s) differ ({tol}); first at index {m.index}: reference {_compare.value_text(m.expected)}, "
           f"candidate {_compare.value_text(m.actual)}{note}\n  {trial}: seed={gen.seed}, sizes {gen.describe()}"
           f"\n  replay: {gen.replay()}")
    return EquivalenceError(msg, argument=name, index=m.index, expected=m.expected, actual=m.actual,
                            seed=gen.seed, sizes=gen.sizes, edge=gen.edge)


def _run_side(side: Side, gen: Arguments, on_device: bool, library: str, grid: Any, block: Any,
              options: Any, trial: str) -> dict[str, np.ndarray]:
    on_host = side.home == "host" or not on_device
    live = project(gen, side.contract, "generated launch", side.label) if (
        side.contract is not None and side.contract is not gen.contract) else gen
    live = live.to("numpy" if on_host else library)
    written = gen.written
    try:
        result = run(side, live, grid, block, on_host, options)
    except (BlockSizeError, GridSizeError, SharedMemoryError) as e:       # the launch configuration
        raise type(e)(f"{side.label}: the launch configuration was refused ({trial}, seed={gen.seed}, sizes "
                      f"{gen.describe()}): {e}", kernel=e.kernel, arg=e.arg, arg_name=e.arg_name) from e
    except LaunchContractError as e:
        raise IncompatibleContractsError(f"{side.label} refused a generated launch ({trial}, seed={gen.seed}, "
                                         f"sizes {gen.describe()}): {e}", [str(e)]) from e
    except Exception as e:
        raise EquivalenceError(f"{side.label} failed with {type(e).__name__}: {e}\n  {trial}: seed={gen.seed}, "
                               f"sizes {gen.describe()}\n  replay: {gen.replay()}", seed=gen.seed,
                               sizes=gen.sizes, edge=gen.edge) from e
    local = {name: ({key(n): n for n in live.names}[key(name)]) for name in written}
    outs = outputs_of(side, live, result, tuple(local.values()))
    outs = {name: outs[local[name]] for name in written}
    if side.contract is not None:
        for name in written:
            rec = live.records[local[name]]
            changed = _compare.outside_writes(rec.base, _to_host_base(live.bases[local[name]]), rec.mask())
            if changed is not None:
                raise EquivalenceError(f"{side.label} wrote outside argument '{name}': element {changed} of its "
                                       f"base allocation (layout {rec.recipe.layout}) changed\n  {trial}: "
                                       f"seed={gen.seed}, sizes {gen.describe()}", argument=name,
                                       seed=gen.seed, sizes=gen.sizes, edge=gen.edge)
    return outs


def _to_host_base(base: Any) -> np.ndarray:
    from bridge.testing._arrays import to_host
    return to_host(base)


def assert_equivalent(reference: Any, candidate: Any, *, trials: int = 3, size: int | Sequence[int] = 1000,
                      seed: int | None = None, edges: bool = True, rtol: float | None = None,
                      atol: float | None = None, ulps: int | None = None, device: bool | None = None,
                      library: str = "bridge", grid: Any = None, block: Any = None, dtypes: Any = None,
                      options: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None, scalars: Mapping[str, Any] | None = None,
                      layouts: str = "mixed") -> EquivalenceReport:
    """Run `reference` and `candidate` on the same generated launches and compare every written
    argument; raise EquivalenceError on the first difference (argument, index, both values, seed,
    sizes, replay call), IncompatibleContractsError when the contracts do not describe the same job.

    reference / candidate: bridge.Kernel (C++ or PTX module kernel: GPU), @simt.kernel or
    @tile.kernel (simulator, or GPU with device=True or when the other side needs it), a plain Python
    function taking the same arguments as the candidate (NumPy arrays; writes the outputs in place or
    returns them), `simulated(k)` (always the simulator) or `configured(k, grid=, block=)`.
    trials: launches of `size` elements (a sequence cycles), seeds seed, seed+1, ...; edges: also
    all-ones sizes and an empty launch where the contracts allow one. Comparison: exact (NaN equals
    NaN) unless rtol/atol or ulps is given. library: device arrays (bridge, cupy, torch). grid/block:
    for kernels whose contract cannot derive a grid (tuples or callables of the sizes dict); by
    default a suggested grid covering every array. values: name -> array or fn(rng, shape, dtype);
    shapes / scalars: fixed sizes (as for `arguments`), e.g. when a tile kernel cannot state a relation.
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
    if ref.contract is not None and cand.contract is not None:
        check_compatible(reference, candidate, dtypes=dtypes, options=options)
        layout_spec: Any = joint_layouts(ref.contract, cand.contract, driver.contract) \
            if layouts == "mixed" else layouts
    else:
        layout_spec = layouts
    on_device = _where(ref, cand, device)
    base_seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
    written = tuple(a["name"] for a in driver.contract.args if a["kind"] == "array" and a.get("access") != "read")
    report = EquivalenceReport(ref.label, cand.label, written)
    tol = _compare.tolerance_text(rtol, atol, ulps)
    for n, (sz, s, edge) in enumerate(_launches(trials, size, base_seed, edges)):
        try:
            gen = generate(driver.contract, Request(size=sz, seed=s, edge=edge, layouts=layout_spec,
                                                    values=values, shapes=shapes, scalars=scalars,
                                                    library="numpy", view_library=library))
        except UnsatisfiableContractError as e:
            if edge is None:
                raise
            report.skipped.append(f"edge case {edge!r}: {e}")
            continue
        trial = f"launch {n + 1} ({'edge case ' + repr(edge) if edge else f'trial {n + 1} of {trials}'})"
        got_ref = _run_side(ref, gen, on_device, library, grid, block, options, trial)
        got_cand = _run_side(cand, gen, on_device, library, grid, block, options, trial)
        for name in written:
            m = _compare.first_mismatch(got_ref[name], got_cand[name], rtol, atol, ulps)
            if m is not None:
                rec = gen.records.get(name)
                initial = rec.recipe.apply(rec.base) if rec is not None else None
                raise _mismatch_error(ref, cand, gen, name, m, initial, tol, trial)
        report.launches.append(f"seed={gen.seed}: {gen.describe()}")
    return report
