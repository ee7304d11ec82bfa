"""Host time per launch of a tiny kernel: bridge module kernels, DSL SIMT and tile kernels (validated)
with bridge / CuPy / torch arguments, against CuPy RawKernel, cuda.core, torch.add, Triton
and a C++ `<<<>>>` loop — all in one run on the same GPU, in interleaved rounds.

The host's speed drifts within a lease, so every path is timed once per round (the order rotates from
round to round) and each path's figure is the median over the rounds; the raw rounds go into the JSON.
The C++ floor is the same `<<<>>>` loop twice, each run once per round: built as a shared library and
run in this process (the floor the bars use), and as its own process (reported, for comparison): one
process's launches can run ~30% slower for a stretch than another's (seen on the H200), so only a floor
measured in this process, in the same stretch, is a fair peer.
Each bar is then measured on its own: ours and its peer in alternating chunks (a b a b ..., 8 chunks a
round, the order flipped every other round), so both see the same stretch of host speed; it is judged by
the median of its per-round ratios, and the pairs go into the JSON (`bar_pairs_us`).
The kernel is the same 4-argument vecadd everywhere (3 arrays + 1 int scalar, grid 1): nvcc PTX for the
module kernel and the peers, `@simt.kernel` and `@tile.kernel` for the DSL rows.

Bars (DESIGN §8, issues "Tile as first-class" and "launches at the driver's floor"): a validated module
launch with CuPy / torch arrays ≤ 1.35× the C++ floor, with bridge arrays ≤ 1.15×, each ≤ 1.0× CuPy
RawKernel; a DSL call (SIMT and tile, `k(...)` and `k[grid, block](...)`) ≤ 0.3 µs over the module call
with the same arguments; a tile launch ≤ 1.1× the SIMT launch with the same arguments. Issue 32: the same
Triton kernel wrapped by `bridge.foreign.triton` (compiled by Triton, validated and launched by us) ≤ 1.1×
the module launch with the same arguments (torch tensors) and ≤ 0.5× Triton's own JIT launch
(`kernel[grid](...)`); the wrapped kernel with Triton's scratch pointers passed per launch (ForeignKernel,
`drop_unused=False`) is a row, for comparison.
"""
from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import tempfile
import textwrap
import time
from typing import Callable

import numpy as np

from _common import Report, parse_args, try_import

from dsl import f32, i32, simt, tile


@simt.kernel(block=32, requires=["len(a) == len(c)", "len(b) == len(c)", "len(c) == n"])
def dsl_add(a: simt.Array[f32], b: simt.Array[f32], c: simt.DisjointSlice[f32], n: i32):
    """The same tiny vecadd in the DSL: launched through its native Dispatcher (validated)."""
    i = simt.thread.index_1d()
    c[i] = a[i] + b[i]


@tile.kernel(num_warps=1)
def tile_add(a: tile.Array[f32], b: tile.Array[f32], c: tile.Partition[f32]):
    """The same vecadd as a tile kernel (one 32-element tile per block, 1 warp)."""
    t = tile.bid(0)
    c.store(tile.load(a, t, c.tile_shape) + tile.load(b, t, c.tile_shape))


SRC = textwrap.dedent(r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
""")

LOOP = textwrap.dedent(r"""
#include <cstdio>
#include <cstdlib>
#include <chrono>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("ERR %s\n", cudaGetErrorString(e)); return 1; } } while (0)
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3000;
  float *a, *b, *c; CK(cudaMalloc(&a, 4)); CK(cudaMalloc(&b, 4)); CK(cudaMalloc(&c, 4));
  for (int i = 0; i < 2000; i++) add<<<1, 32>>>(a, b, c, 1);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) add<<<1, 32>>>(a, b, c, 1);
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  printf("%f\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  return 0;
}
""")


# The same loop as a shared library loaded into this process: the floor measured in the benchmark's own
# process and thread, right before each path it is paired with (a process's launches can run ~30% slower
# for a while than another process's: the separate-process floor is reported, the bars use this one).
FLOOR_LIB = textwrap.dedent(r"""
#include <chrono>
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
static float *a, *b, *c;
extern "C" double kb_floor_loop(int n) {
  if (a == nullptr) {
    if (cudaMalloc(&a, 4) != cudaSuccess || cudaMalloc(&b, 4) != cudaSuccess || cudaMalloc(&c, 4) != cudaSuccess) return -1;
    for (int i = 0; i < 200; i++) add<<<1, 32>>>(a, b, c, 1);
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) add<<<1, 32>>>(a, b, c, 1);
  auto t1 = std::chrono::steady_clock::now();
  if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return -1;
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}
""")
FLOOR_IN = "C++ <<<>>> loop, this process (floor)"
FLOOR_OWN = "C++ <<<>>> loop, own process"


class Paths:
    """Named launch callables, each checked for a correct result before it is timed."""

    def __init__(self) -> None:
        self.fns: dict[str, Callable[[], object]] = {}
        self.sync: dict[str, Callable[[], object]] = {}

    def add(self, name: str, fn: Callable[[], object], sync: Callable[[], object]) -> None:
        self.fns[name] = fn
        self.sync[name] = sync


def time_path(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def run_rounds(paths: Paths, floor_cmd: list[str] | None, floor_fn: Callable[[int], float] | None, rounds: int,
               n: int) -> dict[str, list[float]]:
    """Every path once per round (rotating order) and the C++ floor, in this process and as its own
    process, once per round; µs per launch. (The bars pair each path with its peer on their own.)"""
    raw: dict[str, list[float]] = {k: [] for k in paths.fns}
    if floor_fn:
        raw[FLOOR_IN] = []
    if floor_cmd:
        raw[FLOOR_OWN] = []
    names = list(paths.fns)
    for fn in paths.fns.values():       # warm every path (specialisations, plan caches, the driver)
        for _ in range(200):
            fn()
    for name in names:
        paths.sync[name]()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            raw[name].append(time_path(paths.fns[name], n))
            paths.sync[name]()
        if floor_fn:
            raw[FLOOR_IN].append(checked_floor(floor_fn, n))
        if floor_cmd:
            raw[FLOOR_OWN].append(float(subprocess.check_output(floor_cmd).decode().strip()))
    return raw


def checked_floor(floor_fn: Callable[[int], float], n: int) -> float:
    us = floor_fn(n)
    if us <= 0:
        raise RuntimeError("the in-process C++ floor loop failed (a CUDA runtime call)")
    return us


def in_process_floor(tmp: str, arch: str, missing: dict[str, str]) -> Callable[[int], float] | None:
    """kb_floor_loop of FLOOR_LIB, built with nvcc and loaded with ctypes (None, noted, when it cannot)."""
    src, lib = os.path.join(tmp, "floor.cu"), os.path.join(tmp, "libfloor.so")
    open(src, "w").write(FLOOR_LIB)
    try:
        subprocess.check_call(["nvcc", "-O2", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", src, "-o", lib])
        fn = ctypes.CDLL(lib).kb_floor_loop
    except Exception as exc:  # noqa: BLE001
        missing["C++ loop in this process"] = repr(exc)[:200]
        return None
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int]
    return fn


def main() -> None:
    args = parse_args(__doc__)
    rep = Report("launch overhead (host µs per launch, tiny kernel, 3 arrays + 1 scalar, interleaved rounds)")
    n, rounds = (500, 5) if args.quick else (2000, 21)
    import bridge
    from bridge.contract import ArgSpec, LaunchContract
    if not bridge.gpu_available():
        rep.notes.append(f"no GPU: {bridge.gpu_unavailable_reason()}")
        rep.finish(args.json)
        return
    tmp = tempfile.mkdtemp()
    cu = os.path.join(tmp, "add.cu")
    open(cu, "w").write(SRC)
    ptx_path = os.path.join(tmp, "add.ptx")
    cc = bridge.Device(0).cc
    arch = f"sm_{cc[0]}{cc[1]}"
    subprocess.check_call(["nvcc", "-ptx", f"-arch={arch}", "-O3", cu, "-o", ptx_path])
    ptx = open(ptx_path, "rb").read()
    contract = LaunchContract(
        "add", [ArgSpec.array("a", "f32", 1, access="read", abi="pointer"),
                ArgSpec.array("b", "f32", 1, access="read", abi="pointer"),
                ArgSpec.array("c", "f32", 1, access="write", abi="pointer"),
                ArgSpec.scalar("n", "i32")],
        block=32, requires=["len(a) == n", "len(b) == n", "len(c) == n"], grid_from="c")
    k = bridge.load_module(ptx, contracts={"add": contract}).add
    k_cfg = k[1, 32]
    dsl_cfg = dsl_add[1, 32]
    paths = Paths()

    def producer_rows(label: str, x, y, z, sync: Callable[[], object], check: Callable[[], bool]) -> None:
        part = tile.partition(z, (32,))
        for name, fn in [
                (f"module k(...), {label}", lambda: k(x, y, z, 1)),
                (f"module k[1, 32](...), {label}", lambda: k_cfg(x, y, z, 1)),
                (f"DSL simt k(...), {label}", lambda: dsl_add(x, y, z, 1)),
                (f"DSL simt k[1, 32](...), {label}", lambda: dsl_cfg(x, y, z, 1)),
                (f"DSL tile k(...), {label}", lambda: tile_add(x, y, part)),
                (f"DSL tile k(..., tile.partition per call), {label}",
                 lambda: tile_add(x, y, tile.partition(z, (32,))))]:
            fn()
            sync()
            assert check(), f"{name}: wrong result"
            paths.add(name, fn, sync)

    xb, yb, zb = (bridge.from_host(np.random.rand(1).astype(np.float32) + 1) for _ in range(3))
    producer_rows("bridge arrays", xb, yb, zb, bridge.synchronize,
                  lambda: np.allclose(zb.to_host(), xb.to_host() + yb.to_host()))

    _cupy_rows(rep, paths, producer_rows, ptx, ptx_path)
    _torch_rows(rep, paths, producer_rows)
    floor_cmd = _cpp_loop(tmp, arch, n, rep)
    floor_fn = in_process_floor(tmp, arch, rep.missing)
    raw = run_rounds(paths, floor_cmd, floor_fn, rounds, n)
    labels = ["bridge arrays", "CuPy arrays", "torch tensors"]
    med = {name: statistics.median(v) for name, v in raw.items() if v}
    for name, v in med.items():
        rep.row(name, v, "us", spread=f"{min(raw[name]):.3f}-{max(raw[name]):.3f}")
    rep.extra["rounds"] = raw
    paired_bars(rep, paths, floor_fn, labels, rounds, n)
    rep.finish(args.json)


def _cupy_rows(rep: Report, paths: Paths, producer_rows: Callable, ptx: bytes, ptx_path: str) -> None:
    """CuPy arrays through every path, CuPy's RawKernel and cuda.core's launch (no validation)."""
    cp = try_import("cupy", rep.missing)
    if cp is None:
        return
    x, y, z = (cp.random.rand(1, dtype=cp.float32) + 1 for _ in range(3))
    csync = cp.cuda.Device().synchronize
    producer_rows("CuPy arrays", x, y, z, csync, lambda: bool(np.allclose(z.get(), (x + y).get())))
    rk = cp.RawModule(path=ptx_path).get_function("add")
    n32 = np.int32(1)
    paths.add("CuPy RawKernel (no validation)", lambda: rk((1,), (32,), (x, y, z, n32)), csync)
    core = try_import("cuda.core", rep.missing)
    if core is not None:
        try:
            try:
                from cuda.core import Device, LaunchConfig, ObjectCode, launch as core_launch
            except ImportError:
                from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch as core_launch
            d = Device(0)
            d.set_current()
            st = d.create_stream()
            ker = ObjectCode.from_ptx(ptx).get_kernel("add")
            cfg = LaunchConfig(grid=1, block=32)
            xp, yp, zp = x.data.ptr, y.data.ptr, z.data.ptr
            paths.add("cuda.core launch (raw pointers, no validation)",
                      lambda: core_launch(st, cfg, ker, xp, yp, zp, n32), st.sync)
        except Exception as exc:  # noqa: BLE001
            rep.missing["cuda.core launch"] = repr(exc)[:200]


def _torch_rows(rep: Report, paths: Paths, producer_rows: Callable) -> None:
    """torch tensors through every path, torch.add(out=) and a Triton JIT launch."""
    torch = try_import("torch", rep.missing)
    if torch is None:
        return
    tx, ty, tz = (torch.rand(1, device="cuda") + 1 for _ in range(3))
    producer_rows("torch tensors", tx, ty, tz, torch.cuda.synchronize,
                  lambda: bool(torch.allclose(tz, tx + ty)))
    paths.add("torch.add(out=)", lambda: torch.add(tx, ty, out=tz), torch.cuda.synchronize)
    triton = try_import("triton", rep.missing)
    if triton is not None:
        try:
            import triton.language as tl

            @triton.jit
            def tadd(a_, b_, c_, nn, BLOCK: tl.constexpr):
                o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = o < nn
                tl.store(c_ + o, tl.load(a_ + o, mask=m) + tl.load(b_ + o, mask=m), mask=m)
            tadd[(1,)](tx, ty, tz, 1, BLOCK=128)
            paths.add(TRITON_JIT, lambda: tadd[(1,)](tx, ty, tz, 1, BLOCK=128), torch.cuda.synchronize)
        except Exception as exc:  # noqa: BLE001
            rep.missing["triton launch"] = repr(exc)[:200]
            return
        _wrapped_triton_rows(rep, paths, tadd, tx, ty, tz, torch)


TRITON_JIT = "Triton JIT launch"
TRITON_WRAPPED = "Triton wrapped by bridge.foreign, k(...), torch tensors"
TRITON_FILLED = "Triton wrapped, scratch pointers passed (ForeignKernel), torch tensors"


def _wrapped_triton_rows(rep: Report, paths: Paths, tadd: object, tx, ty, tz, torch) -> None:
    """The same Triton kernel compiled by Triton and launched through the bridge (validated, the contract
    of the module row: 3 f32 arrays of length n), as bridge.foreign.triton returns it (the scratch
    pointers its code never reads dropped: a plain bridge.Kernel) and with them passed (ForeignKernel)."""
    import bridge
    kw = dict(constexprs={"BLOCK": 128}, access={"a_": "read", "b_": "read", "c_": "write"},
              requires=["len(a_) == nn", "len(b_) == nn", "len(c_) == nn"], grid=("c_", "BLOCK"))
    try:
        for name, drop in ((TRITON_WRAPPED, True), (TRITON_FILLED, False)):
            k = bridge.foreign.triton(tadd, "*fp32, *fp32, *fp32, i32", drop_unused=drop, **kw)
            tz.zero_()
            k(tx, ty, tz, 1)
            torch.cuda.synchronize()
            assert bool(torch.allclose(tz, tx + ty)), f"{name}: wrong result"
            paths.add(name, (lambda k=k: k(tx, ty, tz, 1)), torch.cuda.synchronize)
    except Exception as exc:  # noqa: BLE001
        rep.missing["bridge.foreign.triton"] = repr(exc)[:200]


def _cpp_loop(tmp: str, arch: str, n: int, rep: Report) -> list[str] | None:
    """The C++ <<<>>> floor as a command (nvcc-built loop of n launches), None without nvcc."""
    floor_cmd = None
    loop = os.path.join(tmp, "loop.cu")
    open(loop, "w").write(LOOP)
    try:
        subprocess.check_call(["nvcc", "-O2", f"-arch={arch}", loop, "-o", os.path.join(tmp, "loop")])
        floor_cmd = [os.path.join(tmp, "loop"), str(n)]
    except Exception as exc:  # noqa: BLE001
        rep.missing["C++ loop"] = repr(exc)[:200]
    return floor_cmd


Timer = Callable[[int], float]      # runs k launches, returns µs per launch


def alternating(a: Timer, b: Timer, n: int, chunks: int = 8) -> tuple[float, float]:
    """µs per launch of `a` and `b` timed in alternating chunks (a b a b ...) of n/chunks launches: the
    two are measured in the same stretch of host speed, so a slow stretch scales both."""
    ta = tb = 0.0
    k = max(1, n // chunks)
    for _ in range(chunks):
        ta += a(k)
        tb += b(k)
    return ta / chunks, tb / chunks


def bar_pairs(paths: Paths, floor_fn: Timer | None, labels: list[str]) -> list[tuple[str, str, str, float, float, str]]:
    """(bar name, ours path, peer path, scale, add, peer name) of every bar, peer '' = the C++ floor."""
    out = []
    for label in labels:
        limit = 1.15 if label == "bridge arrays" else 1.35
        name = f"module k[1, 32](...), {label}"
        if floor_fn and name in paths.fns:
            out.append((f"module launch, {label} vs C++ floor", name, "", limit, 0.0,
                        f"{limit}x the C++ <<<>>> floor (this process)"))
        if name in paths.fns and "CuPy RawKernel (no validation)" in paths.fns:
            out.append((f"module launch, {label} vs CuPy RawKernel", name, "CuPy RawKernel (no validation)", 1.0,
                        0.0, "CuPy RawKernel"))
        for model, call in (("simt", "k(...)"), ("simt", "k[1, 32](...)"), ("tile", "k(...)")):
            dsl_name, module_name = f"DSL {model} {call}, {label}", f"module {call}, {label}"
            if dsl_name in paths.fns and module_name in paths.fns:
                out.append((f"DSL {model} {call} over module {call}, {label}", dsl_name, module_name, 1.0, 0.3,
                            "module call + 0.3 us"))
        t_name, s_name = f"DSL tile k(...), {label}", f"DSL simt k(...), {label}"
        if t_name in paths.fns and s_name in paths.fns:
            out.append((f"tile launch vs SIMT launch, {label}", t_name, s_name, 1.1, 0.0, "1.1x the SIMT launch"))
    module = "module k(...), torch tensors"
    if TRITON_WRAPPED in paths.fns and module in paths.fns:
        out.append(("wrapped Triton launch vs module launch, torch tensors", TRITON_WRAPPED, module, 1.1, 0.0,
                    "1.1x our module launch (same arguments)"))
    if TRITON_WRAPPED in paths.fns and TRITON_JIT in paths.fns:
        out.append(("wrapped Triton launch vs Triton's JIT launch, torch tensors", TRITON_WRAPPED, TRITON_JIT, 0.5,
                    0.0, "0.5x Triton's own JIT launch"))
    return out


def timer(fn: Callable[[], object]) -> Timer:
    return lambda k: time_path(fn, k)


def floor_timer(floor_fn: Timer | None) -> Timer:
    assert floor_fn is not None, "a floor bar exists only when the floor loop was built"
    return lambda k: checked_floor(floor_fn, k)


def paired_bars(rep: Report, paths: Paths, floor_fn: Timer | None, labels: list[str], rounds: int, n: int) -> None:
    """Each bar from its own rounds of alternating chunks (ours vs its peer, the peer scaled / offset as
    the bar says); judged by the median of the per-round ratios, the raw pairs go into the JSON."""
    pairs: dict[str, list[list[float]]] = {}
    for bar_name, ours, peer, scale, add, peer_name in bar_pairs(paths, floor_fn, labels):
        ours_t = timer(paths.fns[ours])
        peer_t = timer(paths.fns[peer]) if peer else floor_timer(floor_fn)
        got = []
        for r in range(rounds):
            o, p = alternating(ours_t, peer_t, n) if r % 2 == 0 else alternating(peer_t, ours_t, n)[::-1]
            paths.sync[ours]()
            got.append([o, p])
        pairs[bar_name] = got
        o_med = statistics.median(o for o, _ in got)
        p_med = statistics.median(p * scale + add for _, p in got)
        ratio = statistics.median((p * scale + add) / o for o, p in got)
        rep.bar(bar_name, o_med, p_med, higher_is_better=False, bar=1.0, peer_name=peer_name, ratio=ratio)
    rep.extra["bar_pairs_us"] = pairs


if __name__ == "__main__":
    main()
