"""The compile pipeline: an ordered list of named stages, each dumpable, enterable in the middle.

    frontend  (pyfunc, signature, options)  -> typed IR Function      dsl.frontend.build_ir
    verify    Function                      -> Function               dsl.ir.verify
    llvm_ir   Function                      -> LLVM IR text           dsl.backend.codegen.to_llvm_ir
    optimize  LLVM IR text                  -> optimised LLVM module  (+ libdevice, -O3)
    ptx       optimised module              -> PTX text

`compile_kernel` runs them behind the disk cache (dsl/cache.py). `run_pipeline(value, start=...)`
starts anywhere (tests feed hand-built IR to "verify"). Dumps: `dump=("ir", "llvm_ir", ...)` or the
environment `KB_DUMP=stage1,stage2` (`all` for every stage) print each named stage's output to stderr,
or into `KB_DUMP_DIR/<kernel>.<stage>.txt` when that is set. The backend is imported lazily so a
cache hit never loads LLVM.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Sequence

from bridge.settings import env_directory, env_list, refused
from dsl.cache import CacheEntry, DiskCache, cache_enabled, cache_key
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


class CompileContext:
    """What every stage may read: the inputs, dump selection, and per-stage timings."""

    def __init__(self, pyfunc: Callable | None, signature: Sequence[Any], options: KernelOptions,
                 arch: str, dump: frozenset[str] = frozenset(), kernel_name: str = "kernel") -> None:
        self.pyfunc, self.signature, self.options, self.arch = pyfunc, signature, options, arch
        self.dump = dump
        self.kernel_name = kernel_name
        self.timings: dict[str, float] = {}


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


def build_options(options: KernelOptions, arch: str):
    from dsl.backend.builder import BuildOptions
    from dsl.backend.target import parse_arch
    pairs = frozenset(frozenset(p) for p in options.inplace)
    return BuildOptions(arch_cc=parse_arch(arch), fastmath=options.fastmath, inplace=pairs,
                        lineinfo=options.lineinfo, requires=tuple(options.requires))


def _llvm_ir(fn, ctx: CompileContext):
    from dsl.backend.codegen import to_llvm_ir
    return to_llvm_ir(fn, build_options(ctx.options, ctx.arch))


def _optimize(llvm_ir, ctx: CompileContext):
    from dsl.backend.codegen import optimize
    return optimize(llvm_ir, ctx.arch)


def _ptx(module, ctx: CompileContext):
    from dsl.backend.codegen import emit_ptx
    return emit_ptx(module, ctx.arch)


def _render_ir(fn) -> str:
    from dsl.ir.printer import format_function
    return format_function(fn)


STAGES: tuple[Stage, ...] = (
    Stage("frontend", _frontend, _render_ir),
    Stage("verify", _verify, _render_ir),
    Stage("llvm_ir", _llvm_ir),
    Stage("optimize", _optimize),
    Stage("ptx", _ptx),
)
STAGE_NAMES = tuple(s.name for s in STAGES)
_ALIASES = {"ir": "verify", "llvm": "llvm_ir", "opt": "optimize"}


def parse_dump(spec: str | Iterable[str] | None) -> frozenset[str]:
    """'a,b' / ['a', 'b'] / None (then $KB_DUMP, a ConfigurationError when it names an unknown stage)
    -> stage names; 'all' selects every stage."""
    if spec is None:
        items = list(env_list("KB_DUMP", (*STAGE_NAMES, *_ALIASES, "all")))
    else:
        items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if "all" in items:
        return frozenset(STAGE_NAMES)
    names = {_ALIASES.get(s, s) for s in items}
    unknown = names - set(STAGE_NAMES)
    if unknown:
        raise ValueError(f"dump: unknown stage(s) {sorted(unknown)}; stages are {', '.join(STAGE_NAMES)}")
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


def run_pipeline(value: Any, ctx: CompileContext, start: str = "frontend", stop: str = "ptx") -> Any:
    """Run stages start..stop (inclusive) on `value`; each named in ctx.dump is dumped."""
    if start not in STAGE_NAMES or stop not in STAGE_NAMES:
        raise ValueError(f"start/stop must be one of {', '.join(STAGE_NAMES)}")
    i, j = STAGE_NAMES.index(start), STAGE_NAMES.index(stop)
    for stage in STAGES[i:j + 1]:
        t0 = time.perf_counter()
        value = stage.run(value, ctx)
        ctx.timings[stage.name] = time.perf_counter() - t0
        if stage.name in ctx.dump:
            _emit_dump(stage, value, ctx)
    return value


# ---------------------------------------------------------------------------- entry points
def _metadata(ctx: CompileContext, source: str) -> dict:
    from dsl.backend.target import llvm_version, parse_arch, ptx_version
    return {"arch": f"sm_{parse_arch(ctx.arch)}", "ptx_version": ptx_version(ctx.arch),
            "llvm": llvm_version(), "cache": source,
            "stage_seconds": {k: round(v, 6) for k, v in ctx.timings.items()}}


def compile_ir(fn, options: KernelOptions, arch: str, *, dump: str | Iterable[str] | None = None,
               contract_json: str | None = None) -> CompiledKernel:
    """Compile hand-built or frontend-built IR (no disk cache: there is no source to key it)."""
    ctx = CompileContext(None, [p.type for p in fn.params], options, arch, parse_dump(dump),
                         kernel_name=fn.name)
    ptx = run_pipeline(fn, ctx, start="verify")
    if contract_json is None:
        contract_json = _contract_json(fn, options)
    return CompiledKernel(ptx, fn.name, contract_json, fn, _metadata(ctx, "none"))


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
    meta = _metadata(ctx, "miss")
    if disk is not None:
        key = key or cache_key(pyfunc, signature, options, arch)
        disk.store(key, CacheEntry(ptx, fn.name, contract, meta))
        meta = dict(meta, key=key)
    compiled("simt", fn.name, arch, "miss" if disk is not None else "off", time.perf_counter() - start, key)
    return CompiledKernel(ptx, fn.name, contract, fn, meta)
