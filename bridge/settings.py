"""The one reader of kernelbridge's `KB_*` environment settings (docs/configuration.md lists them all).

Why one reader: read in many places with as many spellings, a bad value surfaced as a ValueError,
FileExistsError or RuntimeError from deep inside a compile, or silently meant "default" in one place
and "on" in another. Each reader here validates the value where it is read and raises
`ConfigurationError` naming the variable, the value given and the values accepted. Values are read on
every call, never cached, so a test may set a variable for one block.

One spelling for every on/off switch: `1`/`true`/`yes`/`on` and `0`/`false`/`no`/`off` (any case,
blanks ignored); unset or empty gives the switch's default. The CUDA toolkit overrides (`KB_CUDA_HOME`,
`KB_NVCC`, ..., `KB_LIBDEVICE`) are read and checked by the toolkit locator (bridge/toolkit.py, which
CMake runs as a plain script before the package exists); the DSL turns a bad one into this error.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from bridge.errors import ConfigurationError

__all__ = ["ConfigurationError", "ON", "OFF", "env_switch", "env_choice", "env_count", "env_list",
           "env_directory"]

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")
_MAX_COUNT_DIGITS = 18       # a count beyond 10**18 is a typo, not a setting (and int() stays cheap)


def refused(name: str, raw: str, accepted: str) -> ConfigurationError:
    """The error for `name`=`raw`: what was given and what the variable accepts."""
    return ConfigurationError(f"{name}={raw!r}: expected {accepted} (or leave {name} unset for the default)",
                              variable=name, value=raw)


def env_switch(name: str, default: bool) -> bool:
    """An on/off switch: 1/true/yes/on or 0/false/no/off (any case); unset or empty: `default`."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise refused(name, raw, f"one of {', '.join(ON)} (on) or {', '.join(OFF)} (off), any case")


def env_choice(name: str, choices: Iterable[str], default: str) -> str:
    """One of `choices` (any case, blanks ignored); unset or empty: `default`."""
    options = tuple(choices)
    raw = os.environ.get(name)
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value not in options:
        raise refused(name, raw or "", f"one of {', '.join(options)}")
    return value


def env_count(name: str, default: int) -> int:
    """A non-negative decimal integer; unset or empty: `default`."""
    raw = os.environ.get(name)
    value = (raw or "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit() and len(value) <= _MAX_COUNT_DIGITS):
        raise refused(name, raw or "", "a non-negative integer such as 0 or 32")
    return int(value)


def env_list(name: str, choices: Iterable[str]) -> tuple[str, ...]:
    """A comma-separated list whose items are each one of `choices` (blanks around items ignored);
    unset or empty: ()."""
    options = tuple(choices)
    raw = os.environ.get(name, "")
    items = tuple(s.strip() for s in raw.split(",") if s.strip())
    unknown = [s for s in items if s not in options]
    if unknown:
        raise refused(name, raw, f"a comma-separated list of {', '.join(options)} (unknown: "
                                 f"{', '.join(repr(s) for s in unknown[:4])})")
    return items


def env_directory(name: str, *, create: bool = False) -> Path | None:
    """A directory path; None when unset or empty. A path that exists must be a directory; with
    `create`, a missing one is created (with its parents) and one that cannot be is refused here."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return None
    path = Path(raw)
    try:
        if path.exists() and not path.is_dir():
            raise refused(name, raw, "a directory (this path exists and is not one)")
        if create:
            path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:      # a name too long, a parent that is a file, no permission, ...
        raise refused(name, raw, f"a usable directory ({exc.strerror or exc})") from None
    return path
