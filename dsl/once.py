"""Per-object caches filled once, whichever threads ask: the specialisation caches of kernel objects.

Why: a kernel object is shared by every thread that calls it. Filled check-then-set, the first calls
of one signature from several threads each compiled it (one from LLVM, others reading back the disk
entry a faster one had just written) and raced to publish different objects. `fill_once` makes the
first caller of a key compute the value while later callers of that key wait for it, and publishes
the finished value in one dict store, so every thread gets the same complete object. A hit takes no
lock (one dict lookup).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, TypeVar

V = TypeVar("V")


def new_lock() -> threading.RLock:
    """The lock one kernel object's caches share (re-entrant: filling one cache may fill another)."""
    return threading.RLock()


def fill_once(cache: dict[Any, V], key: Hashable, lock: Any, make: Callable[[], V]) -> V:
    """`cache[key]`, made by `make()` exactly once per key (an exception leaves the key unfilled)."""
    value = cache.get(key)
    if value is not None:
        return value
    with lock:
        value = cache.get(key)
        if value is None:
            value = make()
            cache[key] = value
    return value
