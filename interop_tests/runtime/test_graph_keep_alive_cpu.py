"""bridge.Graph.keep_alive: what a captured graph uses that no bridge launch names (the torch memory
pool a capture's temporaries came from, examples/gpt2/train.capture) lives as long as the graph, beside
the buffers its captured launches keep, and goes with close(). No GPU needed: a Graph without an
executable closes without the driver. The GPU side: interop_tests/gpt2/test_gpt2_gpu.py (a caller that
drops its pool)."""
from __future__ import annotations

import gc
import weakref

import bridge


class Pool:
    """Stands in for a torch.cuda.MemPool (any object)."""


def test_a_kept_object_outlives_its_last_other_reference_until_close():
    g = bridge.Graph()
    captured, pool = Pool(), Pool()
    g._keep([captured])                      # what the capture's launches recorded
    g.keep_alive(pool)
    gone_pool, gone_captured = weakref.ref(pool), weakref.ref(captured)
    del pool, captured
    gc.collect()
    assert gone_pool() is not None and gone_captured() is not None
    assert len(g.objects) == 2
    g.close()
    gc.collect()
    assert gone_pool() is None and gone_captured() is None


def test_keep_alive_adds_to_what_the_capture_kept_and_takes_several():
    g = bridge.Graph()
    first = Pool()
    g._keep([first])
    a, b = Pool(), Pool()
    g.keep_alive(a, b)
    assert g.objects[0] is first and g.objects[1:] == [a, b]
