"""`python -m dsl cache info|list|clear|prune`: look at and trim the DSL's disk cache (dsl/cache.py).

`info` also feeds the doctor: where the cache is, how big, whether it sits on a network file system
(NFS and friends make every cache hit a network round trip, and their locking is weak), and whether it
was refused (dsl/cache_folder.py: a folder that is not ours, or that others could write to).
`list`, `clear` and `prune` see only the entries this cache wrote (in its `kb-cache-v3/` folder); on a
refused folder, or a directory holding no cache folder, they change nothing and exit with status 1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from dsl.cache import CacheRefusedError, DiskCache, cache_dir, cache_enabled
from dsl.errors import DslToolError

NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "afs")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class CacheCliError(DslToolError, ValueError):
    """A bad `python -m dsl cache` argument; printed as `error: ...` with exit status 2."""


def filesystem_of(path: Path, mounts: str = "/proc/mounts") -> str | None:
    """File system type of the mount holding `path` (its nearest existing ancestor), from /proc/mounts;
    None where that file does not exist (not Linux)."""
    p = path.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        table = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    for line in table:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = str(p) == point or str(p).startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype


def cache_info(directory: Path | None = None) -> dict[str, Any]:
    """Location, state, size and file system of the cache. `exists`: the cache folder is there;
    `refused`: why it is not used (None when it is); `other_files`: files in the folder that are not
    entries this cache wrote (left alone)."""
    cache = DiskCache(Path(directory) if directory is not None else cache_dir())
    refused, found = None, None
    try:
        found = cache.scan()
    except CacheRefusedError as exc:
        refused = str(exc)
    entries, others = found if found is not None else ([], 0)
    fstype = filesystem_of(cache.dir)
    return {"dir": str(cache.dir), "folder": str(cache.folder), "enabled": cache_enabled(),
            "exists": found is not None, "refused": refused,
            "from": "KB_CACHE_DIR" if os.environ.get("KB_CACHE_DIR", "").strip() else "default",
            "entries": len(entries), "bytes": sum(e["bytes"] for e in entries), "other_files": others,
            "filesystem": fstype, "network_fs": bool(fstype) and fstype.lower() in NETWORK_FS}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def parse_size(text: str) -> int:
    """'500M', '2G', '100k', '4096' -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise CacheCliError(f"--max-size: expected a size such as 500M or 2G, got {text!r}")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '2w' -> seconds."""
    m = _AGE.match(text)
    if not m:
        raise CacheCliError(f"--older-than: expected an age such as 30d, 12h or 90m, got {text!r}")
    return float(m.group(1)) * _AGE_UNITS[m.group(2).lower()]


def describe(info: dict[str, Any]) -> list[str]:
    state = "" if info["enabled"] else ", disabled by KB_CACHE"
    where = f"{info['dir']} (from {info['from']}{state})"
    if info["refused"]:
        return [f"DSL cache: {where}: NOT USED: {info['refused']}"]
    if not info["exists"]:
        return [f"DSL cache: {where}: empty (not created yet)"]
    fs = f", {info['filesystem']}" if info["filesystem"] else ""
    lines = [f"DSL cache: {where}: {info['entries']} entries, {human_bytes(info['bytes'])}{fs}"]
    if info["other_files"]:
        lines.append(f"  {info['other_files']} other file(s) in {info['folder']} are not entries this cache "
                     "wrote: never read or deleted")
    return lines


def trust_warning(info: dict[str, Any]) -> str | None:
    if not info["refused"]:
        return None
    return f"the DSL cache is not used, so every compile misses: {info['refused']}"


def network_warning(info: dict[str, Any]) -> str | None:
    if not info["network_fs"]:
        return None
    return (f"the DSL cache {info['dir']} is on {info['filesystem']} (a network file system): cache hits "
            "pay a network round trip; set KB_CACHE_DIR to a local disk")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    sub = ap.add_subparsers(dest="cache_command", required=True)
    for name, text in (("info", "where the cache is, its size and file system"),
                       ("list", "one line per cached kernel, newest first")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("clear", help="remove every entry the cache wrote (nothing else)")
    p = sub.add_parser("prune", help="remove old entries, or the oldest until the cache fits a size "
                                     "(default: --older-than 30d)")
    p.add_argument("--max-size", help="keep the newest entries that fit, e.g. 500M, 2G")
    p.add_argument("--older-than", help="remove entries not written for this long, e.g. 30d, 12h")


def run(args: argparse.Namespace, out: Callable[[str], None] = print,
        err: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> int:
    """Execute a parsed `cache` command; returns the exit status (1: the folder was refused)."""
    try:
        return _run(args, out)
    except CacheRefusedError as exc:
        err(f"error: python -m dsl cache {args.cache_command}: {exc}")
        return 1


def _run(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    info = cache_info()
    cache = DiskCache(Path(info["dir"]))
    cmd = args.cache_command
    if info["refused"] and cmd != "info":
        raise CacheRefusedError(info["refused"] + ("; nothing was deleted" if cmd != "list" else ""))
    if cmd == "info":
        if args.json:
            out(json.dumps(info, indent=2))
            return 0
        for line in describe(info):
            out(line)
        warning = network_warning(info)
        if warning:
            out(f"warning: {warning}")
    elif cmd == "list":
        entries = cache.entries()
        if args.json:
            out(json.dumps(entries, indent=2))
            return 0
        for e in entries:
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["mtime"]))
            what = e["name"] or "(unreadable entry)"
            if e["kind"] == "tuning pick":
                what += " (tuning pick)"
            out(f"{e['key'][:16]}  {stamp}  {human_bytes(e['bytes']):>9}  {e['arch'] or '?':<7} {what}")
        out(f"{len(entries)} entries in {info['dir']}")
    elif cmd == "clear":
        n = cache.clear()
        out(f"removed {n} entries from {info['dir']}")
    else:
        max_bytes = parse_size(args.max_size) if args.max_size else None
        max_age = parse_age(args.older_than) if args.older_than else None
        if max_bytes is None and max_age is None:
            max_age = parse_age("30d")
        n = cache.prune(max_bytes=max_bytes, max_age_s=max_age)
        after = cache_info(Path(info["dir"]))
        out(f"removed {n} entries from {info['dir']}; {after['entries']} entries, "
            f"{human_bytes(after['bytes'])} left")
    return 0
