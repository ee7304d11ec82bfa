"""The crossentropy ports' column loops have unroll hints (examples/llm_kernels/crossentropy.py: 8 in the
statistics loops, 4 in the write pass): rows wider than 8 x 1024 columns take both the groups of
iterations (their loads at once) and the remainder loop, which the small rows of test_llm_ports.py never reach. Checked on the simulator against llm_kit's float64 references, and in
the PTX: at least four loads back to back, every column load proven in range (no run-time check on logits)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import examples.llm_kernels as P
from interop_tests.cpp import llm_kit

# (V, Vp): a span boundary inside the padding, V a whole number of spans, V == Vp, a short last step
SHAPES = [(9000, 9013), (8192, 8200), (8192, 8192), (5121, 5130)]


def _case(v: int, vp: int, seed: int = 28):
    rng = np.random.default_rng(seed)
    n = 3
    logits = (rng.standard_normal((n, vp)) * 4).astype(np.float32)
    logits[0] += np.float32(300.0)                 # exp(300) overflows f32: the max must be shifted out
    logits[2, v - 1] = np.float32(40.0)            # the row's max in its last real column
    logits[:, v:] = np.float32(1e4)                # padding columns: loaded by the four-load steps, never used
    targets = rng.integers(0, v, n).astype(np.int32)
    targets[1] = v                                 # outside [0, V): NaN
    return logits, targets, rng.uniform(0.1, 2.0, n).astype(np.float32)


@pytest.mark.parametrize("v, vp", SHAPES)
def test_wide_row_forward_matches_float64(v, vp):
    logits, targets, _ = _case(v, vp)
    losses = np.full(len(targets), 7.0, np.float32)
    P.port("crossentropy_forward").simulate(losses, logits, targets, np.int32(v))
    np.testing.assert_allclose(losses, llm_kit.crossentropy_forward(logits, targets, v), rtol=1e-5, atol=1e-5,
                               equal_nan=True)


@pytest.mark.parametrize("v, vp", SHAPES)
def test_wide_row_backward_matches_float64(v, vp):
    logits, targets, dlosses = _case(v, vp)
    dlogits = np.full(logits.shape, 7.0, np.float32)
    P.port("crossentropy_backward").simulate(dlogits, logits, dlosses, targets, np.int32(v))
    ref = llm_kit.crossentropy_backward(logits, dlosses, targets, v)
    np.testing.assert_allclose(dlogits, ref, rtol=1e-4, atol=1e-7, equal_nan=True)
    assert np.all(dlogits[:, v:] == 0.0)           # padding columns written 0


@pytest.mark.parametrize("name, batches", [("crossentropy_forward", 1), ("crossentropy_backward", 2)])
def test_each_pass_loads_four_columns_at_once_without_run_time_checks(name, batches):
    logits, targets, dlosses = _case(9000, 9013)
    args = {"crossentropy_forward": (np.zeros(3, np.float32), logits, targets, np.int32(9000)),
            "crossentropy_backward": (np.zeros_like(logits), logits, dlosses, targets, np.int32(9000))}[name]
    kernel = P.port(name)
    ptx = kernel.ptx(*args, arch="sm_90")
    offsets: dict[str, set[int]] = {}                 # address register -> byte offsets loaded from it
    for base, off in re.findall(r"ld\.global\.nc\.b32\s+%r\d+, \[(%rd\d+)(?:\+(-?\d+))?\]", ptx):
        offsets.setdefault(base, set()).add(int(off or 0))
    step = 1024 * 4                                   # a block's width of f32 columns, in bytes
    fours = [b for b, o in offsets.items() if any({k + step, k + 2 * step, k + 3 * step} <= o for k in o)]
    assert len(fours) == batches, f"{name}: {len(fours)} sets of four columns 1024 apart, expected {batches}"
    sites = json.loads(kernel.inspect(*args, arch="sm_90").contract_json).get("fault_sites", [])
    checked = [s["text"] for s in sites if s["array"] == "logits" and "logits[row, c" in s["text"]]
    assert not checked, f"{name}: run-time checked column loads {checked}"
