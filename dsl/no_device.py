"""A DSL kernel called on a machine without a GPU: bridge's NoDeviceError, told how to run it anyway.

bridge never imports dsl, so its "no usable CUDA device" cannot name `kernel.simulate(...)` or
`KB_SIMULATE=1`. Both kernel models' dispatcher misses (dsl/simt/kernel.py, dsl/tile/host.py: every
call form, `k(...)`, `k[grid, block](...)`, `k.launch`, reaches the device there first) pass the error
through `add_simulate_hint`, which extends the same exception object and re-raises it: its type is
unchanged, so `except bridge.NoDeviceError` still catches it; its message gains a `hint:` line whose
text is also its `hint` attribute. A machine that has a GPU (a bad device ordinal) gets no hint.
"""
from __future__ import annotations

from bridge import gpu_available
from bridge.errors import NoDeviceError


def simulate_hint(kernel: str, launch: str = "") -> str:
    """The text of the hint for the kernel named `kernel` (`launch`: extra keywords of its simulate)."""
    return (f"run it on the CPU simulator instead: {kernel}.simulate(...) with the same arguments{launch}, "
            f"or set KB_SIMULATE=1 in the environment to send every kernel call there (docs/configuration.md)")


def add_simulate_hint(exc: NoDeviceError, kernel: str, launch: str = "") -> NoDeviceError:
    """`exc` with the simulate hint in its message and `hint` attribute (once), when no GPU is usable."""
    if getattr(exc, "hint", None) or gpu_available():
        return exc
    exc.hint = simulate_hint(kernel, launch)                    # type: ignore[attr-defined]
    first = f"{exc.args[0]}\nhint: {exc.hint}" if exc.args else f"hint: {exc.hint}"   # type: ignore[attr-defined]
    exc.args = (first, *exc.args[1:])
    return exc
