"""The targets' oracles can fail: each is shown a wrong result and must say so (a fuzz target whose
oracle never fires would pass vacuously)."""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

from interop_tests.fuzz import t_differential as D
from interop_tests.fuzz import t_intake as I
from interop_tests.fuzz import t_modules as M
from interop_tests.fuzz.harness import input_rng
from interop_tests.fuzz.targets import Oracle

CAPSULE = {"versioned": True, "name": None, "version": (1, 1), "flags": 0, "ndim": 1, "dtype": (2, 32, 1),
           "device": (1, 0), "shape": [4], "strides": None, "byte_offset": 0, "data": I.PTR, "deleter": True,
           "dlpack_device": "match", "legacy_producer": False}


def test_the_dlpack_ownership_oracle_passes_a_real_consumer_and_catches_a_leak():
    import bridge
    obj, (cap, address) = I.build(("capsule", dict(CAPSULE)))
    view = bridge.asarray(obj)
    assert view.shape == (4,)
    del view, obj
    gc.collect()
    I._check_ownership(cap, address, CAPSULE, None)          # consumed once, deleter ran once

    _, (cap, address) = I.build(("capsule", dict(CAPSULE)))
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    keep = ctypes.create_string_buffer(b"used_dltensor_versioned")
    set_name(cap, keep)                                       # "taken", but nobody will run the deleter
    with pytest.raises(Oracle, match="never ran the deleter"):
        I._check_ownership(cap, address, CAPSULE, None)


def test_the_differential_oracle_catches_an_off_result():
    spec = D.generate(input_rng("differential", 3, 0))
    spec.update(inputs=["f32", "f32"], out="f32", n=300,
                expr=("bin", "*", ("fn", "sin", ("in", 0)), ("in", 1)))
    xs = D.inputs_for(spec)
    good = (np.sin(xs[0].astype(np.float64)) * xs[1]).astype(np.float32)
    ref = D.evaluate(spec["expr"], xs, spec["inputs"])
    D.compare(spec, good, ref)                                # the exact answer passes
    bad = good.copy()
    bad[123] = np.nextafter(bad[123], np.float32(np.inf) * np.sign(bad[123])) * np.float32(1 + 1e-4)
    with pytest.raises(Oracle, match=r"(?s)on 1 of 300 comparable elements.*\[123\]"):
        D.compare(spec, bad, ref)


def test_the_module_oracle_catches_a_different_valid_contract_only():
    good = '{"kernel":"fill","block":{"exact":[64,1,1]},"args":[]}'
    other = good.replace("64", "65")
    M.check_against_base({"fill": good}, {"fill": good})              # unchanged
    M.check_against_base({"fill": good}, {"fill": good[:-3]})         # corrupt, refused when loaded
    M.check_against_base(None, {"fill": other})                       # the base itself was unreadable
    with pytest.raises(Oracle, match="fill: corrupt module bytes gave a different VALID contract"):
        M.check_against_base({"fill": good}, {"fill": other})


def test_the_contract_oracle_catches_a_configuration_outside_the_limits():
    from bridge import _native
    from interop_tests.fuzz import t_contract as C
    c = _native.Contract('{"kernel":"k","block":{"exact":[128,1,1]},"args":[]}')
    lim = C._limits({})
    C._check_config(c, lim, (4, 1, 1), (128, 1, 1))
    with pytest.raises(Oracle, match=r"block=\(64, 1, 1\) for a contract with exact block \(128, 1, 1\)"):
        C._check_config(c, lim, (4, 1, 1), (64, 1, 1))
    with pytest.raises(Oracle, match="outside the device limits"):
        C._check_config(c, lim, (2**31, 1, 1), (128, 1, 1))
