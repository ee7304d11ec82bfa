"""What the bandwidth/throughput benchmarks share beyond `_common`: fair device timing (L2 flushed and
the GPU kept busy before every timed launch, implementations interleaved), input rotation, CUDA C++
compiled by nvcc on the spot, and the check every implementation passes before it is timed.

Why a flush before each timed launch: it evicts the inputs from L2 (so caches do not flatter), and
while the GPU works on it the host enqueues the timed launch, so the start event never waits for the
host (a launch's host overhead would otherwise be counted as device time).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:          # `python benchmarks/x.py` puts only benchmarks/ on the path
    sys.path.insert(0, str(ROOT))

L2_SAFE_BYTES = 200 * 2**20            # ~4x the H200 L2: below this, rotate >= 3 input sets
FLUSH_BYTES = 512 * 2**20              # written before every timed launch


def gpu_or_note(rep: Any) -> bool:
    """True when a GPU is usable; otherwise print 'no GPU', note why in the report and return False."""
    import bridge
    if bridge.gpu_available():
        return True
    why = bridge.gpu_unavailable_reason()
    print(f"no GPU: {why}")
    rep.notes.append(f"no GPU: {why}")
    return False


def input_sets(bytes_per_set: int) -> int:
    """How many independent input sets to rotate through (3 when one set could live in L2)."""
    return 3 if bytes_per_set < L2_SAFE_BYTES else 1


def time_interleaved(fns: dict[str, Callable[[int], Any]], reps: int, warm: int = 2,
                     flush_bytes: int = FLUSH_BYTES) -> dict[str, float]:
    """Median device time (ms) of one call of each fn, measured with bridge events on the current
    stream; fn(i) gets the repetition index (to rotate inputs). Implementations alternate within each
    repetition so clock changes hit all of them alike."""
    import bridge
    s = bridge.current_stream()
    for fn in fns.values():
        for i in range(warm):
            fn(i)
    flush = bridge.empty((flush_bytes // 4,), "uint32")
    fill = _fill_kernel()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        pending = []
        for name, fn in fns.items():
            fill(flush, r)
            e0 = s.record()
            fn(r)
            e1 = s.record()
            pending.append((name, e0, e1))
        for name, e0, e1 in pending:
            e1.synchronize()
            times[name].append(e0.elapsed_time(e1))
    return {k: statistics.median(v) for k, v in times.items()}


FILL_SRC = r"""
#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void __launch_bounds__(256) kb_fill(unsigned* __restrict__ buf, unsigned v, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) buf[i] = v;
}
KB_CONTRACT(kb_fill, KB_BLOCK(256), KB_ARGS(KB_ARRAY(buf, u32, 1, write), KB_SCALAR(v, u32), KB_SCALAR(n, i64)),
            KB_REQUIRES("len(buf) == n"), KB_GRID_FROM(buf));
"""
_FILL: list = []   # documented cache: the compiled L2-flush kernel of this process


def _fill_kernel() -> Callable[[Any, int], None]:
    """fill(buf, r): write r into every element of the uint32 array buf (a CUDA C++ kernel)."""
    if not _FILL:
        k = nvcc_module(FILL_SRC, "kb_fill").kb_fill
        _FILL.append(lambda buf, r: k(buf, np.uint32(r & 0xFFFFFFFF), len(buf)))
    return _FILL[0]


def device_arch() -> str:
    import bridge
    return bridge.current_device().arch


def nvcc_module(source: str, name: str, extra: list[str] | None = None) -> Any:
    """Compile CUDA C++ `source` (with KB_CONTRACT contracts) to a cubin for this GPU with `nvcc -O3`
    and load it with `bridge.load_module` (contracts come from the cubin itself)."""
    import bridge
    from bridge.toolkit import locate
    found = locate("nvcc")              # the one toolkit locator (KB_NVCC, CUDA_HOME, pathfinder, PATH)
    if found.path is None:
        raise FileNotFoundError(f"nvcc not found: {found.problem or 'not installed'}")
    nvcc = found.path
    with tempfile.TemporaryDirectory(prefix=f"kb_{name}_") as tmp:
        cu, cubin = os.path.join(tmp, f"{name}.cu"), os.path.join(tmp, f"{name}.cubin")
        Path(cu).write_text(source)
        cmd = [nvcc, "-cubin", "-O3", "-std=c++17", f"-arch={device_arch()}",
               f"-I{bridge.cpp_kernels.include_dir()}", *(extra or []), cu, "-o", cubin]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"nvcc failed for {name} ({' '.join(cmd)}):\n{p.stderr[-3000:]}")
        image = Path(cubin).read_bytes()
    return bridge.load_module(image, name=name)


def check_close(name: str, got: np.ndarray, ref: np.ndarray, rtol: float = 0.0, atol: Any = 0.0) -> None:
    """Raise AssertionError naming the implementation when `got` differs from the float64 reference.
    `atol` may be an array of ref's shape (a per-element error bound)."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise AssertionError(f"{name}: result shape {got.shape} != reference {ref.shape}")
    if rtol == 0 and np.ndim(atol) == 0 and atol == 0 and got.dtype == ref.dtype:
        bad = ~(got == ref)                      # bit-for-bit check without float64 copies
        got64, ref64 = got, ref
    else:
        got64, ref64 = got.astype(np.float64, copy=False), ref.astype(np.float64, copy=False)
        bad = ~(np.abs(got64 - ref64) <= atol + rtol * np.abs(ref64))
    if bad.any():
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        at = np.broadcast_to(atol, ref.shape).reshape(-1)[k] if np.ndim(atol) else atol
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.size} elements differ from the float64 "
                             f"reference (first at flat index {k}: got {got64.reshape(-1)[k]!r}, expected "
                             f"{ref64.reshape(-1)[k]!r}, rtol {rtol}, atol {float(at)!r}); not timing it")


def keep_first(store: list, f: Callable[[], Any]) -> Callable[[int], None]:
    """A launch fn for a peer that returns its result: the first result is kept for the check."""
    def run(i: int) -> None:
        r = f()
        if not store:
            store.append(r)
    return run


def exit_code(failed: list[str]) -> int:
    """A benchmark's rc: 1 (after naming them) when some implementations failed (a wrong result or
    an error: they were not timed), else 0."""
    if failed:
        print("FAILED (wrong results or errors, not timed):\n  " + "\n  ".join(failed))
        return 1
    return 0


class Ops:
    """Runs one op's implementations: check each once, time those that pass, record rows."""

    def __init__(self, rep: Any, reps: int) -> None:
        self.rep, self.reps = rep, reps
        self.failed: list[str] = []

    def exit_code(self) -> int:
        """1 (after naming them) when some of our implementations failed, else 0: the benchmark's rc."""
        return exit_code(self.failed)

    def run(self, op: str, impls: dict[str, tuple[Callable[[int], Any], Callable[[], None]]],
            ours: set[str], unit: str, work: float,
            extra: Callable[[float], dict] | None = None) -> dict[str, float]:
        """impls: name -> (launch fn, check fn). Returns name -> value in `unit` (work / seconds).
        `extra(value)`: more columns for each timed row."""
        passed: dict[str, Callable[[int], Any]] = {}
        for name, (fn, check) in impls.items():
            try:
                fn(0)
                check()
                passed[name] = fn
            except Exception as exc:  # noqa: BLE001 - reported below
                unsupported = type(exc).__name__ in ("TileCompileError", "DslCompileError", "NotImplementedError")
                msg = f"{op}: {name}: {type(exc).__name__}: {str(exc)[:400]}"
                if name in ours and not unsupported:
                    self.failed.append(msg)
                elif name not in ours:
                    self.rep.missing[f"{op}: {name}"] = msg[:300]
                self.rep.row(f"{op}: {name}", None, unit,
                             note=("not supported by dsl.tile: " if unsupported else "failed: ") + msg[:300])
        if not passed:
            return {}
        ms = time_interleaved(passed, reps=self.reps)
        vals = {k: work / (v * 1e-3) for k, v in ms.items()}
        for k, v in vals.items():
            self.rep.row(f"{op}: {k}", v, unit, ms=round(ms[k], 4), **(extra(v) if extra else {}))
        return vals
