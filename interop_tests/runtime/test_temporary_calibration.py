"""The temporaries calibration (bridge/kernel.py) measures the call shapes the launches really take.

A temporary (an array only the call holds) must be kept alive until its launch completes; the launcher
recognises one by its reference count, calibrated at import per call path. Kernel.__call__ and the DSL
kernels' __call__ are instance calls, whose type-slot dispatch adds references a plain `def f(*args)`
does not: the calibration measures them through `_CallShape`, which must keep their shape."""
from __future__ import annotations

import inspect

from bridge import _native
from bridge import kernel as bk
from dsl.simt.kernel import SimtKernel
from dsl.tile.host import TileKernel


def test_the_instance_call_shape_tells_temporaries_from_named_arrays():
    probe, named = bk._CallShape(), object()
    assert probe(object())[0] < probe(named)[0]
    assert probe(object(), stream=None)[0] < probe(named, stream=None)[0]


def test_an_instance_call_counts_more_references_than_a_plain_wrapper():
    """The reason for the separate calibration (a plain `def f(*args)` threshold misses these)."""
    def plain(*args):
        return _native.refcount_probe_fast(*args)
    assert bk._CallShape()(object())[0] > plain(object())[0]


def test_the_calls_keep_the_calibrated_shape():
    for cls in (bk.Kernel, SimtKernel, TileKernel):
        sig = inspect.signature(cls.__call__)
        kinds = [p.kind for p in sig.parameters.values()]
        assert kinds == [inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL,
                         inspect.Parameter.VAR_KEYWORD], (cls, sig)
    assert "self._fast(*args)" in inspect.getsource(bk.Kernel.__call__)
    assert "from_call=True" in inspect.getsource(bk.Kernel.__call__)
    for cls in (SimtKernel, TileKernel):
        assert "(self._fast or self._fastcall())(*args)" in inspect.getsource(cls.__call__)
