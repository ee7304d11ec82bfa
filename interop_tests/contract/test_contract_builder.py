"""bridge.LaunchContract / ArgSpec: the Python builder parses eagerly through the one native validator."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bridge
from bridge import ArgSpec, LaunchContract
from contract_support import BASE, desc, limits

ml_dtypes = pytest.importorskip("ml_dtypes")


def vecadd(**kw) -> LaunchContract:
    args = [ArgSpec.array("a", "f32"), ArgSpec.array("b", np.float32), ArgSpec.array("out", "float32", access="write"),
            ArgSpec.scalar("n", np.dtype("int32"))]
    return LaunchContract("vecadd", args, block=kw.pop("block", 256), requires=["len(a) == len(out)"],
                          grid_from="out", **kw)


def test_builder_accepts_every_dtype_spelling():
    specs = [ArgSpec.scalar("x", t) for t in ("f32", "float32", np.float32, np.dtype("float32"))]
    assert {s.dtype for s in specs} == {"f32"}
    assert ArgSpec.array("h", ml_dtypes.bfloat16).dtype == "bf16"
    assert ArgSpec.array("q", "any").dtype == "any"
    with pytest.raises(bridge.ContractDefinitionError, match="argument 'z': expected a dtype"):
        ArgSpec.scalar("z", "float33")


def test_builder_json_is_schema_v1_and_round_trips():
    c = vecadd(launch_bounds=None, shared_mem=("max", 1024), min_cc=80, inplace=[("a", "out")], per_thread=2,
               fault_sites=[{"id": 1, "array": "a", "file": "k.py", "line": 3, "text": "a[i]"}])
    d = json.loads(c.to_json())
    assert d["block"] == {"exact": [256, 1, 1]} and d["dynamic_smem"] == {"max": 1024}
    assert d["grid_from"] == {"arg": "out", "per_thread": [2, 1, 1]} and d["inplace"] == [["a", "out"]]
    assert d["args"][3] == {"name": "n", "kind": "scalar", "dtype": "i32"}
    back = LaunchContract.from_json(c.to_json())
    assert back == c and back.native().to_json() == c.native().to_json()
    assert c.native() is c.native()
    assert c.native().has_fault_buffer


def test_builder_validates_a_launch():
    c = vecadd()
    args = [desc((1000,), ptr=BASE), desc((1000,), ptr=BASE + 8192), desc((1000,), ptr=BASE + 16384), 1000]
    assert c.validate(args, limits=limits()) == ((4, 1, 1), (256, 1, 1))
    args[2] = desc((999,), ptr=BASE + 16384)
    with pytest.raises(bridge.ShapeRelationError, match=r"^vecadd: argument 'out' \(#2\)"):
        c.validate(args, limits=limits())


@pytest.mark.parametrize("kwargs,needle", [
    (dict(domain=4), "domain: expected an integer in [1, 3], got 4"),
    (dict(block=(64, 32)), "block.exact: expected at most 1024 threads per block, got 2048"),
    (dict(block=None, launch_bounds=4096), "block.max_threads: expected an integer in [1, 1024], got 4096"),
    (dict(block=128, launch_bounds=128), "give block (exact) or launch_bounds, not both"),
    (dict(inplace=[("a", "zz")]), "inplace[0][1]: 'zz' is not an argument"),
    (dict(requires=["len(a) == len(nope)"]), "unknown name 'nope'"),
    (dict(shared_mem=("min", 3)), "shared_mem: expected bytes or ('max', bytes)"),
    (dict(per_thread=(1, 2, 3, 4)), "per_thread: expected an int or a tuple of 1 to 3 ints"),
])
def test_builder_raises_definition_errors_at_construction(kwargs, needle):
    args = [ArgSpec.array("a", "f32"), ArgSpec.array("out", "f32", ndim=1, access="write")]
    base = dict(block=256, grid_from="out")
    base.update(kwargs)
    if "requires" in kwargs:
        base["requires"] = kwargs["requires"]
    with pytest.raises(bridge.ContractDefinitionError) as info:
        LaunchContract("vecadd", args, **base)
    assert needle in str(info.value)


def test_argspec_rejects_bad_layout_access_and_abi():
    with pytest.raises(bridge.ContractDefinitionError, match="layout"):
        ArgSpec.array("a", "f32", layout="row")
    with pytest.raises(bridge.ContractDefinitionError, match="access"):
        ArgSpec.array("a", "f32", access="rw")
    with pytest.raises(bridge.ContractDefinitionError, match="abi"):
        ArgSpec.array("a", "f32", abi="ref")


def test_non_argspec_args_are_refused():
    with pytest.raises(bridge.ContractDefinitionError, match=r"args\[0\]: expected an ArgSpec"):
        LaunchContract("k", [{"name": "a"}])
