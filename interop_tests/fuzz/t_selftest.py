"""A target that misbehaves on request, so the harness's own tests can prove a crash, an abort, a
hang, a disallowed exception, an oracle failure and a memory blow-up are each reported and named."""
from __future__ import annotations

import ctypes
import os
import sys
import time

TIMEOUT = 2.0        # the harness tests wait this long for the 'hang' input (faulthandler dumps at 1 s)


def generate(rng):
    return ("ok", rng.randrange(1000))


def execute(spec):
    what = spec[0]
    if what == "ok":
        return f"ok {spec[1]}"
    if what == "allowed":
        raise ValueError("a typed refusal")
    if what == "bad":
        raise IndexError("an untyped error")
    if what == "oracle":
        from interop_tests.fuzz.targets import Oracle
        raise Oracle("wrong answer: 2 + 2 == 5")
    if what == "print_then_segv":
        print("last words before the crash", file=sys.stderr, flush=True)
        ctypes.string_at(0)
    if what == "segv":
        ctypes.string_at(0)
    if what == "abort":
        os.abort()
    if what == "exit":
        os._exit(spec[1])
    if what == "hang":
        time.sleep(3600)
    if what == "memory":
        block = bytearray(spec[1] << 20)
        block[::4096] = b"x" * len(block[::4096])    # touch every page
        return f"held {len(block) >> 20} MB"
    raise AssertionError(f"selftest: unknown spec {spec!r}")


def allowed(exc, spec):
    return isinstance(exc, ValueError)
