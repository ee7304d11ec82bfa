"""A hostile array producer (a `__dlpack__` or `__cuda_array_interface__` that raises, recurses or
returns garbage) met while choosing a kernel's specialisation is the bridge's ArgumentKindError naming
the kernel, the argument and its position, with the producer's own reason — never the producer's raw
exception (RuntimeError, KeyError, RecursionError, ...) escaping from `signature`/`ptx`/`simulate`."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.errors import ArgumentKindError
from dsl import f32, simt


@simt.kernel
def k(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


class RaisingDlpack:
    def __dlpack__(self, stream=None, max_version=None):
        raise RuntimeError("producer exploded")

    def __dlpack_device__(self):
        return (1, 0)


class RaisingDevice:
    def __dlpack__(self, stream=None, max_version=None):
        return np.zeros(3, np.float32).__dlpack__()

    def __dlpack_device__(self):
        raise ValueError("no device today")


class DlpackTypeError:
    def __dlpack__(self, stream=None, max_version=None):
        raise TypeError("odd producer")

    def __dlpack_device__(self):
        return (1, 0)


class NotACapsule:
    def __dlpack__(self, stream=None, max_version=None):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


class RecursiveDlpack:
    def __dlpack__(self, stream=None, max_version=None):
        return self.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class RaisingCaiProperty:
    @property
    def __cuda_array_interface__(self):
        raise KeyError("boom")


class RecursiveCaiProperty:
    @property
    def __cuda_array_interface__(self):
        return self.__cuda_array_interface__


class MalformedCai:
    __cuda_array_interface__ = {"version": 3, "shape": "abc", "typestr": "<f4", "data": (0, False)}


class StridesDisagree:
    __cuda_array_interface__ = {"version": 3, "shape": (3,), "typestr": "<f4", "data": (1 << 20, False),
                                "strides": (1, 2)}


class RaisingDtypeTag:
    @property
    def dtype_tag(self):
        raise RuntimeError("no tag")


HOSTILE = [
    (RaisingDlpack, "RuntimeError: producer exploded"),
    (RaisingDevice, "ValueError: no device today"),
    (DlpackTypeError, "TypeError: odd producer"),
    (NotACapsule, "__dlpack__() returned a int"),
    (RecursiveDlpack, "RecursionError"),
    (RaisingCaiProperty, "KeyError: 'boom'"),
    (RecursiveCaiProperty, "RecursionError"),
    (MalformedCai, "__cuda_array_interface__['shape']: expected an integer, got str"),
    (StridesDisagree, "strides and shape differ in length"),
    (RaisingDtypeTag, "RuntimeError: no tag"),
]
X = np.zeros(8, np.float32)


@pytest.mark.parametrize("cls, reason", HOSTILE, ids=[c.__name__ for c, _ in HOSTILE])
def test_a_hostile_producer_is_an_argument_kind_error_naming_the_argument(cls, reason):
    with pytest.raises(ArgumentKindError) as info:
        k.signature(X, cls(), np.float32(1))
    e = info.value
    assert str(e).startswith(f"k: argument 'out' (#1): {cls.__name__} failed as an array producer (")
    assert reason in str(e)
    assert (e.kernel, e.arg, e.arg_name) == ("k", 1, "out")


@pytest.mark.parametrize("cls", [RaisingDlpack, RecursiveCaiProperty])
def test_ptx_and_simulate_report_the_same_error(cls):
    for call in (lambda: k.ptx(cls(), X, np.float32(1)), lambda: k.simulate(cls(), X, np.float32(1))):
        with pytest.raises(ArgumentKindError, match=rf"k: argument 'a' \(#0\): {cls.__name__} failed"):
            call()


def test_a_scalar_slot_given_a_hostile_producer_is_refused_as_an_array():
    with pytest.raises(ArgumentKindError, match=r"k: argument 's' \(#2\): expected a scalar, got an array"):
        k.signature(X, X, RaisingCaiProperty())


def test_objects_without_any_array_protocol_keep_the_plain_message():
    with pytest.raises(ArgumentKindError, match=r"k: argument 'a' \(#0\): expected an array \(simt.Array\), "
                                                r"got object$"):
        k.signature(object(), X, np.float32(1))
