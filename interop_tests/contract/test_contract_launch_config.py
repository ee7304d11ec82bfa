"""Block, grid, shared memory, compute capability and function-attribute checks, and grid derivation."""
from __future__ import annotations

import math

import pytest

import bridge
from contract_support import BASE, arr, attrs, contract, desc, limits, run


def one_array(ndim=1, **top):
    return contract([arr("out", ndim=ndim, access="write")], kernel="kern", **top)


@pytest.mark.parametrize("domain,shape,block,per_thread", [
    (1, (1000,), (128, 1, 1), (1, 1, 1)),
    (1, (1001,), (256, 1, 1), (4, 1, 1)),
    (1, (3, 7, 1001), (96, 1, 1), (3, 1, 1)),
    (2, (37, 1001), (32, 8, 1), (1, 1, 1)),
    (2, (37, 1001), (32, 4, 1), (2, 3, 1)),
    (3, (5, 37, 1001), (32, 4, 2), (1, 1, 1)),
    (3, (9, 37, 1001), (16, 4, 2), (2, 5, 4)),
])
def test_grid_is_derived_from_the_shape_per_block_and_per_thread(domain, shape, block, per_thread):
    c = one_array(ndim=len(shape), domain=domain, grid_from={"arg": "out", "per_thread": list(per_thread)})
    grid, got_block = run(c, [desc(shape)], block=block)
    want = [1, 1, 1]
    for d in range(domain):
        want[d] = math.ceil(shape[len(shape) - 1 - d] / (block[d] * per_thread[d]))
    assert got_block == block and grid == tuple(want)


def test_default_block_is_the_exact_block_or_256_capped_by_bounds_and_function():
    c = one_array(block={"exact": [64, 2]}, domain=2, grid_from={"arg": "out"}, ndim=2)
    assert run(c, [desc((10, 1000))]) == ((16, 5, 1), (64, 2, 1))
    c = one_array(block={"max_threads": 128}, grid_from={"arg": "out"})
    assert run(c, [desc((1000,))]) == ((8, 1, 1), (128, 1, 1))
    c = one_array(grid_from={"arg": "out"})
    assert run(c, [desc((1000,))]) == ((4, 1, 1), (256, 1, 1))
    assert run(c, [desc((1000,))], fn=attrs(max_threads_per_block=192)) == ((6, 1, 1), (192, 1, 1))


def test_empty_output_derives_an_empty_grid_and_is_not_an_error():
    c = one_array(grid_from={"arg": "out"})
    assert run(c, [desc((0,))]) == ((0, 1, 1), (256, 1, 1))
    c2 = one_array(ndim=2, domain=2, grid_from={"arg": "out"})
    grid, _ = run(c2, [desc((0, 100))])
    assert grid[1] == 0


def test_given_grid_is_kept_and_checked():
    c = one_array()
    assert run(c, [desc((10,))], grid=(3, 2), block=32) == ((3, 2, 1), (32, 1, 1))
    assert run(c, [desc((10,))], grid=7, block=(32, 2)) == ((7, 1, 1), (32, 2, 1))


CONFIG_ERRORS = [
    # (contract keys, grid, block, smem, limits, attrs, class, exact message)
    (dict(block={"exact": [32]}), 1, 33, None, {}, {}, bridge.BlockSizeError,
     "kern: block (33, 1, 1): expected exactly (32, 1, 1), got (33, 1, 1)"),
    (dict(block={"exact": [32, 2]}), 1, (32, 1, 1), None, {}, {}, bridge.BlockSizeError,
     "kern: block (32, 1, 1): expected exactly (32, 2, 1), got (32, 1, 1)"),
    (dict(), 1, (32, 0, 1), None, {}, {}, bridge.BlockSizeError,
     "kern: block (32, 0, 1): expected every dimension >= 1, got 0 in y"),
    (dict(), 1, -5, None, {}, {}, bridge.BlockSizeError,
     "kern: block (-5, 1, 1): expected every dimension >= 1, got -5 in x"),
    (dict(block={"max_threads": 256}), 1, (32, 16), None, {}, {}, bridge.BlockSizeError,
     "kern: block (32, 16, 1): expected at most 256 threads (contract launch bounds), got 512"),
    (dict(), 1, 2048, None, {}, {}, bridge.BlockSizeError,
     "kern: block (2048, 1, 1): expected at most 1024 threads (device limit), got 2048"),
    (dict(), 1, (1, 1, 65), None, {}, {}, bridge.BlockSizeError,
     "kern: block (1, 1, 65): expected z <= 64 (device limit), got 65"),
    (dict(), 1, (512, 1, 1), None, {}, {"max_threads_per_block": 384}, bridge.BlockSizeError,
     "kern: block (512, 1, 1): expected at most 384 threads (max_threads_per_block of the compiled function), "
     "got 512"),
    (dict(), None, 32, None, {}, {}, bridge.GridSizeError,
     "kern: grid: expected an explicit grid (the contract has no grid_from: the kernel's threads range over no "
     "argument a grid could be derived from, e.g. it writes through atomics or shared memory); pass grid=, e.g. "
     "kern(..., grid=n) or kern[grid, block](...), got none"),
    (dict(), (0, 1, 1), 32, None, {}, {}, bridge.GridSizeError,
     "kern: grid (0, 1, 1): expected every dimension >= 1, got 0 in x"),
    (dict(), (1, 70000), 32, None, {}, {}, bridge.GridSizeError,
     "kern: grid (1, 70000, 1): expected y <= 65535 (device limit), got 70000"),
    (dict(), (1, 1, -1), 32, None, {}, {}, bridge.GridSizeError,
     "kern: grid (1, 1, -1): expected every dimension >= 1, got -1 in z"),
    (dict(dynamic_smem={"exact": 4096}), 1, 32, 0, {}, {}, bridge.SharedMemoryError,
     "kern: dynamic shared memory: expected exactly 4096 bytes, got 0"),
    (dict(dynamic_smem={"max": 8192}), 1, 32, 9000, {}, {}, bridge.SharedMemoryError,
     "kern: dynamic shared memory: expected at most 8192 bytes (contract max), got 9000"),
    (dict(), 1, 32, 16, {}, {}, bridge.SharedMemoryError,
     "kern: dynamic shared memory: expected exactly 0 bytes, got 16"),
    (dict(dynamic_smem={"max": 300000}), 1, 32, 232000, {}, {"static_smem": 1024}, bridge.SharedMemoryError,
     "kern: dynamic shared memory: expected at most 231424 bytes (device opt-in limit 232448 minus 1024 bytes "
     "of static shared memory), got 232000"),
    (dict(dynamic_smem={"max": 300000}), 1, 32, -1 - 1, {}, {}, bridge.SharedMemoryError,
     "kern: dynamic shared memory: expected >= 0 bytes, got -2"),
    (dict(min_cc=100), 1, 32, None, {}, {}, bridge.ComputeCapabilityError,
     "kern: compute capability: expected sm_100 or newer, got sm_90"),
    (dict(min_cc=90), 1, 32, None, {"cc": 80}, {}, bridge.ComputeCapabilityError,
     "kern: compute capability: expected sm_90 or newer, got sm_80"),
]


@pytest.mark.parametrize("top,grid,block,smem,lim,fn,cls,text", CONFIG_ERRORS)
def test_launch_configuration_errors(top, grid, block, smem, lim, fn, cls, text):
    c = one_array(**top)
    with pytest.raises(cls) as info:
        run(c, [desc((100,))], grid=grid, block=block, smem=smem, lim=limits(**lim), fn=attrs(**fn))
    assert isinstance(info.value, ValueError)
    assert str(info.value) == text
    assert info.value.kernel == "kern" and info.value.arg is None


def test_derived_grid_beyond_the_device_limit_names_the_array():
    c = one_array(ndim=2, domain=2, grid_from={"arg": "out"})
    with pytest.raises(bridge.GridSizeError) as info:
        run(c, [desc((70000 * 4, 3))], block=(32, 4))
    assert str(info.value) == ("kern: grid (1, 70000, 1): expected y <= 65535 (device limit) for the grid derived "
                               "from 'out', got 70000")


def test_smem_defaults_to_the_contract_value_and_max_accepts_less():
    assert run(one_array(dynamic_smem={"exact": 4096}), [desc((4,))], grid=1, block=32)
    assert run(one_array(dynamic_smem={"max": 65536}), [desc((4,))], grid=1, block=32, smem=65536)


def test_config_checks_follow_the_documented_order():
    c = one_array(block={"exact": [32]}, min_cc=100, dynamic_smem={"exact": 16})
    with pytest.raises(bridge.BlockSizeError):          # block before grid, smem, cc
        run(c, [desc((4,))], grid=0, block=64, smem=0)
    with pytest.raises(bridge.GridSizeError):           # grid before smem, cc
        run(c, [desc((4,))], grid=0, block=32, smem=0)
    with pytest.raises(bridge.SharedMemoryError):       # smem before cc
        run(c, [desc((4,))], grid=1, block=32, smem=0)
    with pytest.raises(bridge.ComputeCapabilityError):
        run(c, [desc((4,))], grid=1, block=32, smem=16)
    with pytest.raises(bridge.ShapeRelationError):      # argument checks before any config check
        c2 = contract([arr("out", access="write"), arr("b")], kernel="kern", requires=["len(out) == len(b)"],
                      block={"exact": [32]})
        run(c2, [desc((4,)), desc((5,), ptr=BASE + 4096)], grid=0, block=64)


def test_bad_grid_or_block_spelling_is_a_python_type_error():
    with pytest.raises(TypeError):
        run(one_array(), [desc((4,))], grid="big", block=32)
    with pytest.raises(ValueError):
        run(one_array(), [desc((4,))], grid=(1, 1, 1, 1), block=32)
