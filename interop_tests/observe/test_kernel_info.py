"""`kernel.inspect(...)` returns a KernelInfo (dsl/backend/inspect.py) for SIMT and tile kernels: attributes
with the contract as a dict, a readable `str()`, and the old dict keys through `info[key]` (where
"contract" is still the JSON text); `kernel.ir(...)` returns the typed IR as text and prints nothing."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dsl import f32, simt, tile
from dsl.backend.inspect import KernelInfo
from dsl.backend.ptxas import find_ptxas

needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed: inspect() needs it")


@simt.kernel(block=256, requires=["len(a) == len(out)"])
def info_vecadd(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@tile.kernel
def info_tadd(a: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) * 2.0)


OLD_KEYS = ["kernel", "symbol", "arch", "resources", "ptxas_log", "contract", "contract_dict", "sass", "metadata"]


@needs_ptxas
@pytest.mark.slow
def test_simt_inspect_gives_attributes_with_the_contract_as_a_dict():
    a = np.zeros(100, np.float32)
    info = info_vecadd.inspect(a, a, a, arch="sm_90")
    assert isinstance(info, KernelInfo)
    assert (info.kernel, info.symbol, info.arch) == ("info_vecadd", "info_vecadd", "sm_90")
    assert info.contract["kernel"] == "info_vecadd"
    assert info.contract["block"] == {"exact": [256, 1, 1]}
    assert info.contract["requires"] == ["len(a) == len(out)"]
    assert [x["name"] for x in info.contract["args"]] == ["a", "b", "out"]
    assert json.loads(info.contract_json) == info.contract
    assert info.resources["registers"] > 0 and info.resources["spill_stores"] == 0
    assert "info_vecadd" in info.ptxas_log and info.metadata["arch"] == "sm_90"
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.arch = "sm_80"  # type: ignore[misc]


@needs_ptxas
def test_the_old_dict_keys_still_answer_with_the_old_values():
    a = np.zeros(100, np.float32)
    info = info_vecadd.inspect(a, a, a, arch="sm_90")
    assert info["contract"] == info.contract_json and '"kernel":"info_vecadd"' in info["contract"]
    assert info["contract_dict"] is info.contract
    assert info["resources"] is info.resources and info["sass"] is info.sass
    assert list(dict(info)) == OLD_KEYS
    with pytest.raises(KeyError, match="KernelInfo has no key 'registers'; keys: kernel, symbol, arch"):
        info["registers"]


@needs_ptxas
@pytest.mark.slow
def test_str_is_a_short_report_of_resources_contract_and_arguments():
    a = np.zeros(100, np.float32)
    text = str(info_vecadd.inspect(a, a, a, arch="sm_90"))
    lines = text.splitlines()
    assert lines[0] == "kernel info_vecadd (symbol info_vecadd) for sm_90"
    assert any(line.startswith("  registers:") and line.split()[-1].isdigit() for line in lines)
    assert "  spill stores:         0 bytes" in lines
    assert ("  contract: 1-D domain, block exactly 256x1x1, grid from 'out' (per thread [1, 1, 1]), "
            "1 run-time bounds check") in lines
    assert "    out: f32 array, ndim 1, layout C, write" in lines
    assert "    requires len(a) == len(out)" in lines
    assert lines[-1].startswith("  SASS: ")
    assert len(lines) < 25


@needs_ptxas
def test_tile_inspect_gives_the_same_object_with_the_tile_grid():
    a = np.zeros(256, np.float32)
    info = info_tadd.inspect(a, tile.partition(np.zeros(256, np.float32), (128,)), arch="sm_80")
    assert isinstance(info, KernelInfo) and info.kernel == "info_tadd" and info.arch == "sm_80"
    assert info.contract["grid_from"] == {"arg": "out", "tile": [128]}
    assert info["contract_dict"]["grid_from"] == {"arg": "out", "tile": [128]}
    assert "grid from 'out' (tiles [128])" in str(info)


def test_str_says_what_is_missing_when_ptxas_reported_nothing_and_there_is_no_sass():
    info = KernelInfo(kernel="k", symbol="k_sym", arch="sm_90", resources={}, ptxas_log="",
                      contract={"kernel": "k", "domain": 2, "block": {"max_threads": 512},
                                "dynamic_smem": {"max": 4096},
                                "args": [{"name": "s", "kind": "scalar", "dtype": "i32"}]},
                      contract_json="{}", sass=None, metadata={"cache": "disk", "ptx_version": 86})
    assert str(info).splitlines() == [
        "kernel k (symbol k_sym) for sm_90",
        "  resources: ptxas reported none for this symbol",
        "  contract: 2-D domain, block at most 512 threads, grid must be given, dynamic shared memory at "
        "most 4096 bytes",
        "    s: i32 scalar",
        "  compiled: cache disk, PTX ISA 8.6",
        "  SASS: not available (no cuobjdump / nvdisasm)",
    ]


def test_ir_returns_the_text_and_prints_nothing(capsys):
    a = np.zeros(100, np.float32)
    text = info_vecadd.ir(a, a, a)
    ttext = info_tadd.ir(a, tile.partition(np.zeros(100, np.float32), (128,)))
    assert capsys.readouterr() == ("", "")
    assert isinstance(text, str) and "info_vecadd" in text and text.count("\n") > 3
    assert isinstance(ttext, str) and "info_tadd" in ttext and ttext.count("\n") > 3
