"""Build and run every step of the porting example on the GPU; check the output never changes.

Steps (CMake option PORTING_STEP): 0 all CUDA C++, 1 blur from the DSL, 2 + histogram, 3 + normalize.
Each step's output file (normalised image + histogram) must be byte-identical to step 0's, and every
step must match the app's own CPU reference. Then the same pipeline runs from Python through the
bridge, once with the C++ fatbin's kernels and once with the DSL kernels, and must give the same bytes.

    python examples/porting/run_porting.py [--rows 1000 --cols 777] [--build build/porting]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STEPS = (0, 1, 2, 3)


def build_step(step: int, build_root: Path, arch: str) -> Path:
    """Configure + build one step; returns its build directory."""
    bdir = build_root / f"step{step}"
    cmake = shutil.which("cmake") or sys.exit("cmake not found")
    subprocess.run([cmake, "-S", str(HERE), "-B", str(bdir), f"-DPORTING_STEP={step}",
                    f"-DPORTING_ARCH={arch}", f"-DPython_EXECUTABLE={sys.executable}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([cmake, "--build", str(bdir), "-j", "4"], check=True, stdout=subprocess.DEVNULL)
    return bdir


def run_step(bdir: Path, rows: int, cols: int) -> tuple[bytes, str]:
    out = bdir / "out.bin"
    r = subprocess.run([str(bdir / "porting_app"), str(bdir / "porting_kernels.fatbin"), str(rows), str(cols),
                        str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{bdir.name}: porting_app failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return out.read_bytes(), r.stdout.strip()


def limits(hist: np.ndarray, n: int) -> tuple[np.float32, np.float32]:
    """The app's contrast limits (app/main.cpp `limits`), in the same float32 arithmetic."""
    acc = np.cumsum(hist.astype(np.int64))
    b_lo = int(np.count_nonzero(acc * 100 < n))
    b_hi = int(np.count_nonzero(acc * 100 <= n * 99))
    b_hi = max(b_hi, b_lo + 1)
    return np.float32(b_lo) / np.float32(256), np.float32(min(b_hi, 256)) / np.float32(256)


def python_pipeline(img: np.ndarray, fatbin: Path, use_dsl: bool) -> bytes:
    """The same three stages launched from Python through the bridge (C++ fatbin or DSL kernels)."""
    import bridge
    sys.path.insert(0, str(HERE))
    import dsl_kernels
    rows, cols = img.shape
    n = rows * cols
    d_img = bridge.from_host(img)
    d_blur = bridge.empty((rows, cols), "float32")
    d_hist = bridge.zeros(256, "uint32")
    d_out = bridge.empty(n, "float32")
    flat = d_blur.reshape(n)
    if use_dsl:
        dsl_kernels.blur3x3(d_img, d_blur)
        dsl_kernels.histogram256(flat, d_hist, grid=((n + 255) // 256,))
    else:
        mod = bridge.load_module(str(fatbin))
        mod.blur3x3(d_img, d_blur, np.int32(rows), np.int32(cols))
        mod.histogram256(flat, d_hist, np.int32(n))
    hist = d_hist.to_host()
    lo, hi = limits(hist, n)
    if use_dsl:
        dsl_kernels.normalize(flat, lo, hi, d_out)
    else:
        mod.normalize(flat, d_out, lo, hi, np.int32(n))
    return d_out.to_host().tobytes() + hist.astype(np.uint32).tobytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--cols", type=int, default=777)
    ap.add_argument("--build", default=str(ROOT / "build" / "porting"))
    ap.add_argument("--arch", default=None, help="SM number for the DSL kernels (default: the GPU's)")
    ns = ap.parse_args(argv)
    arch = ns.arch
    if arch is None:
        import bridge
        cc = bridge.current_device().cc
        arch = f"{cc[0]}{cc[1]}"
    build_root = Path(ns.build)
    outputs: dict[int, bytes] = {}
    for step in STEPS:
        bdir = build_step(step, build_root, arch)
        outputs[step], line = run_step(bdir, ns.rows, ns.cols)
        same = outputs[step] == outputs[STEPS[0]]
        print(f"{line}  identical_to_step0={same}")
        if not same:
            print(f"FAIL: step {step} output differs from step 0")
            return 1
    img = np.fromfile(build_root / f"step{STEPS[0]}" / "out.bin.input", dtype=np.float32).reshape(ns.rows, ns.cols)
    fatbin = build_root / f"step{STEPS[0]}" / "porting_kernels.fatbin"
    for use_dsl in (False, True):
        got = python_pipeline(img, fatbin, use_dsl)
        same = got == outputs[STEPS[0]]
        print(f"python + bridge ({'DSL' if use_dsl else 'C++ fatbin'} kernels): identical_to_step0={same}")
        if not same:
            print("FAIL: the Python-driven pipeline differs from the C++ application")
            return 1
    print("PASS: every porting step and the Python-driven pipeline give byte-identical output")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
