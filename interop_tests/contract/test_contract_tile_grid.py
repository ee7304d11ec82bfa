"""Tile grids in the contract (`grid_from.tile`): one block per tile of the partition's array, flattened
into grid.x, capped at max_blocks_per_sm * SMs for persistent kernels — derived by the one validator."""
from __future__ import annotations

import json

import pytest

from bridge import LaunchContract, _native
from bridge.contract import ArgSpec


def contract(tile, max_blocks_per_sm=0):
    d = {"version": 1, "kernel": "t", "domain": 1, "block": {"exact": [128, 1, 1]},
         "args": [{"name": "x", "kind": "array", "dtype": "f32", "ndim": len(tile), "access": "read"},
                  {"name": "out", "kind": "array", "dtype": "f32", "ndim": len(tile), "access": "write"}],
         "grid_from": {"arg": "out", "tile": list(tile)}}
    if max_blocks_per_sm:
        d["grid_from"]["max_blocks_per_sm"] = max_blocks_per_sm
    return _native.Contract(json.dumps(d))


def launch(c, shape, sm_count=0):
    limits = _native.DeviceLimits()
    limits.sm_count = sm_count
    args = [_native.ArrayDesc(4096, list(shape)), _native.ArrayDesc(1 << 20, list(shape))]
    return _native.validate(c, args, limits=limits)


def test_one_block_per_tile_flattened_into_grid_x():
    grid, block = launch(contract((32, 16)), (100, 33))
    assert grid == (4 * 3, 1, 1) and block == (128, 1, 1)
    assert launch(contract((1024,)), (1000,))[0] == (1, 1, 1)
    assert launch(contract((1024,)), (1025,))[0] == (2, 1, 1)


def test_persistent_grids_are_capped_by_the_device_sm_count():
    c = contract((16,), max_blocks_per_sm=2)
    assert launch(c, (16 * 1000,), sm_count=132)[0] == (264, 1, 1)
    assert launch(c, (16 * 10,), sm_count=132)[0] == (10, 1, 1)     # fewer tiles than blocks
    assert launch(c, (16 * 1000,), sm_count=0)[0] == (1000, 1, 1)   # the simulator: no SM count


def test_an_empty_partition_launches_nothing():
    assert launch(contract((32, 16)), (0, 33))[0][0] == 0


def test_tile_grids_round_trip_through_json_and_the_python_builder():
    c = contract((32, 16), max_blocks_per_sm=2)
    assert json.loads(c.to_json())["grid_from"] == {"arg": "out", "tile": [32, 16], "max_blocks_per_sm": 2}
    assert c.grid_tile == (32, 16) and c.max_blocks_per_sm == 2
    lc = LaunchContract("t", [ArgSpec.array("out", "f32", 2, access="write")], block=64,
                        grid_from="out", grid_tile=(8, 8))
    assert lc.to_dict()["grid_from"] == {"arg": "out", "tile": [8, 8]}
    assert LaunchContract.from_json(lc.to_json()) == lc


@pytest.mark.parametrize("tile", [(0,), (3, 4)])
def test_bad_tile_shapes_are_contract_definition_errors(tile):
    import bridge
    d = {"version": 1, "kernel": "t", "args": [{"name": "out", "kind": "array", "dtype": "f32", "ndim": 1,
                                                 "access": "write"}],
         "grid_from": {"arg": "out", "tile": list(tile)}}
    with pytest.raises(bridge.ContractDefinitionError, match="grid_from.tile"):
        _native.Contract(json.dumps(d))
