"""Per-kernel lowering switches (`@tile.kernel(lowering={...})`, tile.Config(lowering=...);
dsl/tile/switches.py): a kernel that fixes a switch compiles as the environment switch would make it,
wins over the environment, keeps its own entries in the disk cache, runs its lowering in the lowered
simulator, and bad switches are refused at the `def` (or at tile.autotune) naming the switch. The
flash-attention forward of examples/flash_attention.py is the kernel: its loop has the TMA ring the
switches act on."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import tile
from dsl.errors import DslCompileError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_lowering", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

ENV = ("KB_TILE_LOOP_PIPELINE", "KB_TILE_LOOP_STAGES", "KB_TILE_SETMAXNREG", "KB_TILE_PRODUCT_OVERLAP")
WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24"}


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No lowering switch in the environment, and a disk cache of this test's own."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KB_CACHE", raising=False)
    return monkeypatch


def args(rng=None, seq=128, d=64, bm=128, bn=64, causal=True):
    rng = rng or np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((2 * seq, d), np.nan, np.float32)
    return (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1), out


def fresh(**options):
    """A new kernel object (its own memory caches) over flash_fwd's function."""
    return tile.kernel(FA.flash_fwd.pyfunc, num_warps=8, **options)


def test_a_fixed_switch_compiles_as_the_environment_switch_does(clean):
    a, _ = args()
    fixed = fresh(lowering=WS).compile(a, "sm_90").ptx
    plain = fresh().compile(a, "sm_90").ptx
    clean.setenv("KB_TILE_LOOP_PIPELINE", "ws")
    clean.setenv("KB_TILE_SETMAXNREG", "240/24")
    by_env = fresh().compile(a, "sm_90").ptx
    assert fixed == by_env
    assert "setmaxnreg.inc" in fixed and "setmaxnreg" not in plain


def test_what_a_kernel_fixes_wins_over_the_environment(clean):
    a, _ = args()
    plain = fresh().compile(a, "sm_90").ptx
    clean.setenv("KB_TILE_LOOP_PIPELINE", "ws")
    clean.setenv("KB_TILE_SETMAXNREG", "240/24")
    pinned = fresh(lowering={"loop_pipeline": "cp.async", "setmaxnreg": "off"}).compile(a, "sm_90").ptx
    assert pinned == plain and "cp.async.bulk.tensor" not in pinned


def test_the_disk_cache_keeps_kernels_with_different_switches_apart(clean):
    a, _ = args()
    first_plain = fresh().compile(a, "sm_90")
    first_ws = fresh(lowering=WS).compile(a, "sm_90")
    assert first_plain.ptx != first_ws.ptx
    again_ws, again_plain = fresh(lowering=WS).compile(a, "sm_90"), fresh().compile(a, "sm_90")
    assert again_ws.metadata["cache"] == "disk" and again_plain.metadata["cache"] == "disk"
    assert again_ws.ptx == first_ws.ptx and again_plain.ptx == first_plain.ptx


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_lowered_simulator_runs_the_kernels_own_lowering(clean, causal):
    """The warp-specialised ring (a producer warpgroup, 384 threads) through the CPU semantics of its
    PTX, against float64 attention computed here. The environment holds values it would refuse, so a
    lowering that read it instead of the kernel's switches would fail."""
    rng = np.random.default_rng(3)
    a, out = args(rng, causal=causal)
    clean.setenv("KB_TILE_LOOP_PIPELINE", "fast")
    clean.setenv("KB_TILE_SETMAXNREG", "lots")
    fresh(lowering=WS).simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    q, k, v, seq, d = *(x.astype(np.float64) for x in a[:3]), 128, 64
    want = np.empty_like(q)
    for h in range(2):
        rows = slice(h * seq, (h + 1) * seq)
        s = q[rows] @ k[rows].T / np.sqrt(d)
        if causal:
            s[np.triu_indices(seq, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        want[rows] = w / w.sum(axis=1, keepdims=True) @ v[rows]
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("lowering,text", [
    ({"loop_pipeline": "fast"}, "loop_pipeline must be one of 'cp.async', 'tma', 'ws', got 'fast'"),
    ({"loop_stages": "3"}, "loop_stages must be one of 2, 3, got '3'"),
    ({"loop_stages": True}, "loop_stages must be one of 2, 3, got True"),
    ({"product_overlap": 1}, "product_overlap must be True or False, got 1"),
    ({"pipeline": "ws"}, "unknown switch 'pipeline'"),
    ("ws", "lowering= must be a dict"),
])
def test_bad_switches_are_refused_at_the_def_naming_them(lowering, text):
    with pytest.raises(DslCompileError, match=text):
        tile.kernel(FA.flash_fwd.pyfunc, lowering=lowering)


def test_an_autotuning_configuration_may_fix_switches_and_keeps_the_kernels_other_options():
    base = tile.kernel(FA.flash_fwd.pyfunc, num_warps=8, pdl=True, lowering={"setmaxnreg": "240/24"})
    configs = [tile.Config(tiles={"o": (128, 64)}, constants={"bn": 64, "causal": True, "group": 1}),
               tile.Config(tiles={"o": (128, 64)}, constants={"bn": 64, "causal": True, "group": 1},
                           lowering={"loop_pipeline": "ws"})]
    tuned = tile.autotune(base, configs)
    assert tuned.kernel_for(configs[0]) is base
    variant = tuned.kernel_for(configs[1])
    assert variant.lowering == (("loop_pipeline", "ws"), ("setmaxnreg", "240/24"))
    assert variant.launch is base.launch and variant.num_warps == 8
    assert '"lowering": {"loop_pipeline": "ws"}' in configs[1].text()
    with pytest.raises(ValueError, match=r"configuration \{.*loop_stages must be one of 2, 3"):
        tile.autotune(base, [tile.Config(tiles={"o": (128, 64)}, constants={"bn": 64, "causal": True, "group": 1},
                                         lowering={"loop_stages": 4})])
