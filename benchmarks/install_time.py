"""Install and test times on the 2-core CPU machine against issue 31's bars, measured in one run into one
JSON record that benchmarks/write_docs.py renders in docs/benchmarks.md.

    python benchmarks/install_time.py                  # all steps -> docs/results/cpu_install_<UTC date>.json
    python benchmarks/install_time.py --dry-run        # checks and prints the plan; builds nothing
    python benchmarks/install_time.py --steps command2_install,quick_tests   # no rebuild

Steps, in this order, each timed as the wall seconds of the whole command, from the checkout:

    cold_no_toolkit   rm -rf build/<wheel tag>; KB_CUDA_HOME=none pip install --no-build-isolation --no-deps -e .
    cold_toolkit      rm -rf build/<wheel tag>; pip install --no-build-isolation --no-deps -e .
    command2_install  pip install -r requirements-test.txt   (README command 2's install, already satisfied)
    quick_tests       python -m pytest -m "not slow" -q

The toolkit build runs last of the builds, so the editable install it leaves is the usual one; if a
build step fails or is interrupted, one more toolkit install restores it. The record then says whether
`import bridge._native` works from the checkout (`restored`). Each build step records what the build
found (`bridge/_build_info.json`): a "no toolkit" build that found nvcc does not count. Run it on a quiet
machine: the record keeps the load average before and after every step, and the core count.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip"]
EDITABLE = [*PIP, "install", "--no-build-isolation", "--no-deps", "-e", "."]
# name -> (title, command, extra environment, bar in seconds): the bars of issue 31's "Done when".
STEPS: dict[str, tuple[str, list[str], dict[str, str], float]] = {
    "cold_no_toolkit": ("cold install, no CUDA toolkit", EDITABLE, {"KB_CUDA_HOME": "none"}, 60.0),
    "cold_toolkit": ("cold install, CUDA toolkit", EDITABLE, {}, 90.0),
    "command2_install": ("README command 2 before pytest starts (test tools already installed)",
                         [*PIP, "install", "-r", "requirements-test.txt"], {}, 30.0),
    "quick_tests": ("quick test subset", [sys.executable, "-m", "pytest", "-m", "not slow", "-q"], {}, 180.0),
}
BUILDS = ("cold_no_toolkit", "cold_toolkit")
INFO = ("import json, bridge.cpp_kernels as c, bridge._native as n; "
        "print(json.dumps({'native': n.__file__, 'build_info': c.build_info()}))")


def build_dir() -> Path:
    """build/{wheel_tag} of [tool.scikit-build] for this Python, e.g. build/cp311-cp311-linux_x86_64."""
    v = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return ROOT / "build" / f"{v}-{v}{sys.abiflags}-{re.sub(r'[-.]', '_', sysconfig.get_platform())}"


def _text(argv: list[str]) -> str:
    """First line of a tool's output, or why there is none."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    return ((p.stdout or p.stderr).strip().splitlines() or ["—"])[0]


def machine() -> dict:
    """Where the numbers come from: cores, load, OS, the tools' versions and the commit."""
    commit = _text(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    return {"cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
            "platform": platform.platform(), "python": platform.python_version(),
            "pip": _text([*PIP, "--version"]).split(" from ")[0], "cmake": _text(["cmake", "--version"]),
            "cxx": _text([os.environ.get("CXX", "c++"), "--version"]), "commit": commit,
            "uncommitted_changes": dirty}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def uptime() -> str:
    return _text(["uptime"]) if shutil.which("uptime") else "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def installed_build() -> dict:
    """What the editable install now holds: the native extension's file and bridge/_build_info.json."""
    p = subprocess.run([sys.executable, "-c", INFO], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr)[-1500:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _judge(name: str, step: dict, found: dict) -> None:
    """PASS needs the command to succeed within its bar and, for a build, to have built what it says."""
    info = found.get("build_info") or {}
    nvcc, kernels = (info.get("nvcc") or {}).get("path"), (info.get("cpp_kernels") or {}).get("built")
    notes = []
    if name in BUILDS:
        step["nvcc"], step["cpp_kernels_built"] = nvcc, kernels
        if "error" in found:
            notes.append("the build left no importable bridge._native")
        elif name == "cold_no_toolkit" and nvcc:
            notes.append(f"nvcc was found ({nvcc}): not a build without a toolkit")
        elif name == "cold_toolkit" and not kernels:
            notes.append("the C++ kernels were not built: not a build with a toolkit")
    if step["rc"] != 0:
        notes.append(f"exit code {step['rc']}")
    step["note"] = "; ".join(notes)
    step["pass"] = not notes and step["seconds"] <= step["bar_s"]


def run_step(name: str, dry: bool) -> dict:
    """One timed step (in a dry run: its command printed, nothing run)."""
    title, argv, extra, bar = STEPS[name]
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
    shown = " ".join(f"{k}={v}" for k, v in extra.items()) + (" " if extra else "") + " ".join(
        "python" if a == sys.executable else (f'"{a}"' if " " in a else a) for a in argv)
    step = {"name": name, "title": title, "command": shown, "bar_s": bar, "load_before": _load()}
    if name in BUILDS:
        step["command"] = f"rm -rf {build_dir().relative_to(ROOT)}; {shown}"
    print(f"install_time: {name}: {step['command']}", flush=True)
    if dry:
        return {**step, "seconds": None, "rc": None, "pass": None, "note": "dry run: not run"}
    if name in BUILDS:
        shutil.rmtree(build_dir(), ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    step.update(seconds=round(time.perf_counter() - t0, 1), rc=p.returncode, load_after=_load())
    out = (p.stdout + p.stderr).strip()
    if name == "quick_tests":      # pytest's last line ("N passed, M skipped in T s"); warnings go to stderr
        tally = [ln for ln in p.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
        step["summary"] = tally[-1].strip(" =") if tally else (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode != 0:
        step["output_tail"] = out[-3000:]
    _judge(name, step, installed_build() if name in BUILDS else {})
    print(f"install_time: {name}: {step['seconds']} s (bar {bar:g} s) {'PASS' if step['pass'] else 'FAIL'}"
          + (f" - {step['note']}" if step["note"] else ""), flush=True)
    return step


def restore(record: dict) -> None:
    """After the builds: a toolkit install unless the last build step was a good one; then check it."""
    builds = [s for s in record["steps"] if s["name"] in BUILDS]
    if builds and not (builds[-1]["name"] == "cold_toolkit" and builds[-1]["rc"] == 0):
        print("install_time: restoring the editable install (a toolkit build)", flush=True)
        subprocess.run(EDITABLE, cwd=ROOT, capture_output=True, text=True)
    found = installed_build()
    record["restored"] = "error" not in found
    record["restore_check"] = found.get("native") or found.get("error", "")[-500:]
    print(f"install_time: import bridge._native from the checkout: {'OK' if record['restored'] else 'FAILED'}"
          f" ({record['restore_check']})", flush=True)


def preflight(names: list[str]) -> list[str]:
    """What would make the run meaningless, found before anything is removed or rebuilt."""
    problems = []
    if "cold_toolkit" in names and not (shutil.which("nvcc") or os.environ.get("KB_CUDA_HOME")
                                        or Path("/usr/local/cuda/bin/nvcc").exists()):
        problems.append("no nvcc on PATH, no KB_CUDA_HOME and no /usr/local/cuda: cold_toolkit needs a toolkit")
    if any(n in BUILDS for n in names):
        for module in ("scikit_build_core", "pybind11", "cuda.pathfinder"):
            probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
            if probe.returncode != 0:
                problems.append(f"{module} is not importable: --no-build-isolation builds need it installed")
    if not (ROOT / "requirements-test.txt").exists():
        problems.append("requirements-test.txt is missing")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"comma-separated, run in this order: {', '.join(STEPS)} (default: all)")
    ap.add_argument("--out", type=Path, help="the JSON record (default: docs/results/cpu_install_<UTC date>.json; "
                                             "a dry run: a temporary file)")
    ap.add_argument("--dry-run", action="store_true", help="check the preconditions, print the commands, "
                    "write a record marked dry_run (write_docs refuses it); nothing is removed or built")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.steps.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        ap.error(f"--steps: expected names from {', '.join(STEPS)}, got {unknown or args.steps!r}")
    problems = preflight(names)
    for p in problems:
        print(f"install_time: {p}", file=sys.stderr)
    if problems:
        return 2
    now = datetime.now(timezone.utc)
    out = args.out or (Path(tempfile.gettempdir()) / "cpu_install_dry_run.json" if args.dry_run else
                       ROOT / "docs" / "results" / f"cpu_install_{now:%Y-%m-%d_%H%M}.json")
    load = os.getloadavg()
    if load[0] > 0.5:
        print(f"install_time: the machine is not quiet (load average {load[0]:.2f}): the times will be inflated",
              file=sys.stderr)
    record = {"kind": "cpu_install", "format": 1, "dry_run": args.dry_run, "date": f"{now:%Y-%m-%d %H:%M} UTC",
              "machine": machine(), "uptime_before": uptime(), "steps": []}
    try:
        for name in names:
            record["steps"].append(run_step(name, args.dry_run))
    finally:
        if not args.dry_run:
            restore(record)
        record["uptime_after"] = uptime()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"install_time: wrote {out}")
    ran = [s for s in record["steps"] if s["pass"] is not None]
    return 0 if args.dry_run or (all(s["pass"] for s in ran) and record.get("restored")) else 1


if __name__ == "__main__":
    sys.exit(main())
