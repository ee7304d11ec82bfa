"""Disk cache of compiled DSL kernels (and of tile.autotune's picks): one sealed file per entry.

Location: `$KB_CACHE_DIR`, else `$XDG_CACHE_HOME/kernelbridge/dsl`, else `~/.cache/kernelbridge/dsl`.
`KB_CACHE=0` disables it. The entries live in the cache's own folder `kb-cache-v3/` inside that
directory (dsl/cache_folder.py: layout, trust checks, sealing); nothing else there is read or deleted.
Writes are atomic (temporary file in the same folder + `os.replace`), so a reader sees a complete
entry or none. No pickle: an entry is text.

Trust and integrity: the contract in an entry is trusted by the launch validator, so every entry is
sealed with an HMAC-SHA256 keyed by the cache's own secret key, checked before anything in it is
parsed. A forged entry, one copied from another cache or renamed, one flipped bit anywhere, a
truncated file, a FIFO, device, link or directory in an entry's place, a body too deep or malformed
to parse — each is a miss (never an error, never a hang, never a different contract), and the
rebuild overwrites the entry. A cache folder that is not one kernelbridge made, or that others could
write to, is not used at all: a miss, with one warning per process (CacheTrustWarning).

`<key>.kernel` is `kbcache3 kernel <mac>\n` + META + `\n` + PTX, META being the JSON text of {format,
key, name, contract, metadata} on one line; `<key>.pick` holds a tile.autotune pick (JSON) the same way.

The key (see `cache_key`) covers everything the PTX depends on: the source text of the kernel and of
the Python functions it references (device functions), the values of referenced globals and closure
cells, the signature, the options, the arch, the DSL version (including a fingerprint of the dsl
package sources), the math rows registered at run time (dsl.vocab.register_math) and the llvmlite/LLVM
build. It is computed without importing llvmlite (its files' sizes and mtimes stand for the build), so
a cache hit in a fresh process stays within a few milliseconds.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import linecache
import json
import os
import types
from pathlib import Path
from typing import Any, Callable

from bridge import __version__ as DSL_VERSION   # the one version source (pyproject reads it too)
from bridge.settings import env_directory, env_switch
from dsl.cache_folder import (FOLDER, KEY_FILE, LAYOUT, MARKER, CacheRefusedError, Folder, atomic_write,
                              entry_name, is_writer_tmp, open_folder, read_regular, refusal, remove_stale,
                              split_entry_name, valid_key)

FORMAT = LAYOUT     # 3: sealed single-file entries in kb-cache-v3/ (earlier layouts are never read)
# Key text is hashed as UTF-8 keeping lone surrogates: a source path that is not UTF-8 (Python decodes
# it with surrogate escapes) must give a key, not a UnicodeEncodeError.
_UTF8, _KEEP = "utf-8", "surrogatepass"


class CacheEntry:
    """One cached compile. (A plain class: this module is on the cache-hit path, kept cheap to import.)"""
    __slots__ = ("ptx", "name", "contract_json", "metadata")

    def __init__(self, ptx: str, name: str, contract_json: str, metadata: dict) -> None:
        self.ptx, self.name, self.contract_json, self.metadata = ptx, name, contract_json, metadata

    def __repr__(self) -> str:
        return f"CacheEntry(name={self.name!r}, ptx=<{len(self.ptx)} chars>)"


def cache_enabled() -> bool:
    return env_switch("KB_CACHE", True)


def cache_dir() -> Path:
    explicit = env_directory("KB_CACHE_DIR")     # a path that exists and is no directory: ConfigurationError
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernelbridge" / "dsl"


# ---------------------------------------------------------------------------- key
@functools.lru_cache(maxsize=1)   # explicit cache: the toolchain does not change within a process
def toolchain_fingerprint() -> str:
    """DSL version + a fingerprint of the dsl sources + the llvmlite build, without importing
    llvmlite (its version module and its library file identify the build by size and mtime, as the
    dsl sources are): on a fresh process's cache hit the import alone cost about half a millisecond."""
    h = hashlib.sha256(f"dsl {DSL_VERSION}".encode())
    for rel, size, mtime in _llvmlite_stats() + sorted(_source_stats(os.path.dirname(__file__), "")):
        h.update(f"{rel}:{size}:{mtime}".encode(_UTF8, _KEEP))
    return h.hexdigest()


def _llvmlite_stats() -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of llvmlite's __init__.py, _version.py and binding/libllvmlite*, found
    through importlib's spec (no import); os.scandir, not pathlib's glob (which compiles a regex)."""
    import importlib.util
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.origin:
        return [("llvmlite missing", 0, 0)]
    root = os.path.dirname(spec.origin)
    picks = (("", lambda n: n in ("__init__.py", "_version.py")), ("binding/", lambda n: n.startswith("libllvmlite")))
    out = []
    for sub, wanted in picks:
        try:
            with os.scandir(os.path.join(root, sub)) as it:
                for e in it:
                    if wanted(e.name):
                        st = e.stat()
                        out.append((f"llvmlite/{sub}{e.name}", st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((f"llvmlite/{sub} unreadable", 0, 0))
    return sorted(out)


def _source_stats(path: str, rel: str) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every .py under `path` (os.scandir: cheap on the hit path)."""
    out = []
    with os.scandir(path) as it:
        for e in it:
            if e.is_dir() and e.name != "__pycache__":
                out += _source_stats(e.path, rel + e.name + "/")
            elif e.name.endswith(".py"):
                st = e.stat()
                out.append((rel + e.name, st.st_size, st.st_mtime_ns))
    return out


def _type_key(t: Any) -> str:
    """A stable text form of an IR type / options value (dataclass fields, not the pretty repr)."""
    if dataclasses.is_dataclass(t) and not isinstance(t, type):
        inner = ", ".join(f"{f.name}={_type_key(getattr(t, f.name))}" for f in dataclasses.fields(t))
        return f"{type(t).__name__}({inner})"
    if isinstance(t, (list, tuple)):
        return "(" + ", ".join(_type_key(x) for x in t) + ")"
    return repr(t)


def _unwrap(obj: Any) -> Callable | None:
    """The Python function behind a plain function or a DSL decorator object, if any."""
    if isinstance(obj, types.FunctionType):
        return obj
    for attr in ("pyfunc", "__wrapped__", "fn", "func"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, types.FunctionType):
            return inner
    return None


def _value_key(v: Any) -> str:
    if isinstance(v, types.ModuleType):
        return f"module {v.__name__}"
    if hasattr(v, "tobytes") and hasattr(v, "dtype") and hasattr(v, "shape"):   # NumPy arrays/scalars:
        digest = hashlib.sha256(v.tobytes()).hexdigest()                      # repr elides the middle
        return f"array {v.dtype} {tuple(v.shape)} {digest}"
    r = repr(v)
    if " at 0x" in r or "object at" in r:
        return f"object {type(v).__module__}.{type(v).__qualname__}"
    return r


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _code_lines(code: types.CodeType) -> int:
    """The last source line holding any of `code`'s instructions (nested functions included)."""
    last = max((line for _, _, line in code.co_lines() if line is not None), default=code.co_firstlineno)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            last = max(last, _code_lines(c))
    return last


def _source_text(code: types.CodeType) -> str | None:
    """The function's source lines, from its first line (decorators) to the last line with code, read
    through linecache: what inspect.getsource gives for a kernel, without tokenizing (whose first use
    compiles a large regex, ~2 ms of every fresh process's first launch). The constants go in too, so
    an edit that leaves no instruction on its line (a string's later lines) still changes the key.
    None when the file cannot be read."""
    linecache.checkcache(code.co_filename)         # as inspect does: an edited file is read again
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    text = "".join(lines[code.co_firstlineno - 1:_code_lines(code)])
    return text + "\0consts " + repr([c for c in code.co_consts if not isinstance(c, types.CodeType)])


def source_fingerprint(pyfunc: Callable) -> str:
    """Source text, file and first line of `pyfunc` and of every function it references (recursively),
    plus the repr of each referenced global / closure value."""
    h = hashlib.sha256()
    seen: set[int] = set()
    todo = [pyfunc]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        code = fn.__code__
        src = _source_text(code)
        if src is None:
            try:
                src = inspect.getsource(fn)
            except (OSError, TypeError):
                src = repr(code.co_code) + repr(code.co_consts)
        h.update(f"\0fn {fn.__module__}.{fn.__qualname__} {code.co_filename}:{code.co_firstlineno}\n"
                 .encode(_UTF8, _KEEP))
        h.update(src.encode(_UTF8, _KEEP))
        scope: dict[str, Any] = {}
        if fn.__closure__:
            for name, cell in zip(code.co_freevars, fn.__closure__):
                try:
                    scope[name] = cell.cell_contents
                except ValueError:        # empty cell
                    scope[name] = None
        g = fn.__globals__
        for name in sorted(_code_names(code)):
            if name in scope:
                val = scope[name]
            elif name in g:
                val = g[name]
            else:
                continue
            inner = _unwrap(val)
            if inner is not None:
                h.update(f"\0ref {name} -> fn\n".encode(_UTF8, _KEEP))
                todo.append(inner)
            else:
                h.update(f"\0ref {name} = {_value_key(val)}\n".encode(_UTF8, _KEEP))
    return h.hexdigest()


def cache_key(pyfunc: Callable, signature: Any, options: Any, arch: str) -> str:
    parts = [source_fingerprint(pyfunc), _type_key(list(signature)), _type_key(options), str(arch),
             toolchain_fingerprint()]
    from dsl.vocab.math import fingerprint as math_rows
    registered = math_rows()        # math rows added at run time ('' without any: keys unchanged)
    if registered:
        parts.append(registered)
    return hashlib.sha256("\n".join(parts).encode(_UTF8, _KEEP)).hexdigest()


# ---------------------------------------------------------------------------- store
class CacheTrustWarning(UserWarning):
    """The disk cache folder was refused (dsl/cache_folder.py): compiles run without the cache."""


_WARNED: set[str] = set()     # refusals already reported by this process (one warning each)


def _warn_refused(exc: CacheRefusedError) -> None:
    text = str(exc)
    if text not in _WARNED:
        _WARNED.add(text)
        import warnings
        warnings.warn(f"kernelbridge: the DSL disk cache is not used (every compile misses): {text}",
                      CacheTrustWarning, stacklevel=4)


def parse_json(raw: bytes) -> Any:
    """`raw` parsed as JSON, or None when it is not (malformed, not UTF-8, or nested too deep)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):      # JSONDecodeError, UnicodeDecodeError; deep nesting
        return None


def _kernel_entry(body: bytes, key: str) -> CacheEntry | None:
    meta_text, newline, ptx = body.partition(b"\n")
    meta = parse_json(meta_text)
    if not newline or not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key:
        return None
    try:
        return CacheEntry(ptx.decode("utf-8"), str(meta["name"]), str(meta["contract"]), dict(meta["metadata"]))
    except (KeyError, TypeError, ValueError):
        return None


def _pick_entry(body: bytes, key: str) -> dict | None:
    data = parse_json(body)
    return data if isinstance(data, dict) and data.get("key") == key else None


class DiskCache:
    """The cache under one directory (default: `cache_dir()`). `load`/`store` (and the tuning-pick
    pair) never raise for the compile: a refused folder is a miss with one CacheTrustWarning.
    `entries`/`clear`/`prune` raise CacheRefusedError instead, having changed nothing."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.dir = Path(directory) if directory is not None else cache_dir()

    @property
    def folder(self) -> Path:
        """The cache's own folder inside `dir`, where every entry is."""
        return self.dir / FOLDER

    def load(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None when absent, refused, not sealed by this cache, or damaged."""
        body = self._read(key, "kernel")
        return None if body is None else _kernel_entry(body, key)

    def store(self, key: str, entry: CacheEntry) -> None:
        """Write the entry atomically; a failure to write (refused or read-only folder, full disk) is
        not an error for the compile — the next compile simply misses again."""
        meta = json.dumps({"format": FORMAT, "key": key, "name": entry.name, "contract": entry.contract_json,
                           "metadata": entry.metadata}, sort_keys=True)     # ASCII, one line
        self._write(key, "kernel", meta.encode("ascii") + b"\n" + entry.ptx.encode("utf-8"))

    def load_pick(self, key: str) -> dict | None:
        """A tile.autotune pick stored under `key` (dsl/tile/autotune.py), as `load` reads entries."""
        body = self._read(key, "pick")
        return None if body is None else _pick_entry(body, key)

    def store_pick(self, key: str, data: dict) -> None:
        """Store a pick (a JSON object; its "key" is set to `key`) as `store` stores entries."""
        self._write(key, "pick", json.dumps({**data, "key": key}, sort_keys=True).encode("ascii"))

    def _open(self, create: bool) -> Folder | None:
        try:
            return open_folder(self.dir, create)
        except CacheRefusedError as exc:
            _warn_refused(exc)
        except OSError:
            pass
        return None

    def _read(self, key: str, kind: str) -> bytes | None:
        folder = self._open(create=False) if valid_key(key) else None
        if folder is None:
            return None
        name = entry_name(key, kind)
        return folder.unseal(kind, name, read_regular(folder.path / name))

    def _write(self, key: str, kind: str, body: bytes) -> None:
        if not valid_key(key):
            raise ValueError(f"DiskCache: key must be 1 to 128 ASCII letters, digits, '-' or '_', got {key!r}")
        folder = self._open(create=True)
        if folder is None:
            return
        name = entry_name(key, kind)
        try:
            atomic_write(folder.path / name, folder.seal(kind, name, body))
        except OSError:
            pass

    # -- inspection and pruning (`python -m dsl cache list|clear|prune`) -------------------------
    def scan(self) -> tuple[list[dict], int] | None:
        """(the entries this cache wrote, newest first; how many other files its folder holds), or
        None when there is no cache folder. Each entry: key, kind ("kernel", or "tuning pick"), kernel
        name, arch, bytes, mtime (seconds), file. Raises CacheRefusedError for a refused folder."""
        folder = open_folder(self.dir)
        if folder is None:
            return None
        with os.scandir(folder.path) as it:
            names = [e.name for e in it if e.name not in (MARKER, KEY_FILE) and not is_writer_tmp(e.name)]
        entries = [e for e in (_verified(folder, n) for n in names) if e is not None]
        return sorted(entries, key=lambda e: -e["mtime"]), len(names) - len(entries)

    def entries(self) -> list[dict]:
        """The entries this cache wrote, newest first (see `scan`); [] when there is no cache yet."""
        found = self.scan()
        return found[0] if found is not None else []

    def clear(self) -> int:
        """Remove every entry this cache wrote (and what killed writers left); returns how many
        entries. Files that do not verify as its entries stay. A directory that holds no cache folder
        of ours, or one that may not be trusted, is refused (CacheRefusedError) and nothing is deleted."""
        if not os.path.lexists(self.dir):
            return 0
        return self._remove(self._owned_entries())

    def prune(self, max_bytes: int | None = None, max_age_s: float | None = None) -> int:
        """Remove entries older than `max_age_s`, then the oldest until the rest fit in `max_bytes`,
        and writers' temporary files older than STALE_TMP_SECONDS. Returns the number of entries
        removed. Refuses what `clear` refuses."""
        if not os.path.lexists(self.dir):
            return 0
        import time
        now, kept, doomed = time.time(), 0, []
        for e in self._owned_entries():                 # newest first
            old = max_age_s is not None and now - e["mtime"] > max_age_s
            big = max_bytes is not None and kept + e["bytes"] > max_bytes
            if old or big:
                doomed.append(e)
            else:
                kept += e["bytes"]
        return self._remove(doomed)

    def _owned_entries(self) -> list[dict]:
        found = self.scan()
        if found is None:
            raise refusal(self.dir)
        return found[0]

    def _remove(self, entries: list[dict]) -> int:
        removed = 0
        for e in entries:
            try:
                (self.folder / e["file"]).unlink()
                removed += 1
            except OSError:
                pass
        remove_stale(self.folder)
        remove_stale(self.dir)          # a cache folder whose publishing was killed
        return removed


def _verified(folder: Folder, name: str) -> dict | None:
    """The listing of entry file `name` when it was sealed by this cache and parses as an entry of
    its kind for its key, else None (such a file is not one of the cache's entries: never deleted)."""
    parts = split_entry_name(name)
    if parts is None:
        return None
    key, kind = parts
    path = folder.path / name
    try:
        st = os.lstat(path)
    except OSError:
        return None
    body = folder.unseal(kind, name, read_regular(path))
    if body is None:
        return None
    if kind == "kernel":
        entry = _kernel_entry(body, key)
        if entry is None:
            return None
        what, arch, kname = "kernel", entry.metadata.get("arch"), entry.name
    else:
        data = _pick_entry(body, key)
        if data is None:
            return None
        what, arch, kname = "tuning pick", None, data.get("kernel")
    return {"key": key, "kind": what, "name": kname if isinstance(kname, str) else None,
            "arch": arch if isinstance(arch, str) else None, "bytes": st.st_size, "mtime": st.st_mtime,
            "file": name}
