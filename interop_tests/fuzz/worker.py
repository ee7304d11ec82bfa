"""`python -m interop_tests.fuzz.worker <target>`: runs a target's inputs, one result frame per input.

Protocol (harness.py): the worker sends ("ready",), then reads batches [(index, spec), ...] from stdin
and answers each input with ("done", index, status, title, detail), status one of ok | allowed |
exception | oracle | memory. After a `memory` finding, or with ("recycle",) once its resident memory
passes KB_FUZZ_RECYCLE_MB (long runs), it exits and the parent starts a fresh one. Its own stdout is the protocol pipe; anything the code under test prints
goes to stderr, which the parent keeps per input (the worker truncates it before each input) so a
crash report shows what the crashing input printed. A crash needs no cooperation: the parent sees
the pipe close and blames the input it was waiting for.
"""
from __future__ import annotations

import faulthandler
import os
import resource
import sys
import traceback


def _limit_memory() -> None:
    mb = int(os.environ.get("KB_FUZZ_MEMORY_MB", "6144"))
    if mb > 0:
        limit = mb << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _reset_peak() -> None:
    """Start a new peak-RSS window (Linux: `5` into /proc/self/clear_refs resets VmHWM), so one input's
    growth shows even when an earlier import peaked higher. Elsewhere the process peak is used."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    """Peak resident memory since the last _reset_peak (VmHWM), else of the whole process."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0          # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # KiB on Linux


def _rss_mb() -> float:
    """Current resident memory (Linux /proc; 0 elsewhere, which disables recycling)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _fresh_stderr() -> None:
    """Empty the stderr file so it holds only the next input's output."""
    sys.stderr.flush()
    try:
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:
        pass   # stderr is a terminal or a pipe (replay by hand): nothing to truncate


def run_one(target, spec, timeout: float, rss_limit_mb: float) -> tuple[str, str, str]:
    """(status, title, detail) of one input, never raising."""
    from interop_tests.fuzz.targets import Oracle
    _reset_peak()
    before = _rss_mb() or _peak_rss_mb()
    faulthandler.dump_traceback_later(max(1.0, timeout - 1.0), exit=False)   # a hang shows its stack
    try:
        summary = target.execute(spec)
        result = ("ok", str(summary)[:200], "")
    except Oracle as exc:
        result = ("oracle", str(exc).splitlines()[0][:300] if str(exc) else "Oracle", str(exc))
    except BaseException as exc:   # noqa: BLE001 - everything is classified, nothing escapes
        name = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)) and target.allowed(exc, spec):
            result = ("allowed", name, str(exc)[:300])
        else:
            head = (str(exc).splitlines() or [""])[0][:120]
            result = ("exception", f"{name}: {head}", "".join(traceback.format_exception(exc)))
    finally:
        faulthandler.cancel_dump_traceback_later()
    grown = _peak_rss_mb() - before
    if grown > rss_limit_mb:
        result = ("memory", f"peak memory grew by {grown:.0f} MB on one input (limit {rss_limit_mb:g} MB)",
                  f"outcome otherwise: {result[0]} {result[1]}\n{result[2]}")
    return result


def main(argv: list[str]) -> int:
    from interop_tests.fuzz.harness import read_frame, write_frame
    from interop_tests.fuzz.targets import load
    if len(argv) != 2:
        print("usage: python -m interop_tests.fuzz.worker <target>", file=sys.stderr)
        return 2
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                     # stray prints of the code under test go to stderr
    sys.stdout = sys.stderr
    faulthandler.enable()
    if not argv[1].endswith("_gpu"):  # the CUDA driver reserves far more address space than it uses:
        _limit_memory()               # an address-space limit makes cuInit fail (CUDA_ERROR_OUT_OF_MEMORY)
    target = load(argv[1])
    target.warm()                     # imports and one-time set-up, before the first input's clock
    rss_limit = float(os.environ.get("KB_FUZZ_RSS_MB", "384"))
    recycle_mb = float(os.environ.get("KB_FUZZ_RECYCLE_MB", "2048"))
    write_frame(proto, ("ready",))
    stdin = sys.stdin.buffer
    while True:
        batch = read_frame(stdin)
        if batch is None:
            return 0
        for index, spec in batch:
            _fresh_stderr()
            status, title, detail = run_one(target, spec, target.TIMEOUT, rss_limit)
            write_frame(proto, ("done", index, status, title, detail))
            if status == "memory":
                return 0              # a fresh worker has a fresh peak-memory mark
            if _rss_mb() > recycle_mb:   # caches of a long run: make way for a fresh worker
                write_frame(proto, ("recycle",))
                return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
