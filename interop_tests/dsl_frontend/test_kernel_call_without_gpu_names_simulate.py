"""A DSL kernel called on a machine without a GPU raises bridge.NoDeviceError as before (issue 31), but
its message now says how to run the kernel anyway: `kernel.simulate(...)` or `KB_SIMULATE=1`
(dsl/no_device.py). The real path runs off-GPU; the hint's rule is checked on every machine."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
import dsl.no_device as no_device
from dsl import f32, simt, tile

OFF_GPU = pytest.mark.skipif(bridge.gpu_available(), reason="this machine has a GPU: the no-device "
                             "call path is exercised on machines without one")


@simt.kernel
def copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


@tile.kernel
def tcopy(a: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(a, tile.bid(0), out.tile_shape))


def arrays() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(8, dtype=np.float32), np.zeros(8, np.float32)


@OFF_GPU
@pytest.mark.parametrize("form", ["call", "keywords", "subscript", "launch"])
def test_simt_call_without_gpu_names_simulate_and_kb_simulate(form, monkeypatch):
    monkeypatch.delenv("KB_SIMULATE", raising=False)
    a, out = arrays()
    call = {"call": lambda: copy(a, out), "keywords": lambda: copy(a, out, grid=1, block=8),
            "subscript": lambda: copy[1, 8](a, out), "launch": lambda: copy.launch(a, out, grid=1, block=8)}
    with pytest.raises(bridge.NoDeviceError) as info:
        call[form]()
    text = str(info.value)
    assert text.startswith("no usable CUDA device: ")
    assert "\nhint: run it on the CPU simulator instead: copy.simulate(...) with the same arguments" in text
    assert "KB_SIMULATE=1" in text and text.count("hint:") == 1
    assert info.value.hint in text


@OFF_GPU
def test_tile_call_without_gpu_names_simulate_and_kb_simulate(monkeypatch):
    monkeypatch.delenv("KB_SIMULATE", raising=False)
    a, out = arrays()
    with pytest.raises(bridge.NoDeviceError) as info:
        tcopy(a, tile.partition(out, (8,)))
    text = str(info.value)
    assert text.startswith("no usable CUDA device: ")
    assert "tcopy.simulate(...) with the same arguments" in text and "KB_SIMULATE=1" in text


@OFF_GPU
def test_following_the_hint_runs_the_kernel(monkeypatch):
    a, out = arrays()
    copy.simulate(a, out)
    assert out.tolist() == a.tolist()
    out[:] = 0
    monkeypatch.setenv("KB_SIMULATE", "1")
    copy(a, out)
    assert out.tolist() == a.tolist()


def test_hint_is_added_once_keeping_the_exception_object(monkeypatch):
    monkeypatch.setattr(no_device, "gpu_available", lambda: False)
    exc = bridge.NoDeviceError("no usable CUDA device: no CUDA driver on this machine")
    assert no_device.add_simulate_hint(exc, "k") is exc
    assert no_device.add_simulate_hint(exc, "k") is exc
    assert str(exc) == ("no usable CUDA device: no CUDA driver on this machine\nhint: run it on the CPU "
                        "simulator instead: k.simulate(...) with the same arguments, or set KB_SIMULATE=1 "
                        "in the environment to send every kernel call there (docs/configuration.md)")
    assert isinstance(exc, RuntimeError)


def test_no_hint_when_a_gpu_is_present(monkeypatch):
    monkeypatch.setattr(no_device, "gpu_available", lambda: True)
    exc = bridge.NoDeviceError("device 3 does not exist (1 device(s) present)")
    no_device.add_simulate_hint(exc, "k")
    assert str(exc) == "device 3 does not exist (1 device(s) present)"
    assert not hasattr(exc, "hint")
