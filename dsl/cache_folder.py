"""The disk cache's own folder: its layout, whether it may be trusted, and how its files are sealed.

Layout 3: the cache directory (`KB_CACHE_DIR`, or the default) holds one folder of ours, `kb-cache-v3/`,
published complete (made under a temporary name with its marker and key, then renamed), so a folder by
that name either holds both or is not ours. In it: `KERNELBRIDGE-CACHE` (the marker: fixed text),
`key` (32 random bytes, 0600), entries `<key>.kernel` and tuning picks `<key>.pick`, and while a writer
is at work its temporary `.<entry file>.XXXXXXXX.tmp`. Nothing else of the cache directory is ours:
`clear`/`prune` look only inside this folder, and there only at files that verify as entries.

Trust (as ssh treats its key files): directories are made 0700 and files 0600 whatever the umask; the
cache directory must belong to this user (or root) and the folder and key to this user, and none of
them may be writable by group or others (the key not even readable). A folder that fails is refused:
`CacheRefusedError`, which the compile path turns into a miss with one warning, and `python -m dsl
cache` into an error that changes nothing. (POSIX only: where there is no os.geteuid, no owner or
mode check is made.)

Sealing: every entry file is `kbcache3 <kind> <hex HMAC-SHA256>\n` + BODY, the MAC keyed with the
folder's key over the kind, the file name and BODY. The MAC is checked before BODY is parsed, so
anything not written with this cache's key (a forged entry, an entry copied from another cache or
renamed, one flipped bit) is a miss, and parsing only ever sees bytes this cache wrote.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
import time
from pathlib import Path

from dsl.errors import DslCacheError

LAYOUT = 3
FOLDER = f"kb-cache-v{LAYOUT}"
MARKER = "KERNELBRIDGE-CACHE"
MARKER_TEXT = (b"kernelbridge DSL disk cache, layout 3.\n"
               b"Every file in this folder was written by kernelbridge (dsl/cache.py);\n"
               b"`python -m dsl cache clear` removes its entries.\n")
KEY_FILE = "key"
KEY_BYTES = 32
KINDS = ("kernel", "pick")              # entry file suffixes: compiled kernels, tile.autotune picks
MAX_FILE_BYTES = 256 * 2**20            # larger files are not read (no entry comes near)
STALE_TMP_SECONDS = 3600.0              # a writer's temporary file older than this has no live writer
_SEAL = b"kbcache3"
_TMP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")    # tempfile's random names


class CacheRefusedError(DslCacheError, PermissionError):
    """kernelbridge will neither read nor change this cache folder (not one it made, or one that others
    could have written to); the message names the folder and says why."""


def valid_key(key: object) -> bool:
    """Entry keys are 1..128 ASCII letters, digits, '-' or '_' (cache keys are SHA-256 hex)."""
    if not isinstance(key, str) or not 0 < len(key) <= 128 or not key.isascii():
        return False
    rest = key.replace("-", "").replace("_", "")
    return rest == "" or rest.isalnum()


def entry_name(key: str, kind: str) -> str:
    return f"{key}.{kind}"


def split_entry_name(name: str) -> tuple[str, str] | None:
    """(key, kind) when `name` is an entry file name, else None."""
    key, _, kind = name.rpartition(".")
    return (key, kind) if kind in KINDS and valid_key(key) else None


def is_writer_tmp(name: str) -> bool:
    """Whether `name` is atomic_write's temporary for an entry (`.<entry file>.XXXXXXXX.tmp`)."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    base, _, rand = name[1:-4].rpartition(".")
    return len(rand) == 8 and set(rand) <= _TMP_CHARS and split_entry_name(base) is not None


# ---------------------------------------------------------------------------- the folder
class Folder:
    """A cache folder that passed the trust checks, with its key: seals and unseals entry files."""
    __slots__ = ("path", "_key")

    def __init__(self, path: Path, key: bytes) -> None:
        self.path, self._key = path, key

    def _mac(self, kind: str, name: str, body: bytes) -> bytes:
        head = b"\0".join((_SEAL, kind.encode(), name.encode()))
        return hmac.new(self._key, head + b"\0" + body, hashlib.sha256).hexdigest().encode()

    def seal(self, kind: str, name: str, body: bytes) -> bytes:
        return b"%s %s %s\n" % (_SEAL, kind.encode(), self._mac(kind, name, body)) + body

    def unseal(self, kind: str, name: str, raw: bytes | None) -> bytes | None:
        """BODY of the file `name` when it was sealed with this folder's key as `kind`, else None."""
        head = b"%s %s " % (_SEAL, kind.encode())
        if raw is None or not raw.startswith(head) or raw[len(head) + 64:len(head) + 65] != b"\n":
            return None
        body = raw[len(head) + 65:]
        return body if hmac.compare_digest(raw[len(head):len(head) + 64], self._mac(kind, name, body)) else None


def open_folder(root: Path, create: bool = False) -> Folder | None:
    """The trusted cache folder under `root`; None when there is none (and `create` is False).
    Raises CacheRefusedError when what is there may not be trusted, OSError when it cannot be made."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        if not create:
            return None
        _make_dirs(root)
        st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise CacheRefusedError(f"the cache directory {root} is not a directory")
    _check_dir(root, st, "the cache directory", allow_root_owner=True)
    path = root / FOLDER
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        _publish(root, path)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise CacheRefusedError(f"{path} is not a kernelbridge cache: it is not a folder")
    _check_dir(path, st, "the cache folder")
    if read_regular(path / MARKER, len(MARKER_TEXT)) != MARKER_TEXT:
        raise CacheRefusedError(f"{path} is not a kernelbridge cache: its marker file {MARKER} is missing or "
                                "differs")
    return Folder(path, _read_key(path / KEY_FILE))


def refusal(root: Path) -> CacheRefusedError:
    """The refusal for changing `root` when it holds no cache folder of ours."""
    return CacheRefusedError(f"{root} is not a kernelbridge cache (there is no {FOLDER}/ folder with its "
                             f"marker file in it); nothing was deleted")


def _owner_checks() -> bool:
    return hasattr(os, "geteuid")


def _check_dir(path: Path, st: os.stat_result, what: str, allow_root_owner: bool = False) -> None:
    """Refuse a directory that another user owns or that group/others may write (ssh's rule)."""
    if not _owner_checks():
        return
    me = os.geteuid()
    if st.st_uid != me and not (allow_root_owner and st.st_uid == 0):
        raise CacheRefusedError(f"{what} {path} belongs to another user (uid {st.st_uid}, not {me}); "
                                "point KB_CACHE_DIR at a folder of your own")
    if st.st_mode & 0o022:
        raise CacheRefusedError(f"{what} {path} is writable by group or others (mode "
                                f"{stat.S_IMODE(st.st_mode):04o}): others could plant entries; "
                                f"run `chmod go-w {path}` or point KB_CACHE_DIR elsewhere")


def _read_key(path: Path) -> bytes:
    fd = _open_nonblocking(path)
    if fd is None:
        raise CacheRefusedError(f"the cache key {path} is missing; remove the folder {path.parent} to start "
                                "a new cache")
    try:
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode) or st.st_size != KEY_BYTES:
            problem = f"is not a {KEY_BYTES}-byte file"
        elif _owner_checks() and st.st_uid != os.geteuid():
            problem = f"belongs to another user (uid {st.st_uid})"
        elif _owner_checks() and st.st_mode & 0o077:
            problem = f"is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
        if problem:
            raise CacheRefusedError(f"the cache key {path} {problem}; remove the folder {path.parent} to "
                                    "start a new cache")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise CacheRefusedError(f"the cache key {path} is not a {KEY_BYTES}-byte file")
    return key


def _make_dirs(root: Path) -> None:
    """Create `root` and its missing parents 0700 (chmod after mkdir: the umask may have taken bits)."""
    missing = []
    p = root
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


def _publish(root: Path, path: Path) -> None:
    """Make the cache folder under a temporary name with its key (O_EXCL) and marker, then rename it
    into place: other processes see no folder or a complete one. Losing the race to another process
    is fine (its folder stays, ours goes)."""
    import tempfile
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{FOLDER}.", suffix=".tmp"))
    try:
        os.chmod(tmp, 0o700)
        _create_file(tmp / KEY_FILE, os.urandom(KEY_BYTES))
        _create_file(tmp / MARKER, MARKER_TEXT)
        try:
            os.rename(tmp, path)
            return
        except OSError:
            if not os.path.lexists(path):
                raise
        _remove_setup_dir(tmp)
    except BaseException:
        _remove_setup_dir(tmp)
        raise


def _create_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_BINARY", 0), 0o600)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _remove_setup_dir(tmp: Path) -> bool:
    """Remove a folder `_publish` made (only our two files in it); False when it holds anything else."""
    try:
        names = os.listdir(tmp)
        if not set(names) <= {KEY_FILE, MARKER}:
            return False
        for n in names:
            os.unlink(tmp / n)
        os.rmdir(tmp)
        return True
    except OSError:
        return False


def is_setup_dir(name: str) -> bool:
    """Whether `name` is `_publish`'s temporary folder name (`.kb-cache-v3.XXXXXXXX.tmp`)."""
    prefix = f".{FOLDER}."
    rand = name[len(prefix):-4]
    return name.startswith(prefix) and name.endswith(".tmp") and len(rand) == 8 and set(rand) <= _TMP_CHARS


def remove_stale(directory: Path, now: float | None = None) -> int:
    """Remove what killed writers left in `directory` (a cache folder, or the cache directory for
    `_publish`'s folders): only our temporary names, only ours (this user's), only older than
    STALE_TMP_SECONDS. Returns how many were removed."""
    now = time.time() if now is None else now
    removed = 0
    try:
        with os.scandir(directory) as it:
            found = [(e.name, e.path) for e in it if is_writer_tmp(e.name) or is_setup_dir(e.name)]
    except OSError:
        return 0
    for name, path in found:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if now - st.st_mtime < STALE_TMP_SECONDS or (_owner_checks() and st.st_uid != os.geteuid()):
            continue
        if stat.S_ISREG(st.st_mode) and is_writer_tmp(name):
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
        elif stat.S_ISDIR(st.st_mode) and is_setup_dir(name) and _remove_setup_dir(Path(path)):
            removed += 1
    return removed


# ---------------------------------------------------------------------------- files
def _open_nonblocking(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
                       | getattr(os, "O_BINARY", 0))
    except OSError:
        return None


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of `path` when it is a regular file of at most `limit` bytes, else None — without
    blocking or following a link: a FIFO is opened non-blocking and refused by fstat before any read,
    a device, directory or symbolic link likewise. Every file of the cache folder is read this way."""
    fd = _open_nonblocking(path)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` (mode 0600) so a reader sees the old file or the new one, never half: a
    temporary `.<name>.XXXXXXXX.tmp` in the same folder, then os.replace."""
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o600)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
