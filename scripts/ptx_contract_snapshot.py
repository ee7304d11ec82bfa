"""PTX and contract snapshot of the kernel zoo and the tile cases, to prove a refactoring byte-identical.

    python scripts/ptx_contract_snapshot.py write DIR      # one .ptx and one .json per (kernel, arch)
    python scripts/ptx_contract_snapshot.py compare A B    # exit 1 when any file differs

Kernels: every case of interop_tests/kernels_zoo.py, the tile cases of
interop_tests/dsl_tile/test_tile_ptx_assembles.py, the tensor-core GEMM variants (mma.sync, wgmma, tf32:
dynamic shared memory), the integration kernels, a persistent tile kernel, a SIMT kernel with static
plus dynamic shared memory, flash attention in each tile choice and lowering, and the GEMM ladder of
benchmarks/gemm.py (scripts/_snapshot_ladder.py: each under the environment switches that pick its
lowering); each for sm_80 and sm_90. The disk cache is off, so every file is a fresh
compile. `compare` names each differing file and, with `--rename OLD=NEW`, says whether the only
difference is that symbol renamed.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("sm_80", "sm_90")


def _cases() -> dict[str, tuple[object, tuple, str, dict]]:
    """name -> (kernel, args, model, environment switches to compile under)."""
    import ml_dtypes
    import numpy as np
    sys.path[:0] = [str(ROOT), str(ROOT / "interop_tests" / "dsl_tile")]
    from interop_tests import kernels_zoo as Z
    from interop_tests.dsl_tile import test_tile_ptx_assembles as TP
    from interop_tests.integrations import integration_kernels as IK
    import tile_kernels_lib as K
    from scripts import _snapshot_kernels as EX
    from scripts import _snapshot_ladder as LAD
    from dsl import tile

    out: dict[str, tuple[object, tuple, str]] = {}
    for case in Z.ZOO:
        out[f"zoo.{case.name}"] = (case.kernel, tuple(case.make(np.random.default_rng(7), case.sizes[0]).args),
                                   "simt")
    for name, (kernel, args) in TP.cases().items():
        out[f"tile.{name}"] = (kernel, args, "tile")
    z = np.zeros
    for dt, dn in ((np.float16, "f16"), (ml_dtypes.bfloat16, "bf16"), (np.float32, "f32")):
        for ts in ((128, 128), (64, 64), (128, 256)):
            a = z((256, 256), dt)
            out[f"tile.gemm_aligned_{dn}_{ts[0]}x{ts[1]}"] = (
                K.gemm, (a, a, tile.partition(z((256, 256), np.float32), ts), 32), "tile")
    x = z(300, np.float32)
    out["int.scale"] = (IK.scale, (x, x.copy(), np.float32(2)), "simt")
    out["int.silu"] = (IK.silu, (x, x.copy()), "simt")
    out["int.histogram"] = (IK.histogram, (z(300, np.int32), z(16, np.int32)), "simt")
    out["int.total"] = (IK.total, (x, z(1, np.float32)), "simt")
    out["int.tile_add"] = (IK.tile_add, (x, x, tile.partition(x.copy(), (128,))), "tile")
    out["int.tile_axpy"] = (IK.tile_axpy, (x, tile.partition(x.copy(), (128,)), 2.0), "tile")
    out["int.tile_rows_scaled"] = (IK.tile_rows_scaled, (z((8, 64), np.float32),
                                                         tile.partition(z((8, 64), np.float32), (2, 64)), 3), "tile")
    out["int.tile_two_outputs"] = (IK.tile_two_outputs, (x, tile.partition(x.copy(), (128,)),
                                                         tile.partition(x.copy(), (128,))), "tile")
    out["extra.tile_persistent"] = (EX.padd, (x, x, tile.partition(x.copy(), (128,))), "tile")
    out["extra.simt_dynamic_shared"] = (EX.stage, (x, x.copy()), "simt")
    cases = {name: (*case, {}) for name, case in out.items()}
    for name, (kernel, args, env) in {**LAD.flash_cases(), **LAD.gemm_cases()}.items():
        cases[name] = (kernel, args, "tile", env)
    return cases


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write(dest: Path) -> None:
    os.environ["KB_CACHE"] = "0"
    dest.mkdir(parents=True, exist_ok=True)
    for name, (kernel, args, model, env) in _cases().items():
        for arch in ARCHS:
            with _environment(env):
                ck = kernel.compile(*args, arch=arch) if model == "simt" else kernel.compile(args, arch)
            (dest / f"{name}.{arch}.ptx").write_text(ck.ptx)
            (dest / f"{name}.{arch}.json").write_text(ck.contract_json)
    print(f"wrote {len(list(dest.iterdir()))} files to {dest}")


def compare(a: Path, b: Path, renames: list[tuple[str, str]]) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    same = renamed = 0
    bad = []
    for n in names:
        pa, pb = a / n, b / n
        if not pa.exists() or not pb.exists():
            bad.append(f"{n}: only in {'B' if not pa.exists() else 'A'}")
            continue
        ta, tb = pa.read_text(), pb.read_text()
        if ta == tb:
            same += 1
            continue
        for old, new in renames:
            ta = ta.replace(old, new)
        if ta == tb:
            renamed += 1
            print(f"{n}: differs only by the renames {renames}")
        else:
            bad.append(f"{n}: differs")
    print(f"{same} identical, {renamed} identical up to renames, {len(bad)} different (of {len(names)})")
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--rename", action="append", default=[], help="OLD=NEW symbol rename allowed in A")
    ns = ap.parse_args(argv)
    if ns.cmd == "write":
        write(ns.dir)
        return 0
    return compare(ns.a, ns.b, [tuple(r.split("=", 1)) for r in ns.rename])  # type: ignore[misc]


if __name__ == "__main__":
    sys.exit(main())
