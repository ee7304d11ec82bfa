"""`python -m bridge doctor` / `kernelbridge-doctor`: what this machine offers the kernelbridge runtime.

Why a separate tool: most failures in the field are environmental (no driver, a toolkit newer than the
driver, C++ kernels built without nvcc, a stray override); the doctor names them in one run and never
fails itself on a machine without a GPU. It asks the same toolkit locator as the compiler
(`bridge.toolkit`), so it cannot say "not found" about a tool the DSL uses. This is the runtime's half
(no DSL import); `python -m dsl doctor` adds LLVM NVPTX, the PTX ISA and the DSL cache.

The report is data first (`collect()` → sections; `--json` prints it), text second (`render`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

FORMAT = 1
TOOLS = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "compute-sanitizer")
FULL_DOCTOR = "python -m dsl doctor"

# Every KB_* environment setting this version reads, and what it does (the doctor lists the ones in effect).
SETTINGS: dict[str, str] = {
    "KB_CUDA_HOME": "CUDA toolkit root for kernelbridge ('none': ignore installed toolkits)",
    "KB_NVCC": "nvcc executable", "KB_PTXAS": "ptxas executable", "KB_CUOBJDUMP": "cuobjdump executable",
    "KB_NVDISASM": "nvdisasm executable", "KB_COMPUTE_SANITIZER": "compute-sanitizer executable",
    "KB_LIBDEVICE": "libdevice.10.bc file", "KB_CUDA_INCLUDE": "directory holding cuda.h (build only)",
    "KB_CACHE": "DSL disk cache on/off", "KB_CACHE_DIR": "DSL disk cache directory",
    "KB_DUMP": "DSL compiler stages dumped", "KB_DUMP_DIR": "directory of DSL stage dumps",
    "KB_SIMULATE": "run DSL kernels on the CPU simulator", "KB_REQUIRE_GPU": "tests: skipped GPU tests fail",
    "KB_SIM_CP_ASYNC_LANDING": "simulator: cp.async lands at its wait (default) or at issue",
    "KB_SIM_TMA_LANDING": "simulator: a TMA copy lands at issue (default) or at the first mbarrier wait on it",
    "KB_SIM_SHARED_RACES": "simulator: 1 checks shared-memory loads and stores for races no barrier orders",
    "KB_SIM_BANK_CONFLICTS": "simulator: 1 counts shared-memory bank conflicts by access site and logs the conflicted ones",
    "KB_REQUIRE_GPUS": "tests: skipped multi-GPU tests fail",
    "KB_TEST_SEED": "tests: random seed", "KB_SANITIZER": "gpu_check: compute-sanitizer tools to run",
    "KB_MAX_SPECIALISATIONS": "specialisations of one DSL kernel before a warning",
    "KB_NVTX": "NVTX ranges per launch", "KB_LINEINFO": "PTX line tables of DSL kernels (0: off)", "KB_FAST_INTAKE": "fast torch/CuPy intake paths (0: off)", "KB_FUZZ_SECONDS": "fuzz: seconds per target",
    "KB_FUZZ_SEED": "fuzz: seed", "KB_FUZZ_MEMORY_MB": "fuzz: worker address-space limit",
    "KB_FUZZ_RSS_MB": "fuzz: memory growth of one input that is a finding",
    "KB_FUZZ_RECYCLE_MB": "fuzz: worker memory before replacement",
    "KB_REPRO_ISOLATED": "tests: one interpreter per reproducer",
    "KB_AUTOTUNE": "tile.autotune timing (0: first viable configuration, no timing)",
    "KB_AUTOTUNE_JOBS": "worker processes compiling tile.autotune candidates (1: none)",
    "KB_TILE_TC_MATMUL": "tile.matmul outside GEMM loops on the tensor cores (default on; 0: portable FMA path)",
    "KB_TILE_WGMMA_PRODUCTS": "sm_90: such products on warpgroup MMA where they fit (default on; 0: mma.sync)",
    "KB_TILE_GEMM_PIPELINE": "sm_90 TMA GEMM loop: sync (default, a barrier per k tile) or ws (a "
                             "producer warpgroup, empty mbarriers)",
    "KB_TILE_TF32_TRANSPOSE": "sm_90: tf32 GEMM with a row-major B on wgmma through registers (default off: mma.sync)",
    "KB_TILE_LOOP_PIPELINE": "sm_90 loops' product operands: cp.async (default), tma (a TMA ring) or ws (+ a producer warpgroup)",
    "KB_TILE_LOOP_STAGES": "stages of the TMA ring of KB_TILE_LOOP_PIPELINE (2 or 3)",
    "KB_TILE_SETMAXNREG": "warp-specialised kernels: setmaxnreg consumer/producer registers (default off)",
    "KB_TILE_PRODUCT_OVERLAP": "ring loops: the last product issued behind the next iteration's first (default off)",
    "KB_TILE_WS_CHAIN": "tile kernels under KB_TILE_LOOP_PIPELINE=ws: later loops over the same ring loads share the producer's ring (default off)",
    "KB_TILE_EARLY_LOADS": "tile kernels: element loads of arrays the kernel never writes issued at the start of their block, not at their first use (default off)",
    "KB_TILE_INTERIOR_TILES": "tile kernels: blocks whose tiles lie inside their arrays run a copy without bounds tests (default off)",
    "KB_TILE_PINGPONG": "tile kernels: under KB_TILE_LOOP_PIPELINE=ws, the two consumer warpgroups' products run in turns (default off)",
    "KB_TILE_PINGPONG_SPAN": "tile kernels: where ping-pong turns open and close (loop, program; default loop)",
    "KB_TILE_PRODUCED_A_BUFFERS": "tile kernels: buffers of an A operand the producer copies in a persistent block (1, 2; default 1)",
    "KB_TILE_PRODUCT_BATCHES": "tile kernels: consecutive independent sm_90 products issued together, waited for together (default off)",
    "KB_TILE_LAZY_WAITS": "tile kernels: sm_90 product statements issued as early as their operands allow, waited for where their results are read (default off)",
    "KB_TILE_LAZY_BARRIERS": "tile kernels: a relayout through shared memory ends without a barrier of its own; the next one orders its readers (default off)",
    "KB_TILE_STAGING_SWAP": "tile kernels: f32 accumulator pairs staged for TMA stores / reduce-adds without bank conflicts (odd rows two fragments over; default on)",
    "KB_TILE_WARP_VECTORS": "tile kernels: a 1-D f32 row broadcast over accumulator columns is held by every warp and shuffled onto them (default off)",
    "KB_TILE_REVERSE_BLOCKS": "tile kernels: blocks take the tiles in reverse order, the last first (default off)",
    "KB_TILE_DIV_RECIPROCAL": "tile kernels: divisions may multiply by the divisor's reciprocal (default off)",
    "KB_TILE_TMA_STORE": "tile kernels: sm_90 accumulator tiles stored by TMA through swizzled shared memory (default off)",
    "KB_TILE_STAGING_ROUNDS": "tile kernels: a persistent GEMM keeps its full ring, its TMA-store tile stored in rounds (default off)",
    "KB_TILE_NC_LOADS": "tile kernels: read-only arrays' vector loads through ld.global.nc (default on) or plain ld.global",
    "KB_TILE_BLOCK_GROUP": "tile kernels: runs of tiles a kernel's tile.block_order(run) takes in turn (1, 2, 4, 8, 16; default 1)",
    "KB_TILE_PERSISTENT_ORDER": "tile kernels: the order a persistent kernel's blocks take the tiles (strided, snake; default strided)",
    "KB_TILE_STORE_BY_WARPGROUP": "tile kernels: under KB_TILE_TMA_STORE each warpgroup stages and stores its own rows of a tile (default off)",
    "KB_TILE_LOAD_HINT": "tile kernels: cache qualifiers on vector loads (none, L2::128B, L2::256B, L1::no_allocate.L2::256B; default none)",
    "KB_TILE_WGMMA_SLICES": "sm_90 products of warpgroups owning more than 64 rows on wgmma, one m64 slice a wgmma (default off)",
    "KB_TILE_FP_FUSION": "tile kernels: a float multiply feeding an add fuses into fma (default off)",
    "KB_TILE_FTZ": "tile kernels: f32 math flushes denormals to zero, exp2 one ex2.approx.ftz (default off)",
    "KB_TILE_WGMMA_A": "sm_90 products: a loop-invariant A from registers or staged in shared memory (default registers)",
}   # docs/configuration.md is the full table (interop_tests/package/test_configuration_table.py)


@dataclass
class Section:
    """One part of the report: JSON-able `data`, its text `lines`, and what it found wrong."""
    key: str
    data: dict
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ sections
def kernelbridge_section() -> Section:
    import bridge
    data: dict[str, Any] = {"version": bridge.__version__, "python": sys.version.split()[0],
                            "platform": f"{platform.system().lower()} {platform.machine()}"}
    lines = [f"kernelbridge {data['version']} on Python {data['python']} ({data['platform']})"]
    problems = []
    try:
        from bridge import _native
        data["native"] = {"ok": True, "path": _native.__file__, "error": None}
        lines.append(f"native extension: {_native.__file__}")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        data["native"] = {"ok": False, "path": None, "error": f"{type(exc).__name__}: {exc}"}
        lines.append(f"native extension: NOT importable ({exc})")
        problems.append("native extension missing: reinstall kernelbridge")
    return Section("kernelbridge", data, lines, problems)


def driver_section() -> Section:
    from bridge import _driver
    if not _driver.available():
        return Section("driver", {"available": False, "version": None, "api_version": None,
                                  "reason": _driver.reason(), "gpus": []},
                       [f"CUDA driver: none ({_driver.reason()})"])
    drv = int(_driver.call("cuDriverGetVersion"))
    from bridge.device import Device, device_count
    gpus = []
    lines = [f"CUDA driver: {drv // 1000}.{drv % 1000 // 10} (driver API version {drv})"]
    for i in range(device_count()):
        d = Device(i)
        gpus.append({"index": i, "name": d.name, "cc": [d.cc[0], d.cc[1]], "sm_count": d.sm_count,
                     "memory_gib": round(d.total_memory / 2**30, 1)})
        lines.append(f"  GPU {i}: {d.name}, compute capability {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, "
                     f"{d.total_memory / 2**30:.1f} GiB")
    return Section("driver", {"available": True, "version": f"{drv // 1000}.{drv % 1000 // 10}",
                              "api_version": drv, "reason": "", "gpus": gpus}, lines)


def toolkit_section() -> Section:
    from bridge import toolkit
    data: dict[str, Any] = {}
    lines = ["CUDA tools (one locator: bridge.toolkit over cuda.pathfinder" +
             ("; KB_CUDA_HOME=none ignores installed toolkits" if toolkit.system_toolkit_disabled() else "")
             + "):"]
    problems = []
    for name, found in toolkit.locate_all().items():
        entry = found.as_dict()
        version = ""
        if found.path and name in TOOLS:
            version = toolkit.tool_version(found.path)
        elif found.path and name == "nvjitlink":
            version = _nvjitlink_version()
        entry["version"] = version or None
        data[name] = entry
        label = "cuda.h" if name == "cuda-include" else "nvJitLink" if name == "nvjitlink" else name
        text = found.describe() if not version else f"{found.path} (found by {found.found_by}; {version})"
        lines.append(f"{label}: {text}")
        if not found and name in ("nvcc", "ptxas", "libdevice"):
            problems.append(f"{name} not found" + (f" ({found.problem})" if found.problem else ""))
    return Section("toolkit", data, lines, problems)


def _nvjitlink_version() -> str:
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
        return f"version {major}.{minor}"
    except Exception as exc:  # noqa: BLE001
        return f"version unknown ({type(exc).__name__})"


def compatibility_section(driver: Section, tools: Section) -> Section:
    """Driver vs toolkit: cubins from a toolkit of the driver's major CUDA version load (minor version
    compatibility); PTX from a newer toolkit does not JIT; a newer major does not load at all."""
    from bridge.toolkit import cuda_version_of
    tk_name, tk = None, None
    for name in ("ptxas", "nvcc"):
        tk = cuda_version_of(tools.data.get(name, {}).get("version") or "")
        if tk:
            tk_name = name
            break
    data: dict[str, Any] = {"driver_cuda": driver.data.get("version"),
                            "toolkit_cuda": f"{tk[0]}.{tk[1]}" if tk else None, "toolkit_from": tk_name}
    problems: list[str] = []
    if tk is None:
        data["status"], text = "unknown", "no toolkit version (ptxas/nvcc not found)"
    elif not driver.data.get("available"):
        data["status"], text = "no driver", f"toolkit CUDA {tk[0]}.{tk[1]} ({tk_name}); no driver to compare"
    else:
        drv = driver.data["api_version"]
        dv = (drv // 1000, drv % 1000 // 10)
        if tk[0] > dv[0]:
            data["status"] = "toolkit newer (major)"
            text = (f"toolkit CUDA {tk[0]}.{tk[1]} is a newer major version than the driver "
                    f"(CUDA {dv[0]}.{dv[1]}): its cubins and PTX will not load; update the driver")
            problems.append("toolkit newer than the driver (major version)")
        elif tk > dv:
            data["status"] = "toolkit newer (minor)"
            text = (f"toolkit CUDA {tk[0]}.{tk[1]} is newer than the driver (CUDA {dv[0]}.{dv[1]}): its cubins "
                    "load (minor version compatibility), PTX it writes does not JIT")
        else:
            data["status"] = "ok"
            text = f"driver CUDA {dv[0]}.{dv[1]} >= toolkit CUDA {tk[0]}.{tk[1]} ({tk_name}): ok"
    return Section("compatibility", data, [f"driver vs toolkit: {text}"], problems)


def _fatbin_archs(path: str) -> tuple[list[int], list[int], str]:
    from bridge.fatbin import ModuleFormatError, fatbin_entries
    try:
        with open(path, "rb") as f:
            entries = fatbin_entries(f.read())
    except (OSError, ModuleFormatError) as exc:
        return [], [], f"unreadable ({exc})"
    sass = sorted({e.arch for e in entries if e.kind == "elf"})
    ptx = sorted({e.arch for e in entries if e.kind == "ptx"})
    return sass, ptx, ""


def coverage(sass: Sequence[int], ptx: Sequence[int], cc: Sequence[int]) -> str:
    """How a module runs on a device of compute capability `cc`: 'SASS sm_XY', 'PTX compute_XY (JIT)'
    or 'NOT loadable'. SASS runs on the same major with an equal or higher minor; PTX JITs upward."""
    dev = cc[0] * 10 + cc[1]
    fits = [a for a in sass if a // 10 == cc[0] and a % 10 <= cc[1]]
    if fits:
        return f"SASS sm_{max(fits)}"
    jit = [a for a in ptx if a <= dev]
    if jit:
        return f"PTX compute_{max(jit)} (JIT)"
    return "NOT loadable"


def cpp_kernels_section(driver: Section) -> Section:
    from bridge import cpp_kernels
    have = cpp_kernels.available()
    info = cpp_kernels.build_info()
    data: dict[str, Any] = {"installed": bool(have), "status": cpp_kernels.status(), "build_info": info,
                            "modules": {}}
    lines = [str(data["status"])]
    problems = [] if have else ["C++ kernels not built"]
    for name in have:
        p = str(cpp_kernels.path(name))
        sass, ptx, err = _fatbin_archs(p)
        per_gpu = {str(g["index"]): coverage(sass, ptx, g["cc"]) for g in driver.data.get("gpus", [])}
        data["modules"][name] = {"path": p, "sass": sass, "ptx": ptx, "error": err or None, "gpus": per_gpu}
        text = err or (f"SASS {', '.join(f'sm_{a}' for a in sass) or '-'}; "
                       f"PTX {', '.join(f'compute_{a}' for a in ptx) or '-'}")
        on = "".join(f"; GPU {i}: {how}" for i, how in per_gpu.items())
        lines.append(f"  {name}: {text}{on}")
        for i, how in per_gpu.items():
            if how == "NOT loadable":
                problems.append(f"C++ kernel {name} has no code for GPU {i}")
    return Section("cpp_kernels", data, lines, problems)


def overrides_section() -> Section:
    found = {k: v for k, v in sorted(os.environ.items()) if k.startswith("KB_")}
    data = {k: {"value": v, "meaning": SETTINGS.get(k)} for k, v in found.items()}
    lines = ["KB_* settings in effect: " + ("none" if not found else "")]
    warnings = []
    for k, v in found.items():
        meaning = SETTINGS.get(k)
        lines.append(f"  {k}={v} ({meaning or 'not a setting kernelbridge knows: a typo?'})")
        if meaning is None:
            warnings.append(f"{k} is set but kernelbridge does not read it")
    return Section("overrides", data, lines, warnings=warnings)


# (module, array class path, stream class path): what to probe for DLPack / __cuda_stream__ support.
PEERS = (("torch", "torch.Tensor", "torch.cuda.Stream"), ("cupy", "cupy.ndarray", "cupy.cuda.Stream"),
         ("jax", "jax.Array", None), ("numba", "numba.cuda.cudadrv.devicearray.DeviceNDArray",
                                      "numba.cuda.cudadrv.driver.Stream"))


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - try a shorter module path
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _probe(array_cls: str, stream_cls: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        cls = _resolve(array_cls)
        out["dlpack"] = hasattr(cls, "__dlpack__")
        out["cuda_array_interface"] = hasattr(cls, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001
        out["dlpack"] = out["cuda_array_interface"] = None
    if stream_cls is None:
        out["cuda_stream"] = False
    else:
        try:
            out["cuda_stream"] = hasattr(_resolve(stream_cls), "__cuda_stream__")
        except Exception:  # noqa: BLE001
            out["cuda_stream"] = None
    return out


def _yn(v: Any) -> str:
    return "?" if v is None else "yes" if v else "no"


def peers_section() -> Section:
    data: dict[str, Any] = {}
    lines = []
    for mod, array_cls, stream_cls in PEERS:
        if importlib.util.find_spec(mod) is None:
            data[mod] = {"installed": False}
            lines.append(f"{mod}: not installed")
            continue
        try:
            m = importlib.import_module(mod)
        except Exception as exc:  # noqa: BLE001
            data[mod] = {"installed": True, "version": None, "error": f"{type(exc).__name__}: {exc}"}
            lines.append(f"{mod}: not importable ({type(exc).__name__})")
            continue
        entry = {"installed": True, "version": str(getattr(m, "__version__", "?")), **_probe(array_cls, stream_cls)}
        data[mod] = entry
        lines.append(f"{mod}: {entry['version']} (DLPack {_yn(entry['dlpack'])}, CAI "
                     f"{_yn(entry['cuda_array_interface'])}, __cuda_stream__ {_yn(entry['cuda_stream'])})")
    for mod in ("triton", "cuda.bindings", "cuda.pathfinder"):     # triton: bridge.foreign's Triton kernels
        try:
            version = str(getattr(importlib.import_module(mod), "__version__", "?"))
        except Exception as exc:  # noqa: BLE001
            version = f"not importable ({type(exc).__name__})"
        data[mod] = {"installed": not version.startswith("not"), "version": version}
        lines.append(f"{mod}: {version}")
    return Section("peers", data, lines)


# ------------------------------------------------------------------------------------ foreign
# (label, module bridge.foreign imports, distribution whose version is reported first): the systems whose
# kernels bridge.foreign wraps (docs/interop.md). numba-cuda is numba's CUDA target, a package of its own.
FOREIGN = (("triton", "triton", "triton"), ("cupy", "cupy", None), ("numba-cuda", "numba.cuda", "numba-cuda"),
           ("numba", "numba", "numba"))


def _dist_version(dist: str | None) -> str | None:
    if dist is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version(dist)
    except (ImportError, PackageNotFoundError, ValueError):
        return None


def _cupy_source_compiler() -> str:
    """Which compiler bridge.foreign uses for CuPy source (RawKernel code, generated ElementwiseKernels)."""
    from bridge.foreign.compile_cuda import nvrtc_problem
    from bridge.toolkit import locate
    problem = nvrtc_problem()
    if not problem:
        return "NVRTC"
    return "nvcc" if locate("nvcc").path else f"none (NVRTC: {problem}; no nvcc)"


def foreign_section() -> Section:
    """Which foreign kernel systems are importable here, and their versions (bridge.foreign wraps their
    kernels; it imports each only when its adapter is called)."""
    data: dict[str, Any] = {}
    lines = []
    for label, module, dist in FOREIGN:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing = exc.name is not None and module.startswith(exc.name)
            entry: dict[str, Any] = {"importable": False, "installed": not missing,
                                     "error": None if missing else f"{type(exc).__name__}: {exc}"}
        except Exception as exc:  # noqa: BLE001 - an installed package that fails to import is reported
            entry = {"importable": False, "installed": True, "error": f"{type(exc).__name__}: {exc}"[:300]}
        else:
            version = _dist_version(dist) or str(getattr(mod, "__version__", "?"))
            entry = {"importable": True, "installed": True, "version": version}
        data[label] = entry
        lines.append(f"foreign {label}: " + (entry["version"] if entry["importable"] else
                                             "not installed" if not entry["installed"] else
                                             f"not importable ({entry['error']})"))
    data["cupy_source_compiler"] = _cupy_source_compiler()
    lines.append(f"foreign CuPy source (RawKernel, ElementwiseKernel) compiled by: {data['cupy_source_compiler']}")
    return Section("foreign", data, lines)


# ------------------------------------------------------------------------------------ report
def bridge_sections() -> list[Section]:
    """The runtime's sections, in report order."""
    head, driver, tools = kernelbridge_section(), driver_section(), toolkit_section()
    return [head, driver, tools, compatibility_section(driver, tools), cpp_kernels_section(driver),
            overrides_section(), peers_section(), foreign_section()]


def assemble(sections: list[Section], full: bool) -> dict:
    """The JSON report: one key per section, plus problems, warnings, verdict and exit status."""
    report: dict[str, Any] = {"format": FORMAT, "doctor": "full" if full else "bridge"}
    problems = [p for s in sections for p in s.problems]
    warnings = [w for s in sections for w in s.warnings]
    for s in sections:
        report[s.key] = s.data
    native_ok = report["kernelbridge"]["native"]["ok"]
    gpus = len(report["driver"]["gpus"])
    if not native_ok:
        verdict = "BROKEN: the native extension is missing; reinstall kernelbridge"
    elif gpus == 0:
        verdict = "no GPU: compile, simulate and test host-side only" + (
            f" ({'; '.join(problems)})" if problems else "")
    elif problems:
        verdict = f"GPU ready, with problems: {'; '.join(problems)}"
    else:
        verdict = f"ready: {gpus} GPU(s), compiler and driver present"
    report.update(problems=problems, warnings=warnings, verdict=verdict, exit_status=0 if native_ok else 1)
    return report


def render(sections: list[Section], report: dict, full: bool) -> list[str]:
    lines = [line for s in sections for line in s.lines]
    if not full:
        lines.append(f"(the DSL's part: LLVM NVPTX, PTX ISA, the DSL cache: run `{FULL_DOCTOR}` or "
                     "`kernelbridge doctor`)")
    lines += [f"warning: {w}" for w in report["warnings"]]
    lines.append(f"verdict: {report['verdict']}")
    return lines


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The doctor's options (shared by both doctors and every command line that hosts one)."""
    import bridge
    ap.add_argument("--json", action="store_true", help="print the report as one JSON object")
    ap.add_argument("--version", action="version", version=f"kernelbridge {bridge.__version__}")


DESCRIPTION = ("Report what this machine offers kernelbridge (driver, GPUs, CUDA tools and how each was "
               "found, C++ kernels, settings, peer libraries) and one verdict line. Exit status 0 unless "
               "kernelbridge itself is broken.")


def execute(args: argparse.Namespace, sections: Callable[[], list[Section]], full: bool,
            out: Callable[[str], None] = print) -> int:
    """Collect, print (text or --json) and return the exit status."""
    parts = sections()
    report = assemble(parts, full)
    if getattr(args, "json", False):
        out(json.dumps(report, indent=2, default=str))
    else:
        for line in render(parts, report, full):
            out(line)
    return report["exit_status"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernelbridge-doctor", description=DESCRIPTION)
    add_arguments(ap)
    return execute(ap.parse_args(argv), bridge_sections, full=False)


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
