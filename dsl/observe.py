"""What the DSL tells `logging`: compiles, disk-cache lookups and specialisations (docs/configuration.md).

Loggers (children of `kernelbridge`):
- `kernelbridge.compile`  DEBUG: a kernel compiled (model, kernel, arch, seconds, cache state);
- `kernelbridge.cache`    DEBUG: a disk-cache hit or miss (kernel, arch, key, seconds);
- `kernelbridge.specialise` DEBUG: a launch specialised a kernel for a new argument signature;
  WARNING: one kernel object has specialised more than `KB_MAX_SPECIALISATIONS` times (default 32),
  naming the kernel and its last signatures: each new signature compiles (or reads the disk cache)
  and loads a module, so a recompile storm shows here before it shows in a profile.

Every record carries its facts as attributes too (`kb_kernel`, `kb_arch`, `kb_seconds`, `kb_cache`,
`kb_key`, `kb_signature`, `kb_count`), for handlers that want data rather than text.

Why this is cheap: nothing here runs on a launch that hits (those never leave C++), and the debug
records are skipped without importing `logging` when no one has imported it: then no handler or
level can have been configured, so a DEBUG record would be dropped anyway (the cache-hit path of a
fresh process stays within its few milliseconds).
"""
from __future__ import annotations

import sys
import threading
import weakref
from collections import deque
from typing import Any

from bridge.settings import env_count

DEFAULT_MAX_SPECIALISATIONS = 32
_LAST = 8   # signatures the warning names


class _History:
    """Specialisations of one kernel object: how many, and the last few signatures."""
    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last: deque[str] = deque(maxlen=_LAST)


# Documented state: the specialisation history of each live kernel object (weak keys: a kernel that is
# garbage-collected drops its history), guarded by a lock because launches may come from any thread.
_HISTORY: weakref.WeakKeyDictionary[Any, _History] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _logger(child: str) -> Any:
    import logging
    return logging.getLogger(f"kernelbridge.{child}")


def _debug_on(child: str) -> bool:
    """Whether a DEBUG record of `kernelbridge.<child>` would be handled (False when logging was never
    imported: nothing can have enabled DEBUG then)."""
    logging = sys.modules.get("logging")
    return logging is not None and _logger(child).isEnabledFor(logging.DEBUG)


def compiled(model: str, kernel: str, arch: str, cache: str, seconds: float, key: str | None = None) -> None:
    """Report one compile request that reached the compiler: `cache` is "disk" (served by the disk
    cache), "miss" (not in the cache: compiled and stored) or "off" (KB_CACHE=0: compiled)."""
    if cache in ("disk", "miss") and _debug_on("cache"):
        facts = {"kb_kernel": kernel, "kb_arch": arch, "kb_cache": cache, "kb_key": key, "kb_seconds": seconds}
        if cache == "disk":
            _logger("cache").debug("disk cache hit: %s kernel %s for %s (key %s, %.2f ms)", model, kernel,
                                   arch, (key or "?")[:16], seconds * 1e3, extra=facts)
        else:
            _logger("cache").debug("disk cache miss: %s kernel %s for %s (key %s): compiled, entry written",
                                   model, kernel, arch, (key or "?")[:16], extra=facts)
    if cache != "disk" and _debug_on("compile"):
        facts = {"kb_kernel": kernel, "kb_arch": arch, "kb_cache": cache, "kb_key": key, "kb_seconds": seconds}
        _logger("compile").debug("compiled %s kernel %s for %s in %.3f s (disk cache %s)", model, kernel,
                                 arch, seconds, "off" if cache == "off" else "miss", extra=facts)


def max_specialisations() -> int:
    """`KB_MAX_SPECIALISATIONS`: specialisations of one kernel object before the warning (0: never warn).
    A value that is not a non-negative integer is a ConfigurationError (bridge/settings.py)."""
    return env_count("KB_MAX_SPECIALISATIONS", DEFAULT_MAX_SPECIALISATIONS)


def _describe(signature: Any) -> str:
    if isinstance(signature, (list, tuple)):
        return "(" + ", ".join(str(s) for s in signature) + ")"
    return str(signature)


def specialised(kernel_obj: Any, kernel: str, signature: Any, arch: str | None) -> int:
    """Count one specialisation of `kernel_obj` (a Dispatcher miss that produced a launcher), log it,
    and warn each time the count passes another multiple of KB_MAX_SPECIALISATIONS (N+1, 2N+1, ...).
    Returns the kernel object's specialisation count."""
    limit = max_specialisations()    # a bad setting is refused before anything is counted
    text = _describe(signature)
    with _LOCK:
        try:
            hist = _HISTORY.get(kernel_obj)
            if hist is None:
                hist = _HISTORY[kernel_obj] = _History()
        except TypeError:         # not weakly referenceable (both kernel classes are): log, never count
            hist = _History()
        hist.count += 1
        hist.last.append(text)
        count, last = hist.count, list(hist.last)
    facts = {"kb_kernel": kernel, "kb_arch": arch, "kb_signature": text, "kb_count": count}
    if _debug_on("specialise"):
        _logger("specialise").debug("kernel %s: specialisation #%d for %s: %s", kernel, count, arch, text,
                                    extra=facts)
    if limit and count > limit and (count - 1) % limit == 0:
        _logger("specialise").warning(
            "kernel %s has specialised %d times (more than KB_MAX_SPECIALISATIONS=%d): every new argument "
            "signature (dtype, ndim, layout, alignment, tile shape, constant) compiles and loads another "
            "kernel. Keep the signatures of its calls stable, or raise KB_MAX_SPECIALISATIONS (0: no "
            "warning). Last %d signatures:\n  %s", kernel, count, limit, len(last), "\n  ".join(last),
            extra=facts)
    return count


def specialisations(kernel_obj: Any) -> int:
    """How many times `kernel_obj` has specialised in this process (0 when never)."""
    with _LOCK:
        try:
            hist = _HISTORY.get(kernel_obj)
        except TypeError:
            return 0
        return hist.count if hist is not None else 0
