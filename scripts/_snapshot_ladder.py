"""The heavy tile kernels of scripts/ptx_contract_snapshot.py: flash attention (examples/flash_attention.py)
in each of its tile choices and lowerings, and the GEMM ladder of benchmarks/gemm.py (every candidate
tile shape of each dtype and layout, the persistent warp-specialised and casting variants, split-K).

Each case carries the environment switches it compiles under (KB_TILE_GEMM_PIPELINE,
KB_TILE_TC_MATMUL, KB_TILE_WGMMA_PRODUCTS), because those pick the lowering as much as the tile shape.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]



def flash_cases() -> dict[str, tuple]:
    """name -> (kernel, args, env) for flash_fwd: f16/bf16, head dims 64/128, causal or not, with the
    wgmma-product tiles, the mma.sync tiles (products kept off wgmma) and the portable FMA tiles."""
    import ml_dtypes
    import numpy as np
    sys.path.insert(0, str(ROOT / "examples"))
    import flash_attention as FA
    from dsl import tile

    out: dict[str, tuple] = {}
    lowerings = (("wgmma", FA.WGMMA_TILES, {}), ("sync", FA.TILES, {"KB_TILE_WGMMA_PRODUCTS": "0"}),
                 ("portable", FA.PORTABLE_TILES, {"KB_TILE_TC_MATMUL": "0"}))
    for dn, dt in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        for d in (64, 128):
            q = np.zeros((256, d), dt)
            for low, table, env in lowerings:
                for bm, bn in table[d]:
                    for causal in (False, True):
                        o = tile.partition(np.zeros((256, d), np.float32), (bm, d))
                        name = f"flash.{dn}_d{d}_{low}_{bm}x{bn}" + ("_causal" if causal else "")
                        out[name] = (FA.flash_fwd, (q, q, q, o, 256, 0.125, bn, causal, 1), env)
    return out


def gemm_cases() -> dict[str, tuple]:
    """name -> (kernel, args, env) for the GEMM ladder's candidates."""
    import ml_dtypes
    import numpy as np
    sys.path[:0] = [str(ROOT / "interop_tests" / "dsl_tile"), str(ROOT / "benchmarks")]
    import tile_kernels_lib as K
    from gemm import DSL_TILES as LADDER, SPLIT_K     # the ladder benchmarks/gemm.py tries
    from dsl import tile

    out: dict[str, tuple] = {}
    pws = tile.kernel(K.gemm.pyfunc, persistent=True)
    pws_cast = tile.kernel(K.gemm_cast.pyfunc, persistent=True)
    ws = {"KB_TILE_GEMM_PIPELINE": "ws"}
    for dn, dt in (("bf16", ml_dtypes.bfloat16), ("f16", np.float16)):
        a = np.zeros((512, 512), dt)
        for bm, bn, bk in LADDER["16bit"]:
            c = tile.partition(np.zeros((512, 512), np.float32), (bm, bn))
            out[f"ladder.{dn}_nn_{bm}x{bn}x{bk}"] = (K.gemm, (a, a, c, bk), {})
        c = tile.partition(np.zeros((512, 512), np.float32), (128, 256))
        out[f"ladder.{dn}_nn_128x256x64_pws"] = (pws, (a, a, c, 64), ws)
        out[f"ladder.{dn}_nn_128x128x64_pws"] = (pws, (a, a, tile.partition(np.zeros((512, 512), np.float32),
                                                                           (128, 128)), 64), ws)
        cast = tile.partition(np.zeros((512, 512), dt), (128, 256))
        out[f"ladder.{dn}_nn_128x256x64_pws_cast"] = (pws_cast, (a, a, cast, 64), ws)
        out[f"ladder.{dn}_nn_128x256x64_cast"] = (K.gemm_cast, (a, a, cast, 64), {})
        for (bm, bn, bk), splits in SPLIT_K:
            part = tile.partition(np.zeros((K.split_k_rows(512, bm, splits), 512), np.float32), (bm, bn))
            out[f"ladder.{dn}_splitk_{bm}x{bn}x{bk}"] = (K.gemm_split_k, (a, a, part, bk), {})
    f = np.zeros((512, 512), np.float32)
    for bm, bn, bk in LADDER["f32"]:
        c = tile.partition(np.zeros((512, 512), np.float32), (bm, bn))
        out[f"ladder.f32_nn_{bm}x{bn}x{bk}"] = (K.gemm, (f, f, c, bk), {})
        out[f"ladder.f32_nt_{bm}x{bn}x{bk}"] = (K.gemm_nt, (f, f, c, bk), {})
    b16 = np.zeros((512, 512), ml_dtypes.bfloat16)
    out["ladder.bf16_nt_128x256x64"] = (K.gemm_nt, (b16, b16, tile.partition(np.zeros((512, 512), np.float32),
                                                                             (128, 256)), 64), {})
    e = np.zeros((512, 512), ml_dtypes.float8_e4m3fn)
    for bm, bn, bk in LADDER["e4m3"]:
        c = tile.partition(np.zeros((512, 512), ml_dtypes.bfloat16), (bm, bn))
        out[f"ladder.e4m3_nt_{bm}x{bn}x{bk}"] = (K.gemm_f8, (e, e, np.float32(1.0), c, bk), {})
    return out
