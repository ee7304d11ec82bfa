"""Launch features in the PTX (docs/dsl.md, "Launch features"): PDL's griddepcontrol, the grid barrier
of a cooperative kernel, a cluster's directives, registers, barriers and mapa — for SIMT and tile
kernels, assembled by ptxas for sm_90a and, where the feature exists there, sm_80. The contract and the
disk-cache key carry the decorator's options."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from dsl import f32, simt, tile
from dsl.backend.ptxas import assemble
from dsl.backend.target import TargetError
from interop_tests.dsl_codegen.codegen_kit import require_ptxas
from interop_tests.dsl_sim import launch_kernels as K

pytestmark = pytest.mark.slow       # ptxas runs

X = np.zeros(4096, np.float32)
SCALE = (np.float32(1.5), np.float32(0.5))


def _assembles(ptx: str, *archs: str) -> None:
    require_ptxas()
    for arch in archs:
        assemble(ptx, arch)


def _first(ptx: str, pattern: str) -> int:
    m = re.search(pattern, ptx)
    assert m is not None, f"{pattern!r} not in the PTX"
    return m.start()


def test_a_pdl_kernel_waits_at_its_entry_before_any_global_access():
    ptx = K.axpb.ptx(X, X.copy(), *SCALE, arch="sm_90")
    assert ptx.count("griddepcontrol.wait;") == 1 and "griddepcontrol.launch_dependents;" in ptx
    wait = _first(ptx, r"griddepcontrol\.wait")
    assert wait < _first(ptx, r"ld\.global") and wait < _first(ptx, r"st\.global")
    assert "ld.global.nc" in ptx                       # read-only loads keep the read-only path after it
    _assembles(ptx, "sm_90a")
    old = K.axpb.ptx(X, X.copy(), *SCALE, arch="sm_80")
    assert "griddepcontrol" not in old                 # before sm_90: an ordinary launch, nothing emitted
    _assembles(old, "sm_80")


def test_an_explicit_wait_replaces_the_one_at_entry():
    ptx = K.axpb_explicit.ptx(X, X.copy(), *SCALE, arch="sm_90")
    assert ptx.count("griddepcontrol.wait;") == 1
    assert _first(ptx, r"griddepcontrol\.wait") < _first(ptx, r"ld\.global")
    _assembles(ptx, "sm_90a")


def test_a_cooperative_kernel_has_its_barrier_word_and_release_acquire_spin():
    p, out = np.zeros(64, np.float32), X.copy()
    ptx = K.center.ptx(X, p, out, arch="sm_90")
    assert re.search(r"\.global \.align 4 \.u32 center\S*grid_sync\S*bar;", ptx)   # zero when the module loads
    assert "atom.add.release.gpu.global.u32" in ptx and "ld.acquire.gpu.global.u32" in ptx
    assert "atom.relaxed.gpu.global.cas.b32" in ptx    # a fault takes the arrival back
    assert ptx.count("bar.sync") >= 2
    contract = json.loads(K.center.compile(X, p, out, arch="sm_90").contract_json)
    assert contract["cooperative"] is True and "pdl" not in contract and "cluster" not in contract
    _assembles(ptx, "sm_90a")
    _assembles(K.center.ptx(X, p, out, arch="sm_80"), "sm_80")


def test_a_cluster_kernel_declares_its_cluster_and_maps_a_peer_block():
    out, ranks = np.zeros(32, np.float32), np.zeros(32, np.float32)
    ptx = K.neighbour_sums.ptx(X, out, ranks, arch="sm_90")
    assert ".explicitcluster" in ptx and re.search(r"\.reqnctapercluster 2, 1, 1", ptx)
    for needle in ("%cluster_ctarank", "%cluster_nctarank", "%cluster_ctaid.x", "mapa.u64",
                   "barrier.cluster.arrive.release", "barrier.cluster.wait.acquire"):
        assert needle in ptx, needle
    assert json.loads(K.neighbour_sums.compile(X, out, ranks, arch="sm_90").contract_json)["cluster"] == [2, 1, 1]
    _assembles(ptx, "sm_90a")
    with pytest.raises(TargetError, match="clusters need sm_90 or newer, the target is sm_80"):
        K.neighbour_sums.ptx(X, out, ranks, arch="sm_80")


def test_tile_kernels_carry_the_same_features():
    y = tile.partition(X.copy(), (256,))
    ptx = K.tile_axpb.ptx(X, y, *SCALE, arch="sm_90")
    assert ptx.count("griddepcontrol.wait;") == 1 and "griddepcontrol.launch_dependents;" in ptx
    assert json.loads(K.tile_axpb.compile((X, y, *SCALE), "sm_90").contract_json)["pdl"] is True
    ranks = K.tile_ranks.ptx(y, arch="sm_90")
    assert re.search(r"\.reqnctapercluster 2, 1, 1", ranks) and "%cluster_ctarank" in ranks
    coop = K.tile_plus_one.ptx(X, y, arch="sm_90")
    assert "atom.add.release.gpu.global.u32" in coop
    assert json.loads(K.tile_plus_one.compile((X, y), "sm_90").contract_json)["cooperative"] is True
    _assembles(ptx, "sm_90a")
    _assembles(ranks, "sm_90a")
    _assembles(coop, "sm_90a")


def _copy(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    out[simt.thread.index_1d()] = x[simt.thread.index_1d()]


def test_the_options_are_part_of_the_cache_key_and_the_contract():
    from dsl.cache import cache_key
    plain, pdl = simt.kernel(block=128)(_copy), simt.kernel(block=128, pdl=True)(_copy)
    clustered = simt.kernel(block=128, cluster=2)(_copy)
    sig = plain.signature(X, X.copy())
    keys = {cache_key(_copy, sig, k.options, "sm_90") for k in (plain, pdl, clustered)}
    assert len(keys) == 3
    assert "griddepcontrol.wait" not in plain.ptx(X, X.copy()) and "griddepcontrol.wait" in pdl.ptx(X, X.copy())
    assert pdl.contract(X, X.copy()).pdl is True and plain.contract(X, X.copy()).pdl is False
    assert clustered.contract(X, X.copy()).cluster == (2, 1, 1)


def _tile_copy(x: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(x, tile.bid(0), out.tile_shape))


def test_a_tile_kernel_compiled_with_other_launch_features_is_another_cache_entry():
    y = tile.partition(X.copy(), (256,))
    first = tile.kernel(_tile_copy).compile((X, y), "sm_90")
    second = tile.kernel(_tile_copy, cluster=2).compile((X, y), "sm_90")
    assert "cluster" not in json.loads(first.contract_json)
    assert json.loads(second.contract_json)["cluster"] == [2, 1, 1] and ".reqnctapercluster 2, 1, 1" in second.ptx
