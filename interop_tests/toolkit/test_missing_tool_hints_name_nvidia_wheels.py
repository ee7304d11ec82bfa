"""Issue 31: NVIDIA's tool wheels are a supported route, so a missing nvcc, ptxas or libdevice is told
`pip install nvidia-cuda-nvcc` (which ships all three) beside the toolkit and the KB_* setting, and a
missing cuda.h is told `pip install nvidia-cuda-runtime` (the libdevice hint used to leave the wheel out)."""
from __future__ import annotations

import pytest

from bridge import toolkit
from interop_tests.toolkit import fakes

bare, clean = fakes.bare, fakes.clean


@pytest.mark.parametrize("name, wheel, setting", [
    ("nvcc", "pip install nvidia-cuda-nvcc", "KB_NVCC"),
    ("ptxas", "pip install nvidia-cuda-nvcc", "KB_PTXAS"),
    ("libdevice", "pip install nvidia-cuda-nvcc", "KB_LIBDEVICE"),
    ("cuda-include", "pip install nvidia-cuda-runtime", "KB_CUDA_INCLUDE"),
])
def test_a_missing_tool_is_told_the_nvidia_wheel_that_ships_it(clean, name, wheel, setting):
    found = toolkit.locate(name)
    assert found.path is None, found
    assert wheel in found.hint and setting in found.hint and "CUDA toolkit" in found.hint, found.hint
    assert wheel in found.describe(), found.describe()
