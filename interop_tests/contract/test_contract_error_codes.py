"""Every validator error code is reachable and maps to its bridge.errors class (C++ and Python agree)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import ERROR_CLASSES
from contract_support import BASE, arr, contract, desc, limits, run, sca


EXPECTED_CLASSES = {
    "ok": None, "argument_count": bridge.ArgumentCountError, "argument_kind": bridge.ArgumentKindError,
    "dtype": bridge.DTypeError, "ndim": bridge.NdimError, "shape_relation": bridge.ShapeRelationError,
    "layout": bridge.LayoutError, "alignment": bridge.AlignmentError, "readonly": bridge.ReadOnlyError,
    "aliasing": bridge.AliasingError, "device_mismatch": bridge.DeviceMismatchError,
    "scalar_range": bridge.ScalarRangeError, "block_size": bridge.BlockSizeError, "grid_size": bridge.GridSizeError,
    "shared_memory": bridge.SharedMemoryError, "compute_capability": bridge.ComputeCapabilityError,
    "contract_definition": bridge.ContractDefinitionError, "missing_contract": bridge.MissingContractError,
    "cooperative_grid": bridge.CooperativeGridError, "cluster": bridge.ClusterError,
}


def test_error_code_table_matches_the_python_classes():
    codes = _native.ERROR_CODES
    assert sorted(codes.values()) == list(range(len(ERROR_CLASSES)))
    assert {name: ERROR_CLASSES[code] for name, code in codes.items()} == EXPECTED_CLASSES


K_ARGS = [arr("x"), arr("out", access="write", layout="C", align=16), sca("n", "u8")]
K = contract(K_ARGS, kernel="k",
             block={"exact": [32]}, dynamic_smem={"exact": 0}, min_cc=80, requires=["len(x) == len(out)"],
             grid_from={"arg": "out"})


def ok():
    return [desc((50,), ptr=BASE), desc((50,), ptr=BASE + 4096), 3]


def swap(pos, value):
    a = ok()
    a[pos] = value
    return a


SCENARIOS = {
    "argument_count": lambda: run(K, ok()[:2]),
    "argument_kind": lambda: run(K, swap(2, desc((1,), ptr=BASE + 8192))),
    "dtype": lambda: run(K, swap(0, desc((50,), "i32", ptr=BASE))),
    "ndim": lambda: run(K, swap(0, desc((5, 10), ptr=BASE))),
    "shape_relation": lambda: run(K, swap(0, desc((51,), ptr=BASE))),
    "layout": lambda: run(K, swap(1, desc((50,), ptr=BASE + 4096, strides=(8,)))),
    "alignment": lambda: run(K, swap(1, desc((50,), ptr=BASE + 4100))),
    "readonly": lambda: run(K, swap(1, desc((50,), ptr=BASE + 4096, readonly=True))),
    "aliasing": lambda: run(K, swap(1, desc((50,), ptr=BASE + 16))),
    "device_mismatch": lambda: run(K, swap(0, np.arange(50, dtype=np.float32))),
    "scalar_range": lambda: run(K, swap(2, 256)),
    "block_size": lambda: run(K, ok(), block=64),
    "grid_size": lambda: run(K, ok(), grid=(1, 0, 1)),
    "shared_memory": lambda: run(K, ok(), smem=1024),
    "compute_capability": lambda: run(K, ok(), lim=limits(cc=75)),
    "contract_definition": lambda: contract([arr("x", "q8")]),
    # launch features (test_launch_features.py has the rest): a grid past the declared co-residency, a
    # grid that is no multiple of the cluster
    "cooperative_grid": lambda: run(contract(K_ARGS, kernel="k", block={"exact": [32]}, cooperative=True),
                                    ok(), grid=9, lim=limits(sim_max_coresident=8)),
    "cluster": lambda: run(contract(K_ARGS, kernel="k", block={"exact": [32]}, cluster=[2]), ok(), grid=3),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_error_code_is_reachable(name):
    cls = ERROR_CLASSES[_native.ERROR_CODES[name]]
    with pytest.raises(bridge.LaunchContractError) as info:
        SCENARIOS[name]()
    assert type(info.value) is cls
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("k: ")


def test_numpy_host_array_goes_through_intake_and_is_refused_as_host_memory():
    with pytest.raises(bridge.DeviceMismatchError) as info:
        run(K, swap(0, np.arange(50, dtype=np.float32)))
    assert str(info.value) == "k: argument 'x' (#0): expected device memory on cuda:0, got host memory (cpu)"


def test_missing_contract_is_the_runtimes_code_not_the_validators():
    assert "missing_contract" not in SCENARIOS
    assert ERROR_CLASSES[_native.ERROR_CODES["missing_contract"]] is bridge.MissingContractError


def test_correct_launch_passes():
    assert run(K, ok()) == ((2, 1, 1), (32, 1, 1))
