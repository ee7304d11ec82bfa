"""Fuzz target `decorator`: random options of `@simt.kernel(...)` and `@tile.kernel(...)`.

Each input is a small module: one kernel body (1-D copy, 2-D copy, dynamic shared memory, an atomic
block sum, or a tile kernel) under a decorator with random values for block=, launch_bounds=,
domain=, shared_mem=, min_cc=, requires=, inplace=, boundscheck=, fastmath=, ftz= (tile: num_warps=,
persistent=) — good values, values the issue says are bad, and values in between. The generator
classifies every value: a definitely bad one must be refused AT THE DEF with a DslCompileError
whose file:line is the decorator or the def; definitely good ones must be accepted; anything
accepted then compiles to PTX (every third assembled by ptxas) and runs a validate-only simulated
launch with a random configuration, where DslCompileError and the bridge's typed errors are the
only allowed refusals. Never a crash or an LLVM abort.
"""
from __future__ import annotations

from typing import Any

from interop_tests.fuzz.hostile import RaisingDim
from interop_tests.fuzz.targets import Oracle

TIMEOUT = 30.0
INPUTS = 60          # a suite run's inputs (targets.py): each compiles and simulates a kernel
HEADER = """import math
import dsl
from dsl import simt, tile, f32, i32
from interop_tests.fuzz.hostile import *
"""
BODIES: dict[str, tuple[str, str]] = {   # name -> (parameters, body)
    "copy1d": ("a: simt.Array[f32], out: simt.DisjointSlice[f32]",
               "    i = simt.thread.index_1d()\n    out[i] = a[i]\n"),
    "copy2d": ("a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]",
               "    ij = simt.thread.index_2d()\n    if ij[0] < a.shape[0] and ij[1] < a.shape[1]:\n"
               "        out[ij] = a[ij]\n"),
    "dynamic_shared": ("a: simt.Array[f32], out: simt.DisjointSlice[f32]",
                       "    i = simt.thread.index_1d()\n    with simt.unsafe():\n"
                       "        buf = simt.shared.dynamic(f32)\n        t = simt.threadIdx.x\n"
                       "        if t < len(buf):\n            buf[t] = a[i] if i < len(a) else f32(0)\n"
                       "        simt.sync_threads()\n        if i < len(out) and t < len(buf):\n"
                       "            out[i] = buf[t]\n"),
    "atomic_sum": ("a: simt.Array[f32], total: simt.DisjointSlice[f32]",
                   "    with simt.unsafe():\n        g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x\n"
                   "        if g < len(a):\n            simt.atomic.add(total, 0, a[g])\n"),
    "tile": ("a: tile.Array[f32], out: tile.Partition[f32]",
             "    t = tile.bid(0)\n    out.store(tile.load(a, t, out.tile_shape) * 2.0)\n"),
}

# value pools: (source text, verdict) with verdict "good", "bad" or "either"
G, B, E = "good", "bad", "either"
BLOCK = [("None", G), ("64", G), ("256", G), ("(128, 1, 1)", G), ("(16, 16, 1)", G), ("(32, 8)", G),
         ("(1024, 1, 1)", G), ("(1, 1, 64)", G), ("(0, 1, 1)", B), ("(128, -0.0, 1)", B), ("(-1, 1, 1)", B),
         ("(2 ** 64, 1, 1)", B), ("(2048, 1, 1)", B), ("(64, 1, 1, 1)", B), ("64.0", B), ("(64.0, 1, 1)", B),
         ("True", B), ("(True, 1, 1)", B), ("()", B), ("(1, 1, 65)", B), ("(1, 2048, 1)", B), ("(64, 64, 1)", B),
         ("'64'", B), ("0", B), ("-64", B), ("2 ** 40", B), ("(RaisingDim(), 1, 1)", B), ("(float('nan'), 1, 1)", B),
         ("[128, 1, 1]", E), ("(1,)", G), ("1", G)]
LAUNCH_BOUNDS = [("None", G), ("1", G), ("128", G), ("1024", G), ("0", B), ("-1", B), ("2 ** 40", B),
                 ("1025", B), ("64.0", B), ("True", B), ("'128'", B), ("RaisingDim()", B)]
DOMAIN = [("1", G), ("2", G), ("3", G), ("0", B), ("4", B), ("-1", B), ("1.0", B), ("'1'", B), ("None", B),
          ("2 ** 64", B)]
SHARED = [("0", G), ("1024", G), ("49152", G), ("('max', 4096)", G), ("-1", B), ("-5", B), ("1.5", B), ("'x'", B),
          ("('max', -1)", B), ("('min', 5)", B), ("('max',)", B), ("()", B), ("None", E), ("2 ** 40", E),
          ("RaisingDim()", B), ("('max', 'x')", B)]
MIN_CC = [("0", G), ("50", G), ("80", G), ("90", G), ("120", G), ("-1", B), ("2000", B), ("10 ** 6", B), ("8.0", B),
          ("'80'", B), ("35", E), ("130", E), ("True", B), ("None", E)]
REQUIRES = [("()", G), ("['len(a) == len(out)']", E), ("'len(a) == len(out)'", E), ("[5]", B), ("[None]", B),
            ("['len(q) == 1']", E), ("['len(a) ==']", E), ("['len(a)' + ' + 0' * 20000 + ' == len(a)']", E),
            ("[b'len(a) == 1']", B), ("5", B)]
INPLACE = [("()", G), ("[('a', 'out')]", E), ("[('a',)]", B), ("[('a', 'out', 'x')]", B), ("5", B), ("'ab'", B),
           ("[('a', 'zz')]", E), ("[(1, 2)]", B)]
BOOLS = [("True", G), ("False", G), ("'yes'", B), ("2", B), ("1.5", B), ("None", E), ("1", E), ("0", E)]
NUM_WARPS = [("None", G), ("1", G), ("4", G), ("8", G), ("32", G), ("0", B), ("-1", B), ("33", B), ("64", B),
             ("4.0", B), ("True", B), ("'4'", B), ("3", E), ("2 ** 40", B)]
SIMT_OPTIONS = {"block": BLOCK, "launch_bounds": LAUNCH_BOUNDS, "domain": DOMAIN, "shared_mem": SHARED,
                "min_cc": MIN_CC, "requires": REQUIRES, "inplace": INPLACE, "boundscheck": BOOLS,
                "fastmath": BOOLS, "ftz": BOOLS}
TILE_OPTIONS = {"num_warps": NUM_WARPS, "persistent": BOOLS}


def _pick(rng, pool: list[tuple[str, str]]) -> tuple[str, str]:
    good = [p for p in pool if p[1] == G]
    return rng.choice(good) if rng.random() < 0.55 else rng.choice(pool)


def generate(rng) -> dict:
    body = rng.choice(list(BODIES))
    options = TILE_OPTIONS if body == "tile" else SIMT_OPTIONS
    chosen: dict[str, tuple[str, str]] = {}
    for key, pool in options.items():
        if rng.random() < (0.6 if key in ("block", "num_warps", "persistent") else 0.3):
            chosen[key] = _pick(rng, pool)
    verdicts = [v for _, v in chosen.values()]
    if "block" in chosen and "launch_bounds" in chosen and chosen["block"][0] != "None" \
            and chosen["launch_bounds"][0] != "None":
        verdicts.append(B)               # give one or neither
    index_dims = {"copy1d": "1", "copy2d": "2", "dynamic_shared": "1"}.get(body)
    if index_dims and chosen.get("domain", ("1", G))[0] != index_dims:
        verdicts.append(E)               # a domain the body's ThreadIndex contradicts: the def may say so
    block = chosen.get("block", ("None", G))[0]
    if block.startswith("(") and chosen.get("domain", ("1", G))[0] == "1" and block not in ("(128, 1, 1)",
                                                                                            "(1024, 1, 1)", "(1,)"):
        verdicts.append(E)               # a multi-dimensional block on a 1-D domain: may be refused
    verdict = B if B in verdicts else (G if all(v == G for v in verdicts) else E)
    deco = "tile.kernel" if body == "tile" else "simt.kernel"
    args = ", ".join(f"{k}={v}" for k, (v, _) in chosen.items())
    params, text = BODIES[body]
    source = f"{HEADER}\n\n@{deco}({args})\ndef k({params}):\n{text}"
    launch = {"grid": rng.choice([None, None, 1, 3, (2, 2), 0, -1, 64.0, RaisingDim()]),
              "block": rng.choice([None, None, None, 64, 128, (16, 16), (16, 16, 1), 0, 2048]),
              "shared_mem": rng.choice([0, 0, 512, 4096, -1]), "n": rng.choice([1, 37, 300])}
    return {"body": body, "verdict": verdict, "options": {k: v for k, (v, _) in chosen.items()},
            "source": source, "launch": launch, "ptxas": rng.random() < 0.34}


# ------------------------------------------------------------------------------- execution
def _def_lines(source: str) -> tuple[int, int]:
    lines = source.splitlines()
    deco = next(i for i, ln in enumerate(lines, 1) if ln.startswith("@"))
    return deco, deco + 1


def warm() -> None:
    from interop_tests.fuzz import t_dsl_source
    t_dsl_source.warm()


def _stand_ins(body: str, n: int) -> list:
    """NumPy arguments for .ptx and simulate (the tile body wraps `out` in a partition itself)."""
    import numpy as np
    if body == "copy2d":
        a = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        return [a, np.zeros_like(a)]
    a = np.arange(n, dtype=np.float32)
    return [a, np.zeros(1, np.float32) if body == "atomic_sum" else np.zeros_like(a)]


def execute(spec: dict) -> str:
    from dsl import DslCompileError
    from interop_tests.fuzz.t_dsl_source import _module_from
    first, last = _def_lines(spec["source"])
    try:
        module = _module_from(spec["source"])
    except DslCompileError as exc:
        if not (exc.file.endswith(".py") and "mutant_" in exc.file and first <= exc.line <= last):
            raise Oracle(f"a bad option was refused, but not at the def (lines {first}-{last}): "
                         f"{exc.file}:{exc.line}\n{exc}") from None
        if spec["verdict"] == G:
            raise Oracle(f"good options {spec['options']} refused at the def:\n{exc}") from None
        raise
    if spec["verdict"] == B:
        raise Oracle(f"options {spec['options']} accepted at the def; the issue asks for a DslCompileError "
                     f"there (file:line of the decorator)")
    kernel = module.k
    args = _stand_ins(spec["body"], spec["launch"]["n"])
    if spec["body"] == "tile":
        return _run_tile(kernel, args, spec)
    ptx = kernel.ptx(*args, arch="sm_80")
    if spec["ptxas"]:
        from interop_tests.fuzz.t_dsl_source import assemble_or_report
        assemble_or_report(ptx)
    L = spec["launch"]
    kernel.simulate(*args, grid=L["grid"], block=L["block"], shared_mem=L["shared_mem"])
    return f"ptx + simulate ({spec['body']})"


def _run_tile(kernel: Any, args: list, spec: dict) -> str:
    from dsl import tile
    a, out = args
    part = tile.partition(out, (64,))
    ptx = kernel.ptx(a, part, arch="sm_80")
    if spec["ptxas"]:
        from interop_tests.fuzz.t_dsl_source import assemble_or_report
        assemble_or_report(ptx)
    kernel.simulate(a, part)
    import numpy as np
    if not np.array_equal(out, a * 2):
        raise Oracle(f"tile simulate gave {out[:8]} for {a[:8]} * 2")
    return "tile ptx + simulate"


def allowed(exc: BaseException, spec: dict) -> bool:
    from bridge.errors import LaunchContractError
    from dsl import DslCompileError
    from interop_tests.fuzz.t_dsl_source import SetupRefused
    return isinstance(exc, (DslCompileError, LaunchContractError, SetupRefused))

