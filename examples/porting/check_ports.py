"""Check each DSL kernel of the walkthrough (dsl_kernels.py) against the C++ kernel it replaces.

Every C++ kernel (kernels/*.cu) declares its launch contract, so bridge.testing can generate inputs
that satisfy it and run the C++ kernel and its DSL port on the same ones (assert_equivalent):

    python examples/porting/check_ports.py             # GPU: C++ (built from kernels/) vs DSL
    python examples/porting/check_ports.py --cpu       # no GPU: DSL on the simulator vs NumPy

Before the comparison, the DSL kernel's contract must describe the same job as the C++ one
(check_compatible): the same arrays, dtypes and written arguments, and relations that accept each
other's launches. Both checks run on CPU machines too, from the contracts nvcc compiles into PTX.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import bridge
import bridge.testing as bt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dsl_kernels  # noqa: E402

SOURCES = {"blur3x3": "blur.cu", "histogram256": "histogram.cu", "normalize": "normalize.cu"}
UNIT = {"v": lambda rng, shape, dt: rng.random(shape, dtype=np.float32).astype(dt)}   # pixels in [0, 1)


def blur_ref(img, out):
    rows, cols = img.shape
    s = np.zeros(img.shape, np.float32)
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            s += img[np.clip(r + dr, 0, rows - 1), np.clip(c + dc, 0, cols - 1)]
    out[...] = s / np.float32(9)


def histogram_ref(v, hist):
    bins = np.clip((v * np.float32(256)).astype(np.int32), 0, 255)
    hist[...] += np.bincount(bins, minlength=256).astype(np.uint32)


def normalize_ref(v, lo, hi, out):
    out[...] = np.minimum(np.maximum((v - lo) / (hi - lo), np.float32(0)), np.float32(1))


# The histogram's threads range over v, not over the bins it writes: its contract derives no grid, so
# the launch gives one (as the C++ application does).
PORTS = {
    "blur3x3": (dsl_kernels.blur3x3, blur_ref, {}),
    "histogram256": (bt.configured(dsl_kernels.histogram256, grid=lambda s: (max(1, -(-s["v"][0] // 256)),)),
                     histogram_ref, {"values": UNIT, "size": 100_003}),
    "normalize": (dsl_kernels.normalize, normalize_ref, {"values": UNIT}),
}


def cpp_contracts() -> dict[str, str]:
    """The C++ kernels' contracts, from PTX compiled by nvcc (no GPU needed)."""
    from dsl.port import read_contracts
    out: dict[str, str] = {}
    for src in sorted(set(SOURCES.values())):
        out.update(read_contracts(HERE / "kernels" / src, None))
    return out


def check(cpu: bool, trials: int) -> None:
    contracts = cpp_contracts()
    for name, (port, ref, kw) in PORTS.items():
        kernel = port.kernel if isinstance(port, bt.configured) else port
        bt.check_compatible(contracts[name], kernel)
        if cpu:
            report = bt.assert_equivalent(ref, port, trials=trials, **kw)
        else:
            from dsl.port import load_cpp_kernel
            cpp = load_cpp_kernel(HERE / "kernels" / SOURCES[name], name)
            report = bt.assert_equivalent(cpp, port, trials=trials, **kw)
        print(report)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="simulator vs NumPy instead of the GPU vs C++")
    ap.add_argument("--trials", type=int, default=5)
    ns = ap.parse_args(argv)
    if not ns.cpu and not bridge.gpu_available():
        print(f"no GPU ({bridge.gpu_unavailable_reason()}): use --cpu", file=sys.stderr)
        return 2
    check(ns.cpu, ns.trials)
    print("PASS: every DSL kernel has its C++ kernel's contract and computes the same outputs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
