"""The forward ladder's selections (benchmarks/attention.py --ladder-rungs / --ladder-shapes): a short device
call names rungs and shapes, and a misspelt one must fail at once, naming what it accepts, before any GPU
work or any other case of the same call has run (a device call lost to a typo costs minutes)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _attention_ladder as ladder  # noqa: E402


def test_an_unknown_shape_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"--ladder-shapes: \[\(1000, 128\)\].*\(1024, 128\)"):
        ladder.ladder_cases(None, None, None, reps=1, quick=False, shapes=[(1000, 128)])


def test_an_empty_shape_list_is_refused() -> None:
    with pytest.raises(ValueError, match="--ladder-shapes"):
        ladder.ladder_cases(None, None, None, reps=1, quick=False, shapes=[])


def test_an_unknown_rung_is_refused_before_the_shapes() -> None:
    with pytest.raises(ValueError, match="--ladder-rungs: unknown"):
        ladder.ladder_cases(None, None, None, reps=1, quick=False, rungs=["no such rung"], shapes=[(1024, 128)])


def test_the_benchmark_names_the_shapes_option_in_its_help() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--ladder-shapes" in out.stdout and "1024x128" in out.stdout
