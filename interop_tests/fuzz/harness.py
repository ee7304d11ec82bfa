"""The fuzz harness: a parent that generates inputs and a long-lived worker subprocess that runs them.

Why a subprocess: a segfault, an abort or an LLVM `exit(1)` in the code under test must be a test
failure that names the input, not a dead test runner. The parent (this module, inside pytest) makes
inputs from a seed, sends them in batches to `python -m interop_tests.fuzz.worker <target>`, and
reads one result per input. When the worker dies (signal, abort, exit) or goes silent past the
per-input timeout, the input it was running is a finding; the worker is restarted and the run goes
on with the next input.

A run counts inputs, not seconds: each target runs its own number of inputs (`INPUTS` in its module,
else targets.DEFAULT_INPUTS), the same inputs on every machine, so a loaded machine is slower, never
short of inputs. A wall-clock limit (LIMIT_SECONDS past any time budget) stops only a stuck run.

Knobs (environment; docs/fuzzing.md):
- `KB_FUZZ_SECONDS`   unset: the target's count of inputs; set (the nightly run): keep going for that many
                      seconds per target, worker start-up included, and at least the count;
- `KB_FUZZ_SEED`      the seed of every target (default: a fixed seed per target, see `target_seed`);
                      `random` draws a fresh one (printed in every failure);
- `KB_FUZZ_MEMORY_MB` address-space limit of a worker (default 6144);
- `KB_FUZZ_RSS_MB`    peak-memory growth of one input that counts as a finding (default 384);
- `KB_FUZZ_RECYCLE_MB` resident memory after which a worker is replaced (default 2048; long runs).

Input `i` of a target is a pure function of (target, seed, i): `input_rng`, so a failure replays
with `python -m interop_tests.fuzz.replay <target> <i> --seed <seed>`.
"""
from __future__ import annotations

import os
import pickle
import re
import random
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# Seconds past its time budget (none without KB_FUZZ_SECONDS) after which a run stops unfinished: no
# target needs a tenth of it on a loaded 2-core machine, so reaching it means stuck, not slow.
LIMIT_SECONDS = 600.0
MAX_REPORTED = 6            # distinct findings printed in a failure message
REPR_LIMIT = 1500           # characters of an input's repr in a failure message


# ----------------------------------------------------------------------------------- knobs
def budget_seconds() -> float | None:
    """Seconds each target keeps running for (`KB_FUZZ_SECONDS`); None: just its count of inputs."""
    raw = os.environ.get("KB_FUZZ_SECONDS", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"KB_FUZZ_SECONDS must be a positive number of seconds, got {raw!r}")
    return value


_RANDOM_SEEDS: dict[str, int] = {}   # KB_FUZZ_SEED=random: one fresh seed per target per process


def target_seed(target: str) -> int:
    """The seed of `target`: `KB_FUZZ_SEED` when set, else a fixed per-target value (crc32 of its name)."""
    raw = os.environ.get("KB_FUZZ_SEED", "").strip()
    if raw.lower() == "random":
        return _RANDOM_SEEDS.setdefault(target, random.SystemRandom().randrange(1 << 32))
    if raw:
        return int(raw, 0)
    return zlib.crc32(target.encode())


def input_rng(target: str, seed: int, index: int) -> random.Random:
    """The generator of input `index`: independent of every other input, so any one replays alone."""
    return random.Random(f"{target}:{seed}:{index}")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


# ----------------------------------------------------------------------------------- frames
def write_frame(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def read_frame(stream: Any) -> Any:
    """One frame from a blocking binary stream; None at end of file."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    data = stream.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


class _FrameReader:
    """Frames from a pipe file descriptor, with a timeout (the parent must notice a silent worker)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def next(self, timeout: float) -> tuple[str, Any]:
        """('frame', obj), ('eof', None) or ('timeout', None)."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    obj = pickle.loads(self.buf[4:4 + n])
                    self.buf = self.buf[4 + n:]
                    return "frame", obj
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return "timeout", None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return "eof", None
            self.buf += chunk


# ----------------------------------------------------------------------------------- results
@dataclass
class Finding:
    """One input that did something no allowed outcome covers."""
    target: str
    seed: int
    index: int
    kind: str                 # crash | hang | exception | oracle | memory
    title: str                # one line: signal, exception class, oracle name
    detail: str               # traceback, stderr tail, oracle message
    spec: Any

    def key(self) -> tuple[str, str]:
        """Findings that differ only in numbers or quoted names count as one."""
        title = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", self.title)
        return self.kind, re.sub(r"0x[0-9a-fA-F]+|\d+", "N", title)[:100]

    def render(self) -> str:
        text = repr(self.spec)
        if len(text) > REPR_LIMIT:
            text = text[:REPR_LIMIT] + f"... ({len(text)} chars)"
        detail = self.detail.strip()
        if len(detail) > 4000:
            detail = "..." + detail[-4000:]
        return (f"[{self.target}] {self.kind}: {self.title}\n"
                f"  seed={self.seed} index={self.index}\n"
                f"  replay: KB_FUZZ_SEED={self.seed} python -m interop_tests.fuzz.replay {self.target} "
                f"{self.index}\n"
                f"  input: {text}\n" + "\n".join("  | " + ln for ln in detail.splitlines()))


@dataclass
class Report:
    target: str
    seed: int
    wanted: int                  # inputs the run was asked for
    seconds: float | None        # its time budget (KB_FUZZ_SECONDS), None: the count alone
    limit: float                 # the wall-clock limit that stops a stuck run
    inputs: int = 0
    ok: int = 0
    allowed: dict[str, int] = field(default_factory=dict)     # exception class -> count
    findings: list[Finding] = field(default_factory=list)
    restarts: int = 0
    elapsed: float = 0.0
    limited: bool = False        # stopped by the wall-clock limit before it was done

    def distinct(self) -> list[tuple[Finding, int]]:
        """First finding of each (kind, title), with how many inputs hit it."""
        firsts: dict[tuple[str, str], Finding] = {}
        counts: dict[tuple[str, str], int] = {}
        for f in self.findings:
            firsts.setdefault(f.key(), f)
            counts[f.key()] = counts.get(f.key(), 0) + 1
        return [(f, counts[k]) for k, f in firsts.items()]

    def summary(self) -> str:
        allowed = ", ".join(f"{k} {v}" for k, v in sorted(self.allowed.items(), key=lambda kv: -kv[1]))
        budget = f", budget {self.seconds:g}s" if self.seconds is not None else ""
        stopped = f", STOPPED at its {self.limit:g}s wall-clock limit" if self.limited else ""
        return (f"{self.target}: seed={self.seed} {self.inputs} inputs (of {self.wanted}{budget}) in "
                f"{self.elapsed:.1f}s{stopped}, {self.ok} ok, allowed errors: {allowed or 'none'}, "
                f"{len(self.findings)} findings, {self.restarts} worker restarts")

    def failure_text(self) -> str:
        groups = self.distinct()
        parts = [self.summary(), f"{len(groups)} distinct findings:"]
        for f, count in groups[:MAX_REPORTED]:
            parts.append(f"--- {count} input(s) like this one\n" + f.render())
        if len(groups) > MAX_REPORTED:
            parts.append(f"... and {len(groups) - MAX_REPORTED} more distinct findings")
        return "\n".join(parts)


# ----------------------------------------------------------------------------------- the worker
class WorkerDied(Exception):
    pass


class _Worker:
    """One `python -m interop_tests.fuzz.worker <target>` process and its pipes."""

    def __init__(self, target: str, stderr_path: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("KB_CACHE", "0")              # never write mutated kernels into a disk cache
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        env["KB_FUZZ_MEMORY_MB"] = str(_env_int("KB_FUZZ_MEMORY_MB", 6144))
        env["KB_FUZZ_RSS_MB"] = str(_env_int("KB_FUZZ_RSS_MB", 384))
        env["KB_FUZZ_RECYCLE_MB"] = str(_env_int("KB_FUZZ_RECYCLE_MB", 2048))
        self.stderr_path = stderr_path
        self.stderr = open(stderr_path, "w+b")
        self.proc = subprocess.Popen([sys.executable, "-m", "interop_tests.fuzz.worker", target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=str(REPO), env=env)
        self.reader = _FrameReader(self.proc.stdout.fileno())

    def start(self, timeout: float) -> None:
        status, msg = self.reader.next(timeout)
        if status != "frame" or msg != ("ready",):
            self.kill()
            raise WorkerDied(f"the fuzz worker did not start ({status}); its stderr:\n{self.stderr_tail()}")

    def send(self, batch: list[tuple[int, Any]]) -> None:
        write_frame(self.proc.stdin, batch)

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait()
        for s in (self.proc.stdin, self.proc.stdout):
            try:
                s.close()
            except OSError:
                pass
        return rc

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        self.stderr.close()

    def stderr_tail(self, lines: int = 40) -> str:
        self.stderr.flush()
        text = self.stderr_path.read_bytes().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"worker killed by {name} (rc {rc})"
    return f"worker exited with status {rc}"


# ----------------------------------------------------------------------------------- the parent
class Runner:
    """Runs one target for its count of inputs (or a time budget) and collects what they did."""

    def __init__(self, target: str, *, inputs: int | None = None, seconds: float | None = None,
                 limit: float | None = None, seed: int | None = None, first_index: int = 0,
                 specs: list | None = None) -> None:
        """`inputs`: how many to run (default: the target's INPUTS; `specs`: all of them); `seconds`:
        keep going until this much time has passed too (default KB_FUZZ_SECONDS, else none); `limit`:
        seconds after which the run stops unfinished (default `seconds` + LIMIT_SECONDS)."""
        from interop_tests.fuzz.targets import load
        self.target = target
        self.module = load(target)
        self.seconds = budget_seconds() if seconds is None else seconds
        self.seed = target_seed(target) if seed is None else seed
        self.first_index = first_index
        self.specs = specs          # fixed inputs instead of generated ones (the harness's own tests)
        if specs is not None:
            self.inputs = len(specs) if inputs is None else min(inputs, len(specs))
        else:
            self.inputs = self.module.INPUTS if inputs is None else inputs
        self.limit = (self.seconds or 0.0) + LIMIT_SECONDS if limit is None else limit
        self.timeout = float(getattr(self.module, "TIMEOUT", 10.0))
        self.startup_timeout = 120.0

    def generate(self, index: int) -> Any:
        if self.specs is not None:
            return self.specs[index - self.first_index]
        return self.module.generate(input_rng(self.target, self.seed, index))

    def _next_batch(self, done: int, t0: float, per_input: float) -> int:
        """Inputs to send next: 0 when the run is over. The count first (batches of up to 64); then, with
        a time budget, batches sized to about half the time left."""
        now = time.monotonic() - t0
        if now >= self.limit:
            return 0
        if done < self.inputs:
            return min(64, self.inputs - done)
        if self.specs is not None or self.seconds is None or now >= self.seconds:
            return 0
        return max(1, min(64, int((self.seconds - now) / max(per_input, 1e-3) / 2)))

    def run(self) -> Report:
        report = Report(self.target, self.seed, self.inputs, self.seconds, self.limit)
        t0 = time.monotonic()
        tmp = tempfile.mkdtemp(prefix=f"kb_fuzz_{self.target}_")
        stderr_path = Path(tmp) / "worker.stderr"
        worker = self._spawn(stderr_path)
        index, per_input = self.first_index, 0.05
        try:
            while size := self._next_batch(index - self.first_index, t0, per_input):
                batch = [(i, self.generate(i)) for i in range(index, index + size)]
                index += size
                started = time.monotonic()
                worker = self._run_batch(worker, batch, report, stderr_path)
                per_input = max(1e-3, (time.monotonic() - started) / size)
        finally:
            worker.close()
            report.elapsed = time.monotonic() - t0
            report.limited = report.inputs < self.inputs or (
                self.seconds is not None and self.specs is None and report.elapsed < self.seconds)
            try:
                stderr_path.unlink()
                os.rmdir(tmp)
            except OSError:
                pass
        return report

    def _spawn(self, stderr_path: Path) -> _Worker:
        w = _Worker(self.target, stderr_path)
        w.start(self.startup_timeout)
        return w

    def _run_batch(self, worker: _Worker, batch: list[tuple[int, Any]], report: Report,
                   stderr_path: Path) -> _Worker:
        """Run `batch`; on a crash or hang record the input, restart, and resend the rest."""
        pending = list(batch)
        while pending:
            try:
                worker.send(pending)
            except (BrokenPipeError, OSError):
                worker = self._restart(worker, pending[0], report, stderr_path, "crash", None)
                pending = pending[1:]
                continue
            while pending:
                status, msg = worker.reader.next(self.timeout)
                if status == "frame" and msg == ("recycle",):
                    worker = self._respawn(worker, report, stderr_path)
                    break
                if status == "frame":
                    index, spec = pending.pop(0)
                    assert msg[0] == "done" and msg[1] == index, f"worker protocol out of step: {msg!r}"
                    self._record(report, index, spec, msg)
                    if msg[2] == "memory":          # the worker exits to reset its peak-memory mark
                        worker = self._respawn(worker, report, stderr_path)
                        break
                    continue
                kind = "hang" if status == "timeout" else "crash"
                worker = self._restart(worker, pending[0], report, stderr_path, kind, status)
                pending = pending[1:]
                break
        return worker

    def _restart(self, worker: _Worker, culprit: tuple[int, Any], report: Report, stderr_path: Path,
                 kind: str, status: str | None) -> _Worker:
        index, spec = culprit
        tail = worker.stderr_tail()
        rc = worker.kill()
        if kind == "hang":
            title = f"no result within {self.timeout:g}s (worker killed)"
        else:
            title = _describe_exit(rc)
        report.inputs += 1
        report.findings.append(Finding(self.target, self.seed, index, kind, title,
                                       f"worker stderr (this input only):\n{tail}", spec))
        return self._respawn(worker, report, stderr_path)

    def _respawn(self, worker: _Worker, report: Report, stderr_path: Path) -> _Worker:
        worker.close()
        report.restarts += 1
        return self._spawn(stderr_path)

    def _record(self, report: Report, index: int, spec: Any, msg: tuple) -> None:
        _, _, status, title, detail = msg
        report.inputs += 1
        if status == "ok":
            report.ok += 1
        elif status == "allowed":
            report.allowed[title] = report.allowed.get(title, 0) + 1
        else:
            report.findings.append(Finding(self.target, self.seed, index, status, title, detail, spec))


def run_target(target: str, **kwargs: Any) -> Report:
    return Runner(target, **kwargs).run()
