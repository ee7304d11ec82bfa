"""n-D chunk loops (issue 28: the encoder port ran at 0.59x its C++ with one f32 a thread): a thread of
a 2-D / 3-D launch owns a run of n elements along the last axis of its row
(`b, t, ch = simt.thread.chunk_3d(4)`), the grid is derived with n elements a thread along x, and the
loop's accesses in one row are 16-byte vector accesses when the row length keeps them aligned (a run-time
test: other lengths take the per-element path and stay correct). Checked on the simulator against NumPy
float64, in the PTX, and on the GPU."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import bridge
from interop_tests.dsl_codegen import chunk_row_kernels as K

_ACCESS = re.compile(r"\b(ld|st)\.global(?:\.nc)?(?:\.v(\d))?\.[bfu](\d+)\s")


def _accesses(ptx: str, op: str) -> list[int]:
    return [int(m.group(2) or 1) * int(m.group(3)) // 8 for m in _ACCESS.finditer(ptx) if m.group(1) == op]


def _rows_case(rng, rows: int, cols: int):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    ref = x.astype(np.float64) * 1.5 + bias
    return x, bias, ref


def _embed_case(rng, B: int, T: int, C: int, V: int):
    inp = rng.integers(-2, V + 2, (B, T)).astype(np.int32)          # some ids outside [0, V)
    wte = rng.standard_normal((V, C)).astype(np.float32)
    wpe = rng.standard_normal((T + 3, C)).astype(np.float32)
    ok = (inp >= 0) & (inp < V)
    ref = np.where(ok[..., None], wte[np.clip(inp, 0, V - 1)].astype(np.float64) + wpe[:T], np.nan)
    return inp, wte, wpe, ref


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 4), (5, 10), (7, 13), (4, 64)])
@pytest.mark.parametrize("block", [None, (3, 2, 1)])
def test_a_2d_chunk_loop_writes_every_element_once_on_the_simulator(rows, cols, block):
    rng = np.random.default_rng(rows * 100 + cols)
    x, bias, ref = _rows_case(rng, rows, cols)
    out = np.full((rows, cols), -7.0, np.float32)
    kw = {} if block is None else {"block": block}
    K.scale_bias_rows.simulate(x, bias, out, np.float32(1.5), **kw)     # grid derived: 4 columns a thread
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("B, T, C, V", [(2, 3, 12, 7), (2, 5, 10, 9), (1, 2, 3, 4), (3, 1, 17, 5)])
def test_a_3d_chunk_loop_with_a_row_chosen_by_data_matches_numpy_on_the_simulator(B, T, C, V):
    rng = np.random.default_rng(B * 1000 + T * 100 + C)
    inp, wte, wpe, ref = _embed_case(rng, B, T, C, V)
    out = np.full((B, T, C), 3.0, np.float32)
    K.embed.simulate(out, inp, wte, wpe, block=(4, 2, 1))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    assert np.isnan(out[~((inp >= 0) & (inp < V))]).all()


def test_the_derived_grid_counts_n_elements_a_thread_along_x():
    x = np.zeros((5, 10), np.float32)
    contract = json.loads(K.scale_bias_rows.compile(x, np.zeros(10, np.float32), x.copy(), np.float32(1.0),
                                                    arch="sm_90").contract_json)
    assert contract["grid_from"] == {"arg": "out", "per_thread": [4, 1, 1]}
    assert contract["strict_domain"] is True


def test_the_encoder_rows_load_and_store_16_byte_vectors():
    inp, wte, wpe, _ = _embed_case(np.random.default_rng(1), 2, 4, 768, 50)
    ck = K.embed.compile(np.zeros((2, 4, 768), np.float32), inp, wte, wpe, arch="sm_90")
    assert re.search(r"ld\.global\.nc\.v4\.b32", ck.ptx), "wte / wpe rows should load as 16-byte vectors"
    assert re.search(r"st\.global\.v4\.b32", ck.ptx), "out's run should store as one 16-byte vector"
    assert max(_accesses(ck.ptx, "ld")) == max(_accesses(ck.ptx, "st")) == 16
    assert ck.metadata["slow_paths"] == []


def test_a_row_not_proven_inside_the_array_stays_per_element_and_says_why():
    x = np.zeros((6, 8), np.float32)
    ck = K.gather_unproven_row.compile(x, np.zeros(6, np.int32), x.copy(), arch="sm_90")
    paths = ck.metadata["slow_paths"]
    assert [p["kind"] for p in paths] == ["in-order"], paths
    assert paths[0]["line"] == K.marker_line("unproven_row")
    assert "row index is not proven inside x" in paths[0]["reason"]
    assert re.search(r"st\.global\.v4\.b32", ck.ptx), "out's own run is still one vector store"


def test_a_row_the_body_assigns_stays_per_element_and_says_why():
    x = np.zeros((6, 8), np.float32)
    ck = K.row_changes_in_body.compile(x, x.copy(), arch="sm_90")
    reasons = [p["reason"] for p in ck.metadata["slow_paths"]]
    assert any("in more than one row" in r and "x" in r for r in reasons), reasons


def test_a_row_the_body_assigns_still_computes_the_right_values():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    out = np.full_like(x, 9.0)
    K.row_changes_in_body.simulate(x, out, block=(2, 2, 1))
    ref = np.empty_like(x)
    ref[:, 0::2] = x[:, 0::2]            # the first element of each 2-column run reads row r
    ref[:, 1::2] = x[0, 1::2]            # the second reads row 0 (j = 0 after the first)
    np.testing.assert_array_equal(out, ref)


def test_a_row_that_an_inner_loop_runs_over_is_read_inside_the_loop():
    """Review find: an inner loop's variable as the row was taken for a row the body keeps, and the
    compile read it before the loop had set it (a CodegenError)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 10)).astype(np.float32)
    out = np.full((5, 10), 9.0, np.float32)
    K.column_sums_in_rows.simulate(x, out)
    np.testing.assert_allclose(out, np.broadcast_to(x.astype(np.float64).sum(0), out.shape), rtol=1e-5, atol=1e-5)
    ck = K.column_sums_in_rows.compile(x, out, arch="sm_90")
    paths = ck.metadata["slow_paths"]
    assert [(p["kind"], p["line"]) for p in paths] == [("in-order", K.marker_line("inner_loop_row"))], paths


# ---------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("cols", [4, 10, 12, 768, 770])
def test_2d_chunk_rows_match_numpy_on_the_gpu_whatever_the_row_length(cols):
    rng = np.random.default_rng(cols)
    x, bias, ref = _rows_case(rng, 37, cols)
    out = bridge.from_host(np.full((37, cols), -7.0, np.float32))
    K.scale_bias_rows(bridge.from_host(x), bridge.from_host(bias), out, np.float32(1.5))
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("C", [768, 10])
def test_3d_chunk_encoder_matches_numpy_on_the_gpu(C):
    rng = np.random.default_rng(C)
    inp, wte, wpe, ref = _embed_case(rng, 3, 33, C, 101)
    out = bridge.from_host(np.full((3, 33, C), 5.0, np.float32))
    K.embed(out, bridge.from_host(inp), bridge.from_host(wte), bridge.from_host(wpe))
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-6, atol=1e-6)
