"""Disk cache of compiled DSL kernels: `<key>.ptx` (PTX text) + `<key>.json` (name, contract, metadata).

Location: `$KB_CACHE_DIR`, else `$XDG_CACHE_HOME/kernelbridge/dsl`, else `~/.cache/kernelbridge/dsl`.
`KB_CACHE=0` disables it. Writes are atomic (temp file in the same directory + `os.replace`; the PTX is
written before the JSON), so a reader sees a complete entry or none. No pickle: both files are text.

Integrity: the contract in an entry is trusted by the launch validator, so the whole entry is hashed.
`<key>.json` is exactly `{"entry_sha256": "<sha256 of BODY>", "entry": BODY}`, where BODY is the JSON
text of {format, key, name, contract, metadata, ptx_sha256}; the reader hashes BODY's bytes as stored
(not a re-serialisation) and the PTX's bytes against ptx_sha256. Any damage — one flipped bit anywhere
in either file, truncation, a FIFO, device or directory in an entry's place — is a miss (never an
error, never a hang, never a different contract), and the rebuild overwrites the entry.

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
import stat
import types
from pathlib import Path
from typing import Any, Callable

from bridge import __version__ as DSL_VERSION   # the one version source (pyproject reads it too)
from dsl.options import env_switch

FORMAT = 2          # 2: whole-entry sha256 (format 1 entries are misses)
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
    explicit = os.environ.get("KB_CACHE_DIR")
    if explicit:
        return Path(explicit)
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
class DiskCache:
    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.dir = Path(directory) if directory is not None else cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.dir / f"{key}.ptx", self.dir / f"{key}.json"

    def load(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None when absent, unreadable, damaged or not a regular file."""
        ptx_path, json_path = self._paths(key)
        meta = _verified_body(read_regular(json_path))
        if meta is None or meta.get("format") != FORMAT or meta.get("key") != key:
            return None
        ptx = read_regular(ptx_path)
        if ptx is None or meta.get("ptx_sha256") != hashlib.sha256(ptx).hexdigest():
            return None
        try:
            return CacheEntry(ptx.decode("utf-8"), str(meta["name"]), str(meta["contract"]),
                              dict(meta["metadata"]))
        except (KeyError, TypeError, ValueError):
            return None

    def store(self, key: str, entry: CacheEntry) -> None:
        """Write the entry atomically; a failure to write (read-only dir, full disk) is not an error
        for the compile — the next compile simply misses again."""
        ptx_path, json_path = self._paths(key)
        ptx = entry.ptx.encode("utf-8")
        body = json.dumps({"format": FORMAT, "key": key, "name": entry.name, "contract": entry.contract_json,
                           "metadata": entry.metadata, "ptx_sha256": hashlib.sha256(ptx).hexdigest()},
                          sort_keys=True).encode("utf-8")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(ptx_path, ptx)
            atomic_write(json_path, _ENTRY_HEAD + hashlib.sha256(body).hexdigest().encode() + _ENTRY_MID
                          + body + _ENTRY_TAIL)
        except OSError:
            pass

    def clear(self) -> int:
        n = 0
        for p in list(self.dir.glob("*.ptx")) + list(self.dir.glob("*.json")):
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
        return n

    # -- inspection and pruning (`python -m dsl cache list|prune`) -------------------------------
    def entries(self) -> list[dict]:
        """Every entry on disk, newest first: key, kind ("kernel", or "tuning pick" for tile.autotune's
        tune-<key>.json), kernel name, arch, bytes, mtime (seconds). An entry whose JSON is missing or
        unreadable is listed with name None."""
        by_key: dict[str, list[Path]] = {}
        for p in list(self.dir.glob("*.ptx")) + list(self.dir.glob("*.json")):
            by_key.setdefault(p.stem, []).append(p)
        out = []
        for key, files in by_key.items():
            try:
                stats = [f.stat() for f in files]
            except OSError:
                continue
            if not stats:
                continue
            if key.startswith(TUNE_PREFIX):          # a tile.autotune pick (dsl/tile/autotune.py)
                name, arch, kind = _tuned_kernel(self.dir / f"{key}.json"), None, "tuning pick"
            else:
                meta = _verified_body(read_regular(self.dir / f"{key}.json")) or {}
                md = meta.get("metadata")
                name, arch, kind = meta.get("name"), md.get("arch") if isinstance(md, dict) else None, "kernel"
            out.append({"key": key, "kind": kind, "name": name, "arch": arch,
                        "bytes": sum(st.st_size for st in stats), "mtime": max(st.st_mtime for st in stats)})
        return sorted(out, key=lambda e: -e["mtime"])

    def prune(self, max_bytes: int | None = None, max_age_s: float | None = None) -> int:
        """Remove entries older than `max_age_s`, then the oldest until the rest fit in `max_bytes`.
        Returns the number of entries removed."""
        import time
        now, kept, removed = time.time(), 0, 0
        for e in self.entries():                      # newest first
            old = max_age_s is not None and now - e["mtime"] > max_age_s
            big = max_bytes is not None and kept + e["bytes"] > max_bytes
            if not (old or big):
                kept += e["bytes"]
                continue
            for suffix in (".json", ".ptx"):          # JSON first: a reader then sees a miss, not half
                try:
                    (self.dir / f"{e['key']}{suffix}").unlink()
                except OSError:
                    pass
            removed += 1
        return removed


TUNE_PREFIX = "tune-"     # tile.autotune's picks share the directory: tune-<key>.json


def _tuned_kernel(path: Path) -> str | None:
    """The kernel a tuning pick is for, or None when the file is not a readable pick."""
    raw = read_regular(path)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    name = data.get("kernel") if isinstance(data, dict) else None
    return name if isinstance(name, str) else None


_ENTRY_HEAD, _ENTRY_MID, _ENTRY_TAIL = b'{"entry_sha256": "', b'", "entry": ', b"}"


def _verified_body(raw: bytes | None) -> dict | None:
    """The entry's BODY as a dict when its sha256 matches the bytes stored, else None."""
    if raw is None or not raw.startswith(_ENTRY_HEAD) or not raw.endswith(_ENTRY_TAIL):
        return None
    digest = raw[len(_ENTRY_HEAD): len(_ENTRY_HEAD) + 64]
    rest = raw[len(_ENTRY_HEAD) + 64:]
    if not rest.startswith(_ENTRY_MID):
        return None
    body = rest[len(_ENTRY_MID): -len(_ENTRY_TAIL)]
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    try:
        meta = json.loads(body)
    except ValueError:            # JSONDecodeError, UnicodeDecodeError
        return None
    return meta if isinstance(meta, dict) else None


def read_regular(path: Path) -> bytes | None:
    """The bytes of `path` when it is a regular file, else None — without blocking: a FIFO is opened
    non-blocking and refused by fstat before any read, a device or directory likewise. Every file of
    the cache directory is read this way (a planted FIFO is a miss, never a hang)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never half (a temporary in
    the same directory, then os.replace). Every file of the cache directory is written this way."""
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
