"""`python -m dsl doctor` / `kernelbridge doctor`: the full environment report.

The runtime's sections come from `bridge.doctor` (driver, GPUs, the CUDA tools as the one locator finds
them, driver vs toolkit, C++ kernels and their arch coverage, KB_* settings, peers); this adds what only
the DSL knows: whether LLVM's NVPTX back end emits PTX for each arch the DSL supports (and for the GPUs
here), whether the driver accepts the PTX ISA the DSL writes for them, and the disk cache.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Sequence

from bridge import doctor as bridge_doctor
from bridge.doctor import Section

# CUDA release -> newest PTX ISA its driver JIT accepts (PTX ISA release notes). A driver newer than the
# last entry accepts at least that ISA.
DRIVER_PTX_ISA: dict[tuple[int, int], int] = {
    (11, 0): 70, (11, 1): 71, (11, 2): 72, (11, 3): 73, (11, 4): 74, (11, 5): 75, (11, 6): 76,
    (11, 7): 77, (11, 8): 78, (12, 0): 80, (12, 1): 81, (12, 2): 82, (12, 3): 83, (12, 4): 84,
    (12, 5): 85, (12, 6): 85, (12, 8): 87, (12, 9): 88, (13, 0): 90,
}
_PROBE_IR = 'target triple = "nvptx64-nvidia-cuda"\ndefine void @kb_doctor_probe() {\n  ret void\n}\n'


def driver_ptx_isa(api_version: int) -> int:
    """Newest PTX ISA (major*10+minor) the driver of `api_version` (e.g. 13000) accepts; 0 if unknown."""
    cuda = (api_version // 1000, api_version % 1000 // 10)
    known = [isa for release, isa in sorted(DRIVER_PTX_ISA.items()) if release <= cuda]
    return known[-1] if known else 0


def _isa(v: int) -> str:
    return f"{v // 10}.{v % 10}"


def probe_arch(arch: int) -> dict[str, Any]:
    """Emit PTX for an empty function through the DSL's own target machine for `arch`; NVPTX supports
    the arch when the header names it and the PTX ISA the DSL asks for."""
    import llvmlite.binding as llvm
    from dsl.backend.target import PTX_VERSION, initialise_llvm, target_machine
    want = PTX_VERSION[arch]
    try:
        initialise_llvm()
        mod = llvm.parse_assembly(_PROBE_IR)
        ptx = target_machine(arch).emit_assembly(mod)
    except Exception as exc:  # noqa: BLE001 - reported
        return {"ok": False, "ptx_isa": _isa(want), "error": f"{type(exc).__name__}: {exc}"}
    target = re.search(r"^\.target\s+(\w+)", ptx, re.MULTILINE)
    version = re.search(r"^\.version\s+(\d+)\.(\d+)", ptx, re.MULTILINE)
    got_target = target.group(1) if target else None
    got_isa = int(version.group(1)) * 10 + int(version.group(2)) if version else None
    ok = got_target == f"sm_{arch}" and got_isa == want
    err = None if ok else f"emitted .target {got_target} .version {_isa(got_isa) if got_isa else '?'}"
    return {"ok": ok, "ptx_isa": _isa(want), "error": err}


def llvm_section(driver: Section) -> Section:
    try:
        import llvmlite
        import llvmlite.binding as llvm
        from dsl.backend.target import PTX_VERSION
    except Exception as exc:  # noqa: BLE001
        return Section("llvm", {"nvptx": False, "error": str(exc)}, [f"LLVM NVPTX: llvmlite not importable "
                                                                     f"({exc})"], ["no LLVM NVPTX target"])
    archs = {f"sm_{cc}": probe_arch(cc) for cc in PTX_VERSION}
    bad = [a for a, r in archs.items() if not r["ok"]]
    data: dict[str, Any] = {"llvmlite": llvmlite.__version__,
                            "llvm": ".".join(map(str, llvm.llvm_version_info)),
                            "nvptx": len(bad) < len(archs), "archs": archs, "gpus": {}}
    isas = sorted({r["ptx_isa"] for r in archs.values()}, key=lambda v: tuple(map(int, v.split("."))))
    state = "NVPTX ok" if not bad else f"NVPTX FAILS for {', '.join(bad)}"
    lines = [f"LLVM NVPTX: llvmlite {data['llvmlite']}, LLVM {data['llvm']}: {state} "
             f"(PTX for {', '.join(archs)}; ISA {isas[0]}..{isas[-1]})"]
    problems = [] if not bad else (["no LLVM NVPTX target"] if len(bad) == len(archs)
                                   else [f"LLVM NVPTX cannot emit PTX for {', '.join(bad)}"])
    api = driver.data.get("api_version") or 0
    for gpu in driver.data.get("gpus", []):
        cc = gpu["cc"][0] * 10 + gpu["cc"][1]
        entry = _gpu_ptx(cc, api, archs)
        data["gpus"][str(gpu["index"])] = entry
        lines.append(f"  GPU {gpu['index']} (sm_{cc}): {entry['text']}")
        if not entry["ok"]:
            problems.append(f"DSL kernels cannot run on GPU {gpu['index']}: {entry['text']}")
    return Section("llvm", data, lines, problems)


def _gpu_ptx(cc: int, api_version: int, archs: dict[str, dict]) -> dict[str, Any]:
    probe = archs.get(f"sm_{cc}")
    if probe is None:
        return {"ok": False, "text": f"sm_{cc} is not an arch the DSL supports ({', '.join(archs)})"}
    if not probe["ok"]:
        return {"ok": False, "text": f"LLVM NVPTX cannot emit PTX for sm_{cc} ({probe['error']})"}
    want = int(probe["ptx_isa"].replace(".", ""))
    accepts = driver_ptx_isa(api_version)
    if accepts and want > accepts:
        return {"ok": False, "text": f"the DSL writes PTX ISA {probe['ptx_isa']}, the driver accepts up to "
                                     f"{_isa(accepts)}: update the driver"}
    known = f"up to {_isa(accepts)}" if accepts else "an unknown ISA"
    return {"ok": True, "text": f"the DSL writes PTX ISA {probe['ptx_isa']}; the driver accepts {known}: ok"}


def cache_section() -> Section:
    from dsl.cache_cli import cache_info, describe, network_warning, trust_warning
    info = cache_info()
    warnings = [w for w in (trust_warning(info), network_warning(info)) if w]
    return Section("cache", info, describe(info), warnings=warnings)


def full_sections() -> list[Section]:
    parts = bridge_doctor.bridge_sections()
    driver = next(s for s in parts if s.key == "driver")
    # the DSL's sections follow the toolkit ones (before settings and peers)
    at = next(i for i, s in enumerate(parts) if s.key == "overrides")
    return parts[:at] + [llvm_section(driver), cache_section()] + parts[at:]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    bridge_doctor.add_arguments(ap)


def run(args: argparse.Namespace) -> int:
    return bridge_doctor.execute(args, full_sections, full=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsl doctor", description=bridge_doctor.DESCRIPTION)
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
