"""Compiling tile.autotune's candidates side by side: forked worker processes fill the disk cache, so the
tuner's own compiles (one after another, as before) become disk hits.

Why processes: a candidate's compile is mostly Python (the tile lowering, the LLVM IR builder), which
threads would run one at a time; an attention kernel's candidates took 1.9-2.5 s each on a 2-core CPU,
so a first tuned call of eight candidates waited ~18 s. Why fork: the workers inherit the kernel objects
and their argument signatures as they are, with nothing to pickle (kernels defined in a function or a test
compile too). Why only the disk cache: a worker's result is never trusted for anything else. The tuner
still compiles every candidate itself and prunes on its own errors, so a worker that fails, hangs or is
killed costs only the time it took; a worker never touches the GPU (arch is given, nothing is launched).

`KB_AUTOTUNE_JOBS` caps the workers (default: the CPUs this process may use, at most 8; `1` compiles in
the calling process only). Without `os.fork` (Windows), with the disk cache off (`KB_CACHE=0`) or with stages
to dump (`KB_DUMP`) every candidate compiles in the calling process as before.
"""
from __future__ import annotations

import multiprocessing
import os
import warnings
from typing import Any, Sequence

from bridge.settings import env_count, refused

MAX_JOBS = 8               # default cap: memory (each worker holds a lowering) and diminishing returns
# a hung worker (a lock another thread held across the fork) stops the side compile, not the tuner: when no job
# has finished for IDLE_S (one candidate compiles in 1-5 s; an attention kernel 2.5 s on a 2-core CPU)
IDLE_S = 60.0

# documented state: the jobs of the side compile in progress, read by the forked workers (set just before
# the fork, cleared after; _IN_WORKER keeps a worker from forking workers of its own)
_JOBS: list[tuple[Any, tuple, dict, str]] = []
_IN_WORKER = False


def jobs_setting(count: int) -> int:
    """Workers for `count` candidates: KB_AUTOTUNE_JOBS (an integer >= 1), else the usable CPUs up to MAX_JOBS."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = env_count("KB_AUTOTUNE_JOBS", min(cpus, MAX_JOBS))
    if jobs < 1:
        raise refused("KB_AUTOTUNE_JOBS", os.environ.get("KB_AUTOTUNE_JOBS", ""), "an integer >= 1 (1: no workers)")
    return max(1, min(jobs, count))


def side_compile_possible() -> bool:
    """Can forked workers fill the disk cache here (fork exists, the cache is on, nothing is dumped)?"""
    from dsl.cache import cache_enabled
    return (hasattr(os, "fork") and not _IN_WORKER and cache_enabled()
            and not os.environ.get("KB_DUMP"))


def compile_side_by_side(jobs: Sequence[tuple[Any, tuple, dict, str]]) -> dict[int, str]:
    """Compile each (kernel, signature, facts, arch) of `jobs` into the disk cache in forked workers.
    Returns {job index: error text} for the jobs a worker could not compile (or did not finish: no job done
    for IDLE_S, a worker killed); the caller compiles every job itself anyway.
    With fewer than two jobs, or where side_compile_possible() is False, nothing runs and {} is returned."""
    global _JOBS
    if len(jobs) < 2 or not side_compile_possible():
        return {}
    workers = jobs_setting(len(jobs))
    if workers < 2:
        return {}
    from dsl.cache import DiskCache
    DiskCache()                              # the cache folder and its key exist before the workers race to them
    _JOBS = list(jobs)
    try:
        return _run_workers(workers, len(jobs))
    finally:
        _JOBS = []


def _run_workers(workers: int, count: int) -> dict[int, str]:
    """Jobs 0..count-1 of _JOBS on `workers` forked processes; {index: error text} of those not compiled."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    with warnings.catch_warnings():          # Python 3.12 warns of fork in a threaded process: the workers
        warnings.simplefilter("ignore", DeprecationWarning)   # compile and exit, they touch no CUDA state
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_mark_worker)
        futures = {pool.submit(_compile_one, i): i for i in range(count)}
    failed: dict[int, str] = {}
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=IDLE_S, return_when=FIRST_COMPLETED)
            if not done or any(f.exception() is not None for f in done):
                break                             # no progress for IDLE_S, or a worker died
        for f, i in futures.items():
            if not f.done():
                failed[i] = f"side compile stopped: no job finished for {IDLE_S:.0f} s"
            elif f.exception() is not None:      # a worker died (BrokenProcessPool): its jobs are the tuner's
                failed[i] = f"side compile stopped: {type(f.exception()).__name__}"
            elif f.result():
                failed[i] = f.result()
    finally:
        if failed:                                # a hung or dead worker is not waited for
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
    return failed


def _mark_worker() -> None:
    global _IN_WORKER
    _IN_WORKER = True


def _compile_one(i: int) -> str:
    """Worker: job i into the disk cache; "" or the error's text (the tuner reports its own)."""
    from dsl.tile.compile import compile_cached
    kernel, sig, facts, arch = _JOBS[i]
    try:
        compile_cached(kernel, sig, facts, arch)
    except Exception as exc:  # noqa: BLE001 - any refusal: the tuner's own compile prunes with its reason
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


__all__ = ["compile_side_by_side", "jobs_setting", "side_compile_possible", "MAX_JOBS"]
