"""Autotuning tile kernels: candidate configurations (partition tile shapes, constants, and the kernel
options num_warps / persistent), pruned by the compiler and the launch contract before any timing, timed with CUDA events, and the pick kept in the
disk cache so later processes launch at once.

    gemm_tuned = tile.autotune(gemm, [tile.Config(tiles={"c": (128, 256)}, constants={"bk": 64}),
                                      tile.Config(tiles={"c": (128, 128)}, constants={"bk": 64})])
    gemm_tuned(a, b, c)          # partitions as plain arrays, constants left out

A configuration may also set `num_warps=` and `persistent=` (None: the kernel's own); each distinct
option set runs on its own kernel object, as `tile.kernel(fn, num_warps=..., persistent=...)` would.

Why prune first: a configuration that cannot run on this device (too much shared memory, a tile the
lowering refuses, arguments its contract refuses) is dropped with its reason, never timed or
launched. Why time on scratch copies: a kernel that reads and writes an argument (or writes it
partly) must not see its data changed by the tuning runs; the call itself then runs once on the
caller's arrays. The pick is keyed by the kernel's source (and what it references), the candidate
list, the argument signature with every extent rounded up to a power of two (shape buckets), the
device's arch, the driver and the toolchain. `KB_AUTOTUNE=0` (or `off`/`false`/`no`) makes calls
deterministic: the first configuration that survives pruning, no timing, nothing stored. The
simulator ignores tuning (`simulate` runs the first configuration).
"""
from __future__ import annotations

import hashlib
import json
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from bridge.settings import env_switch
from dsl.cache import DiskCache, cache_enabled, source_fingerprint, toolchain_fingerprint

FLUSH_BYTES = 256 * 2**20           # written before every timed launch: evicts the inputs from L2


@dataclass(frozen=True)
class Config:
    """One candidate: tile shapes per partition parameter, values per tile.Constant parameter, and
    optionally the kernel options num_warps / persistent (None: the kernel's own) and lowering switches
    fixed over the kernel's (`lowering`, as @tile.kernel(lowering=) takes them)."""
    tiles: dict[str, tuple[int, ...]] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    num_warps: int | None = None
    persistent: bool | None = None
    lowering: dict[str, Any] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        found = {k: v for k, v in (("num_warps", self.num_warps), ("persistent", self.persistent)) if v is not None}
        return {**found, "lowering": dict(sorted(self.lowering.items()))} if self.lowering else found

    def text(self) -> str:
        d: dict[str, Any] = {"tiles": {k: list(v) for k, v in sorted(self.tiles.items())},
                             "constants": dict(sorted(self.constants.items()))}
        if self.options():               # configurations without options keep their earlier text
            d["options"] = self.options()
        return json.dumps(d, sort_keys=True, default=repr)


def tuning_enabled() -> bool:
    return env_switch("KB_AUTOTUNE", True)


def _bucket(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def signature_key(args: Sequence[Any]) -> list:
    """Per argument: dtype and extents rounded up to powers of two (arrays), or the type (scalars)."""
    return [[x[0], list(x[1])] if isinstance(x, tuple) else x for x in _signature(args)]


def _signature(args: Sequence[Any]) -> tuple:
    """signature_key as a hashable tuple: per argument (dtype, bucketed extents) or the type's name."""
    out: list = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None and not isinstance(a, (int, float, bool, np.generic)):
            out.append((str(getattr(a, "dtype", "?")), tuple(_bucket(int(n)) for n in shape)))
        else:
            out.append(type(a).__name__)
    return tuple(out)


class Tuned:
    """A tile kernel with candidate configurations; call it like the kernel, with partitions as plain
    arrays and constants left out. `timing_runs` counts timed launches in this process (0 when every
    pick came from the disk cache); `picks` maps a tuning key to the chosen Config."""

    def __init__(self, kernel: Any, configs: Sequence[Config | dict], *, reps: int = 10,
                 timer: Callable[[Any, tuple], float] | None = None) -> None:
        from dsl.tile.host import TileKernel
        if not isinstance(kernel, TileKernel):
            raise TypeError(f"tile.autotune: expected a @tile.kernel, got {type(kernel).__name__}")
        cfgs = [c if isinstance(c, Config) else Config(dict(c.get("tiles", {})), dict(c.get("constants", {})),
                                                       c.get("num_warps"), c.get("persistent"),
                                                       dict(c.get("lowering") or {}))
                for c in configs]
        if not cfgs:
            raise ValueError(f"tile.autotune({kernel.name}): give at least one configuration")
        names = {s.name: s.kind for s in kernel.specs}
        for c in cfgs:
            for n in c.tiles:
                if names.get(n) != "partition":
                    raise ValueError(f"tile.autotune({kernel.name}): tiles[{n!r}]: not a tile.Partition parameter")
            for n in c.constants:
                if names.get(n) != "const":
                    raise ValueError(f"tile.autotune({kernel.name}): constants[{n!r}]: not a tile.Constant parameter")
            _check_options(kernel, c)
            missing = [s.name for s in kernel.specs if s.kind == "const" and s.name not in c.constants]
            if missing:
                raise ValueError(f"tile.autotune({kernel.name}): configuration {c.text()} gives no value for "
                                 f"the constant(s) {', '.join(missing)}")
        if not isinstance(reps, int) or reps < 1:
            raise ValueError(f"tile.autotune({kernel.name}): reps must be an int >= 1, got {reps!r}")
        self.kernel, self.configs, self.reps = kernel, cfgs, reps
        self._timer = timer                       # (config, call args) -> ms; None: CUDA events
        self.timing_runs = 0
        self.picks: dict[str, Config] = {}        # documented cache: tuning key -> pick (this process)
        self.pruned: dict[str, dict[str, str]] = {}   # tuning key -> {config text: why it was dropped}
        self._lock = threading.Lock()
        self._variants: dict[tuple, Any] = {}     # documented cache: (num_warps, persistent, lowering) -> kernel
        # documented cache: (arch, _signature(args)) -> pick, so a call whose pick is known costs a dict lookup,
        # not the tuning key (its source fingerprint and candidate texts were ~300 us a call on a 2-core CPU:
        # more than a 50-us kernel, whose launches then waited for the host)
        self._by_signature: dict[tuple, Config] = {}
        self._texts = [c.text() for c in cfgs]     # the candidates as the key and the disk entries name them
        self._source: str | None = None           # documented cache: the kernel's source fingerprint (first key)

    # ------------------------------------------------------------------------------ public
    def __call__(self, *args: Any) -> None:
        config = self.select(*args)
        self.kernel_for(config)(*self.call_args(config, args))

    def simulate(self, *args: Any) -> None:
        """The first configuration on the CPU simulator (tuning needs a GPU)."""
        self.kernel_for(self.configs[0]).simulate(*self.call_args(self.configs[0], args))

    def kernel_for(self, config: Config) -> Any:
        """The kernel object `config` runs on: the kernel itself, or one with its options (its own
        dispatcher and caches, as a separate @tile.kernel would have)."""
        k = self.kernel
        fixed = tuple(sorted({**dict(k.lowering), **(config.lowering or {})}.items()))
        opts = (config.num_warps if config.num_warps is not None else k.num_warps,
                config.persistent if config.persistent is not None else k.persistent, fixed)
        if opts == (k.num_warps, k.persistent, k.lowering):
            return k
        if opts not in self._variants:
            from dsl.tile.host import TileKernel
            self._variants[opts] = TileKernel(k.pyfunc, opts[0], opts[1], k.lineinfo, k.requires, k.group_m,
                                              k.launch, fixed)
        return self._variants[opts]

    def call_args(self, config: Config, args: tuple) -> tuple:
        return self.kernel.contract_call(args, tile_shapes=config.tiles, constants=config.constants)

    def key(self, args: tuple, arch: str) -> str:
        if self._source is None:          # the kernel's source does not change in a process
            self._source = source_fingerprint(self.kernel.pyfunc)
        parts = [self._source, json.dumps(self._texts), json.dumps(signature_key(args)), arch, _driver_text(),
                 toolchain_fingerprint()]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def select(self, *args: Any, arch: str | None = None) -> Config:
        """The configuration these arguments use: this process's pick, the disk cache's, or a new one."""
        if arch is None:
            import bridge
            arch = bridge.current_device().arch
        fast = (arch, _signature(args))
        pick = self._by_signature.get(fast)
        if pick is not None:
            return pick
        key = self.key(args, arch)
        with self._lock:
            pick = self.picks.get(key)
            if pick is None:
                pick = self._load(key) if tuning_enabled() else None
                if pick is None:
                    pick = self._tune(key, args, arch)
                self.picks[key] = pick
            self._by_signature[fast] = pick
        return pick

    # ------------------------------------------------------------------------------ tuning
    def _viable(self, key: str, args: tuple, arch: str) -> list[Config]:
        """Configurations that compile for `arch`; the rest recorded in `pruned` with the reason."""
        out, why = [], self.pruned.setdefault(key, {})
        self._compile_side_by_side(args, arch)
        for c in self.configs:
            try:
                self.kernel_for(c).compile(self.call_args(c, args), arch)
            except Exception as exc:  # noqa: BLE001 - any compile refusal prunes the candidate
                why[c.text()] = f"does not compile: {type(exc).__name__}: {exc}"[:300]
                continue
            out.append(c)
        if not out:
            raise ValueError(f"tile.autotune({self.kernel.name}): no configuration compiles for {arch}: "
                             + "; ".join(f"{k} {v}" for k, v in why.items()))
        return out

    def _compile_side_by_side(self, args: tuple, arch: str) -> None:
        """The candidates not yet compiled in this process, compiled into the disk cache by forked workers
        (dsl/tile/parallel_compile.py), so _viable's compiles below are disk hits. Best effort: a candidate
        whose arguments or compile fail here is left to _viable, which reports it."""
        from dsl.tile.parallel_compile import compile_side_by_side, side_compile_possible
        if len(self.configs) < 2 or not side_compile_possible():
            return
        jobs = []
        for c in self.configs:
            kernel = self.kernel_for(c)
            try:
                sig, facts = kernel.specialisation(self.call_args(c, args))
            except Exception:  # noqa: BLE001 - refused arguments: _viable prunes the candidate with the reason
                continue
            if not kernel.compiled_in_process(sig, facts, arch):
                jobs.append((kernel, sig, facts, arch))
        compile_side_by_side(jobs)

    def _tune(self, key: str, args: tuple, arch: str) -> Config:
        viable = self._viable(key, args, arch)
        if not tuning_enabled():
            return viable[0]
        times: dict[int, float] = {}
        timer = self._timer or self._event_timer(args)
        why = self.pruned[key]
        for i, c in enumerate(self.configs):
            if c not in viable:
                continue
            try:
                times[i] = timer(c, self._scratch_args(c, args))
            except _Refused as exc:        # the launch contract refused it: never launched
                why[c.text()] = str(exc)
                continue
            self.timing_runs += self.reps
        if not times:
            raise ValueError(f"tile.autotune({self.kernel.name}): every configuration was refused: "
                             + "; ".join(f"{k} {v}" for k, v in why.items()))
        best = min(times, key=times.get)
        self._store(key, best, times)
        return self.configs[best]

    def _scratch_args(self, config: Config, args: tuple) -> tuple:
        """`args` with every argument the kernel writes replaced by a fresh device array of its shape
        and dtype (with a timer of the caller's: the arguments as given)."""
        if self._timer is not None:
            return self.call_args(config, args)
        import bridge
        written = {s.name for s in self.kernel.specs if s.kind == "partition"}
        flat, k = [], 0
        for s in self.kernel.specs:
            if s.kind == "const":
                continue
            a = args[k]
            k += 1
            flat.append(bridge.empty_like(a) if s.name in written else a)
        return self.call_args(config, tuple(flat))

    def _event_timer(self, args: tuple) -> Callable[[Config, tuple], float]:
        import bridge
        from bridge.errors import LaunchContractError
        stream = bridge.current_stream()
        flush = bridge.empty((FLUSH_BYTES // 4,), "uint32")
        reps = self.reps

        def time_one(config: Config, call: tuple) -> float:
            kernel = self.kernel_for(config)
            try:
                kernel(*call)                          # warm-up; validated first: a refusal prunes
            except LaunchContractError as exc:
                raise _Refused(f"refused by its launch contract: {type(exc).__name__}: {exc}"[:300]) from None
            ms = []
            for r in range(reps):
                bridge.array._memset(flush, r & 0xFF, 4)
                e0 = stream.record()
                kernel(*call)
                e1 = stream.record()
                e1.synchronize()
                ms.append(e0.elapsed_time(e1))
            return statistics.median(ms)
        return time_one

    # ------------------------------------------------------------------------------ disk
    # Picks are disk-cache entries (`<key>.pick`), sealed and checked by the one DiskCache code: a pick
    # this cache did not write, or one for another candidate list, is a miss and the kernel is re-tuned.
    def _load(self, key: str) -> Config | None:
        data = DiskCache().load_pick(key) if cache_enabled() else None
        if data is None or data.get("configs") != self._texts:
            return None
        i = data.get("pick")
        return self.configs[i] if type(i) is int and 0 <= i < len(self.configs) else None

    def _store(self, key: str, best: int, times: dict[int, float]) -> None:
        if not cache_enabled():
            return                            # a refused or read-only cache only costs re-tuning later
        DiskCache().store_pick(key, {"kernel": self.kernel.name, "pick": best,
                                     "configs": self._texts,
                                     "ms": {str(i): round(t, 6) for i, t in times.items()}})


class _Refused(Exception):
    pass


def _check_options(kernel: Any, c: Config) -> None:
    """A configuration's kernel options, checked as @tile.kernel checks them (ValueError naming it)."""
    from dsl.options import OptionError, check_tile_options
    from dsl.tile.switches import check_lowering
    try:
        check_tile_options(c.num_warps, c.persistent if c.persistent is not None else False)
        check_lowering(c.lowering)
    except OptionError as err:
        raise ValueError(f"tile.autotune({kernel.name}): configuration {c.text()}: {err}") from None


def _driver_text() -> str:
    try:
        from bridge import _native
        return str(_native.driver_version())
    except Exception:  # noqa: BLE001 - no driver: the simulator, keys for tests
        return "no-driver"


def autotune(kernel: Any, configs: Sequence[Config | dict], *, reps: int = 10) -> Tuned:
    """A callable that runs `kernel` with the fastest of `configs` for each argument signature (shape
    buckets), tuned on first use and remembered in the disk cache (module docstring)."""
    return Tuned(kernel, configs, reps=reps)


__all__ = ["Config", "Tuned", "autotune", "tuning_enabled", "signature_key"]
