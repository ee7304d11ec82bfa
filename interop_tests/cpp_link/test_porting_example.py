"""examples/porting: the CUDA C++ app builds with CMake at every porting step (CPU); on a GPU every
step gives byte-identical output, the Python-driven pipeline too, and compute-sanitizer is clean."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 17 s of a full run on 2 cores: CMake + nvcc builds

ROOT = Path(__file__).resolve().parents[2]
PORTING = ROOT / "examples" / "porting"


def _build(tmp: Path, step: int, nvcc: str, cmake: str) -> subprocess.CompletedProcess:
    bdir = tmp / f"step{step}"
    cfg = subprocess.run([cmake, "-S", str(PORTING), "-B", str(bdir), f"-DPORTING_STEP={step}", "-DPORTING_ARCH=90",
                          f"-DPython_EXECUTABLE={sys.executable}", f"-DKERNELBRIDGE_NVCC={nvcc}"],
                         capture_output=True, text=True)
    if cfg.returncode != 0:
        return cfg
    return subprocess.run([cmake, "--build", str(bdir), "-j", "2"], capture_output=True, text=True)


@pytest.fixture(scope="module")
def step0(tmp_path_factory, nvcc, cmake) -> Path:
    """The all-C++ step built once for the tests that read it (a build takes seconds)."""
    tmp = tmp_path_factory.mktemp("porting")
    r = _build(tmp, 0, nvcc, cmake)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp / "step0"


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_porting_example_builds_with_cmake(tmp_path, nvcc, cmake, step, request):
    if step == 0:
        bdir = request.getfixturevalue("step0")
    else:
        r = _build(tmp_path, step, nvcc, cmake)
        assert r.returncode == 0, r.stdout + r.stderr
        bdir = tmp_path / f"step{step}"
    assert (bdir / "porting_kernels.fatbin").stat().st_size > 0
    if step > 0:
        header = (bdir / "aot" / "dsl_kernels_kernels.h").read_text()
        assert "Status blur3x3(" in header and "kb::validate" in header


def test_porting_kernels_carry_parseable_contracts(step0):
    from bridge import _native, fatbin
    data = (step0 / "porting_kernels.fatbin").read_bytes()
    contracts = fatbin.embedded_contracts(data)
    assert sorted(contracts) == ["blur3x3", "histogram256", "normalize"]
    for text in contracts.values():
        c = _native.Contract.from_json(text) if hasattr(_native.Contract, "from_json") else _native.Contract(text)
        assert c.kernel in contracts


def test_dsl_kernels_of_the_example_match_numpy_on_the_simulator(rng):
    sys.path.insert(0, str(PORTING))
    import dsl_kernels as k
    rows, cols = 37, 53
    img = rng.random((rows, cols), dtype=np.float32)
    out = np.full_like(img, np.nan)
    k.blur3x3.simulate(img, out)
    p = np.pad(img, 1, mode="edge")
    ref = np.zeros_like(img)
    for dr in range(3):
        for dc in range(3):
            ref += p[dr:dr + rows, dc:dc + cols]
    np.testing.assert_array_equal(out, ref / np.float32(9))
    v = out.ravel()
    hist = np.zeros(256, np.uint32)
    k.histogram256.simulate(v, hist, grid=((v.size + 255) // 256,))
    bins = np.clip((v * np.float32(256)).astype(np.int32), 0, 255)
    np.testing.assert_array_equal(hist, np.bincount(bins, minlength=256))


@pytest.mark.gpu
@pytest.mark.nosanitize     # builds 4 CMake trees; the next test runs compute-sanitizer on the app itself
def test_porting_example_every_step_identical_gpu(tmp_path, nvcc, cmake):
    r = subprocess.run([sys.executable, str(PORTING / "run_porting.py"), "--rows", "1000", "--cols", "777",
                        "--build", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout.splitlines()[-1]
    assert r.stdout.count("identical_to_step0=True") == 6


@pytest.mark.gpu
@pytest.mark.nosanitize     # runs compute-sanitizer itself (not nested under scripts/gpu_check.py's)
def test_porting_example_sanitizer_clean_gpu(tmp_path, nvcc, cmake):
    sanitizer = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).exists()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found")
    for step in (0, 3):
        assert _build(tmp_path, step, nvcc, cmake).returncode == 0
        bdir = tmp_path / f"step{step}"
        for tool in ("memcheck", "racecheck"):
            r = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "9", str(bdir / "porting_app"),
                                str(bdir / "porting_kernels.fatbin"), "129", "67", str(bdir / "o.bin")],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"step {step} {tool}:\n{r.stdout}{r.stderr}"
