"""The compile pipeline: an ordered list of named stages, each dumpable, enterable in the middle.

One pipeline per programming model, sharing the tail from `verify` on:

    simt: frontend       (pyfunc, signature, options)  -> typed IR Function   dsl.frontend.build_ir
    tile: tile_frontend  (pyfunc, signature)           -> tile IR             dsl.tile.frontend
          tile_lower     tile IR (+ ctx.tile settings) -> typed IR Function   dsl.tile.lower
    both: verify         Function                      -> Function            dsl.ir.verify
          llvm_ir        Function                      -> LLVM IR text        dsl.backend.codegen.to_llvm_ir
          optimize       LLVM IR text                  -> optimised LLVM module  (+ libdevice, -O3)
          ptx            optimised module              -> PTX text

`compile_kernel` runs the SIMT one behind the disk cache (dsl/cache.py), dsl/tile/compile.py the tile
one. `run_pipeline(value, ctx, start=...)` starts anywhere (tests feed hand-built IR to "verify", or
tile IR to "tile_lower"). Dumps: `dump=("ir", "llvm_ir", ...)` or the environment
`KB_DUMP=stage1,stage2` (`all` for every stage) print each named stage's output to stderr, or into
`KB_DUMP_DIR/<kernel>.<stage>.txt` when that is set. The backend is imported lazily so a cache hit
never loads LLVM.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Sequence

from bridge.settings import env_directory, env_list, refused
from dsl.cache import CacheEntry, DiskCache, cache_enabled, cache_key
from dsl.errors import DslDeclarationError
from dsl.observe import compiled
from dsl.options import KernelOptions


# Plain classes rather than dataclasses: this module is imported on the cache-hit path (<= 5 ms).
class CompiledKernel:
    """PTX plus what the launcher needs. `ir` is None when the entry came from the disk cache."""
    __slots__ = ("ptx", "name", "contract_json", "ir", "metadata")

    def __init__(self, ptx: str, name: str, contract_json: str, ir: Any = None,
                 metadata: dict | None = None) -> None:
        self.ptx, self.name, self.contract_json, self.ir = ptx, name, contract_json, ir
        self.metadata = metadata if metadata is not None else {}

    def __repr__(self) -> str:
        return f"CompiledKernel(name={self.name!r}, ptx=<{len(self.ptx)} chars>, metadata={self.metadata!r})"


class StageError(DslDeclarationError, ValueError):
    """A stage name that is not one of the model's pipeline (`dump=`, `start=`, `stop=`, KB_DUMP):
    `argument` names the argument, `valid` lists the stages it may name."""

    def __init__(self, argument: str, message: str, valid: Sequence[str]) -> None:
        self.argument, self.valid = argument, tuple(valid)
        super().__init__(f"{argument}: {message}")


class CompileContext:
    """What every stage may read: the inputs, dump selection, and per-stage timings. `model` picks
    the pipeline ("simt" or "tile"); a tile context is handed its front stages (`front`) and carries
    its lowering settings in `tile` (both from dsl.tile.compile.tile_context)."""

    def __init__(self, pyfunc: Callable | None, signature: Sequence[Any], options: KernelOptions,
                 arch: str, dump: frozenset[str] = frozenset(), kernel_name: str = "kernel", *,
                 model: str = "simt", tile: Any = None, front: Sequence[Stage] | None = None) -> None:
        self.pyfunc, self.signature, self.options, self.arch = pyfunc, signature, options, arch
        self.dump = dump
        self.kernel_name = kernel_name
        names = stage_names(model)             # an unknown model is refused here
        front = _SIMT_FRONT if front is None and model == "simt" else tuple(front or ())
        if tuple(st.name for st in front) != FRONT_STAGE_NAMES[model]:
            raise ValueError(f"front: a {model} context needs the stages {', '.join(FRONT_STAGE_NAMES[model])} "
                             f"(dsl.tile.compile.tile_context hands a tile context its own), got "
                             f"{[st.name for st in front]}; the pipeline is {', '.join(names)}")
        self.model, self.front, self.tile = model, front, tile
        self.timings: dict[str, float] = {}
        # dsl.perf.SlowPath records any stage may add (where the kernel left the fast path, and why),
        # and the kernel's source line (file, line) for records about the kernel as a whole
        self.slow_paths: list = []
        self.kernel_loc: tuple[str, int] = ("", 0)


class Stage:
    """One named pipeline step: `run(value, ctx) -> value`; `render(value) -> str` for dumps."""
    __slots__ = ("name", "run", "render")

    def __init__(self, name: str, run: Callable[[Any, CompileContext], Any],
                 render: Callable[[Any], str] = str) -> None:
        self.name, self.run, self.render = name, run, render


# ---------------------------------------------------------------------------- stages
def _frontend(value: Any, ctx: CompileContext):
    from dsl.frontend import build_ir
    return build_ir(ctx.pyfunc, list(ctx.signature), ctx.options)


def _verify(fn, ctx: CompileContext):
    from dsl.ir.verify import verify_function
    ctx.kernel_name = fn.name
    return verify_function(fn)


def build_options(options: KernelOptions, arch: str, contract: bool = False, ftz: bool = False,
                  arcp: bool = False):
    """The code generator's options; `contract`: float products may fuse into fma (tile fp_fusion);
    `ftz`: f32 denormals flush to zero (tile ftz; a SIMT kernel's ftz= or fastmath= asks the same);
    `arcp`: a division may be a product with the divisor's reciprocal (tile div_reciprocal)."""
    from dsl.backend.builder import BuildOptions
    from dsl.backend.target import parse_arch
    pairs = frozenset(frozenset(p) for p in options.inplace)
    return BuildOptions(arch_cc=parse_arch(arch), fastmath=options.fastmath, contract=contract,
                        ftz=ftz or options.ftz or options.fastmath, arcp=arcp, inplace=pairs,
                        lineinfo=options.lineinfo, requires=tuple(options.requires))


def _llvm_ir(fn, ctx: CompileContext):
    from dsl.backend.codegen import to_llvm_ir
    ctx.kernel_loc = (fn.loc.file, fn.loc.line)
    switches = ctx.tile.switches if ctx.tile is not None else {}
    llvm_ir = to_llvm_ir(fn, build_options(ctx.options, ctx.arch, contract=bool(switches.get("fp_fusion")),
                                           ftz=bool(switches.get("ftz")),
                                           arcp=bool(switches.get("div_reciprocal"))))
    ctx.slow_paths.extend(llvm_ir.slow_paths)
    return llvm_ir


def _optimize(llvm_ir, ctx: CompileContext):
    from dsl.backend.codegen import optimize
    return optimize(llvm_ir, ctx.arch)


def _ptx(module, ctx: CompileContext):
    from dsl.backend.codegen import emit_ptx
    from dsl.perf import local_memory
    ptx = emit_ptx(module, ctx.arch)
    ctx.slow_paths.extend(local_memory(ptx, *ctx.kernel_loc))
    return ptx


def render_ir(fn) -> str:
    from dsl.ir.printer import format_function
    return format_function(fn)


# The one list of stage names: each model's own front stages, then the tail both share. The SIMT
# front stage is defined here; the tile model's (dsl/tile/stages.py) stand above this module, so a tile
# CompileContext is handed them (dsl.tile.compile.tile_context) instead of this module importing them.
_SHARED_TAIL: tuple[Stage, ...] = (
    Stage("verify", _verify, render_ir),
    Stage("llvm_ir", _llvm_ir),
    Stage("optimize", _optimize),
    Stage("ptx", _ptx),
)
_SIMT_FRONT: tuple[Stage, ...] = (Stage("frontend", _frontend, render_ir),)
FRONT_STAGE_NAMES: dict[str, tuple[str, ...]] = {"simt": ("frontend",), "tile": ("tile_frontend", "tile_lower")}
STAGES = (*_SIMT_FRONT, *_SHARED_TAIL)          # the SIMT pipeline (its long-standing name)
STAGE_NAMES = tuple(s.name for s in STAGES)
TILE_STAGE_NAMES = (*FRONT_STAGE_NAMES["tile"], *(s.name for s in _SHARED_TAIL))
ALL_STAGE_NAMES = tuple(dict.fromkeys(n for names in FRONT_STAGE_NAMES.values() for n in names)) + \
    tuple(s.name for s in _SHARED_TAIL)
_ALIASES = {"ir": "verify", "llvm": "llvm_ir", "opt": "optimize"}


def stage_names(model: str) -> tuple[str, ...]:
    """The stage names of `model` ("simt" or "tile"), in order."""
    try:
        return (*FRONT_STAGE_NAMES[model], *(s.name for s in _SHARED_TAIL))
    except (KeyError, TypeError):
        raise ValueError(f"model: expected one of {', '.join(FRONT_STAGE_NAMES)}, got {model!r}") from None


def pipeline_of(ctx: CompileContext) -> tuple[Stage, ...]:
    """The stages ctx's pipeline runs: its model's front stages, then the shared tail."""
    return (*ctx.front, *_SHARED_TAIL)


def _refuse_stages(argument: str, names: Iterable[str], model: str) -> StageError:
    """The error for stage `names` that `model`'s pipeline lacks: which model has each, if any."""
    valid = list(stage_names(model))
    notes = []
    for n in sorted(names):
        other = [m for m in FRONT_STAGE_NAMES if m != model and n in stage_names(m)]
        notes.append(f"{n!r} (a stage of {other[0]} kernels only)" if other else repr(n))
    extra = " (and all, ir, llvm, opt)" if argument == "dump" else ""
    return StageError(argument, f"unknown stage(s) for a {model} kernel: {', '.join(notes)}; its stages "
                                f"are {', '.join(valid)}{extra}", valid)


def parse_dump(spec: str | Iterable[str] | None, model: str = "simt") -> frozenset[str]:
    """'a,b' / ['a', 'b'] / None -> names of `model`'s stages; 'all' selects every one. A name
    that is not one of its stages is a StageError. None reads $KB_DUMP, which may name the stages
    of either model (it applies to every kernel the process compiles): each model dumps its own,
    and a name of no model is a ConfigurationError."""
    valid = list(stage_names(model))
    if spec is None:
        items = [_ALIASES.get(s, s) for s in env_list("KB_DUMP", (*ALL_STAGE_NAMES, *_ALIASES, "all"))]
        return frozenset(valid) if "all" in items else frozenset(n for n in items if n in valid)
    raw = spec.split(",") if isinstance(spec, str) else list(spec) if isinstance(spec, Iterable) else None
    if raw is None or not all(isinstance(s, str) for s in raw):
        raise StageError("dump", f"expected stage names ('a,b' or a list of names), got {spec!r}", valid)
    items = [s.strip() for s in raw if s.strip()]
    if "all" in items:
        return frozenset(valid)
    names = {_ALIASES.get(s, s) for s in items}
    unknown = names - set(valid)
    if unknown:
        raise _refuse_stages("dump", unknown, model)
    return frozenset(names)


def _emit_dump(stage: Stage, value: Any, ctx: CompileContext) -> None:
    text = stage.render(value)
    out_dir = env_directory("KB_DUMP_DIR", create=True)
    if out_dir is None:
        print(f"// ===== {ctx.kernel_name}: stage {stage.name} =====\n{text}", file=sys.stderr)
        return
    path = out_dir / f"{ctx.kernel_name}.{stage.name}.txt"
    try:
        path.write_text(text)
    except OSError as exc:      # no permission, disk full, ...: the setting is what to change
        raise refused("KB_DUMP_DIR", str(out_dir), f"a writable directory (writing {path.name}: "
                                                   f"{exc.strerror or exc})") from None


def run_pipeline(value: Any, ctx: CompileContext, start: str | None = None, stop: str = "ptx") -> Any:
    """Run the stages of ctx.model's pipeline from `start` (default: its first) to `stop`
    (inclusive) on `value`; each named in ctx.dump is dumped."""
    stages = pipeline_of(ctx)
    names = [s.name for s in stages]
    start = names[0] if start is None else start
    for argument, name in (("start", start), ("stop", stop)):
        if name not in names:
            raise _refuse_stages(argument, [name], ctx.model)
    i, j = names.index(start), names.index(stop)
    if i > j:
        raise StageError("stop", f"{stop!r} comes before start {start!r} in the {ctx.model} pipeline "
                                 f"({', '.join(names)})", names)
    for stage in stages[i:j + 1]:
        t0 = time.perf_counter()
        value = stage.run(value, ctx)
        ctx.timings[stage.name] = time.perf_counter() - t0
        if stage.name in ctx.dump:
            _emit_dump(stage, value, ctx)
    return value


# ---------------------------------------------------------------------------- entry points
def compile_metadata(ctx: CompileContext, source: str) -> dict:
    """What a compile reports: arch, PTX ISA, LLVM, where the result came from (`source`), the
    seconds of each stage that ran, and the slow paths the stages recorded (dsl/perf.py: each is
    also logged here, once per compile, on `kernelbridge.perf`)."""
    from dsl.backend.target import llvm_version, parse_arch, ptx_version
    from dsl.perf import log_slow_paths, unique
    arch = f"sm_{parse_arch(ctx.arch)}"
    slow = unique(ctx.slow_paths)
    log_slow_paths(ctx.model, ctx.kernel_name, arch, slow)
    return {"arch": arch, "ptx_version": ptx_version(ctx.arch),
            "llvm": llvm_version(), "cache": source,
            "stage_seconds": {k: round(v, 6) for k, v in ctx.timings.items()},
            "slow_paths": [p.as_dict() for p in slow], "kernel_loc": list(ctx.kernel_loc)}


def compile_ir(fn, options: KernelOptions, arch: str, *, dump: str | Iterable[str] | None = None,
               contract_json: str | None = None) -> CompiledKernel:
    """Compile hand-built or frontend-built IR (no disk cache: there is no source to key it)."""
    ctx = CompileContext(None, [p.type for p in fn.params], options, arch, parse_dump(dump),
                         kernel_name=fn.name)
    ptx = run_pipeline(fn, ctx, start="verify")
    if contract_json is None:
        contract_json = _contract_json(fn, options)
    return CompiledKernel(ptx, fn.name, contract_json, fn, compile_metadata(ctx, "none"))


def _contract_json(fn, options: KernelOptions) -> str:
    from dsl.frontend import contract_for
    return contract_for(fn, options).to_json()


def compile_kernel(pyfunc: Callable, signature: Sequence[Any], options: KernelOptions | None = None,
                   arch: str = "sm_90", *, dump: str | Iterable[str] | None = None,
                   cache: DiskCache | None | bool = True) -> CompiledKernel:
    """Compile a @simt.kernel's Python function for one signature and arch (disk-cached).

    `cache`: True (the default directory), a DiskCache, or False. With `dump`, the disk cache is not
    read (so every stage runs and is dumped) but is still written."""
    start = time.perf_counter()
    options = options or KernelOptions()
    dumps = parse_dump(dump)
    disk = None
    if cache is not False and cache_enabled():
        disk = cache if isinstance(cache, DiskCache) else DiskCache()
    key = None
    if disk is not None and not dumps:
        key = cache_key(pyfunc, signature, options, arch)
        hit = disk.load(key)
        if hit is not None:
            meta = dict(hit.metadata, cache="disk", key=key)
            compiled("simt", hit.name, arch, "disk", time.perf_counter() - start, key)   # dsl/observe.py
            return CompiledKernel(hit.ptx, hit.name, hit.contract_json, None, meta)
    ctx = CompileContext(pyfunc, list(signature), options, arch, dumps,
                         kernel_name=getattr(pyfunc, "__name__", "kernel"))
    fn = run_pipeline(pyfunc, ctx, stop="verify")
    ptx = run_pipeline(fn, ctx, start="llvm_ir")
    contract = _contract_json(fn, options)
    meta = compile_metadata(ctx, "miss")
    if disk is not None:
        key = key or cache_key(pyfunc, signature, options, arch)
        disk.store(key, CacheEntry(ptx, fn.name, contract, meta))
        meta = dict(meta, key=key)
    compiled("simt", fn.name, arch, "miss" if disk is not None else "off", time.perf_counter() - start, key)
    return CompiledKernel(ptx, fn.name, contract, fn, meta)
