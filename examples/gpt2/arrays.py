"""The array library the step's buffers live in: torch (CUDA, or CPU for the simulator), CuPy, or
NumPy (simulator). Kernels of both sides take these arrays as they are: the bridge reads torch and
CuPy arrays through DLPack / `__cuda_array_interface__`, and the torch-side ops (cuBLAS, SDPA) view
a CuPy array through `torch.from_dlpack`, zero-copy. On the simulator a kernel gets NumPy views of
the host arrays (`kernel_arg`), so its writes land in the model's own buffers.

Only what the step needs that is not a kernel lives here: allocation, upload / download, filling,
and a flat buffer's views.
"""
from __future__ import annotations

from typing import Any

import numpy as np

DTYPES = ("float32", "int32", "float16", "bfloat16")


class ArraysError(ValueError):
    """An array library the run cannot use where it runs (CuPy on the simulator, NumPy on the GPU)."""


class ArrayLib:
    """One library on one device ("cuda" or "cpu"); subclasses wrap torch and the NumPy-like ones."""
    name = ""

    def __init__(self, device: str) -> None:
        self.device = device

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda"

    def zeros(self, shape: tuple[int, ...], dtype: str = "float32") -> Any:
        raise NotImplementedError

    def from_numpy(self, a: np.ndarray) -> Any:
        raise NotImplementedError

    def to_numpy(self, a: Any) -> np.ndarray:
        raise NotImplementedError

    def fill(self, a: Any, value: float) -> None:
        raise NotImplementedError

    def view(self, flat: Any, offset: int, shape: tuple[int, ...]) -> Any:
        """`shape` elements of the 1-D `flat` from `offset`, a view (no copy)."""
        n = int(np.prod(shape))
        return flat[offset:offset + n].reshape(shape)

    def kernel_arg(self, a: Any) -> Any:
        """What a kernel launch (or simulation) takes for `a`."""
        return a

    def torch_view(self, a: Any) -> Any:
        """`a` as a torch tensor sharing its memory (for the torch-side ops)."""
        import torch
        return torch.from_dlpack(a)


class TorchLib(ArrayLib):
    name = "torch"

    def __init__(self, device: str) -> None:
        super().__init__(device)
        import torch
        self.torch = torch

    def _dtype(self, dtype: str) -> Any:
        return getattr(self.torch, dtype)

    def zeros(self, shape: tuple[int, ...], dtype: str = "float32") -> Any:
        return self.torch.zeros(shape, dtype=self._dtype(dtype), device=self.device)

    def from_numpy(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def to_numpy(self, a: Any) -> np.ndarray:
        if a.dtype == self.torch.bfloat16:
            return a.float().cpu().numpy()
        return a.detach().cpu().numpy().copy()

    def fill(self, a: Any, value: float) -> None:
        a.fill_(value)

    def kernel_arg(self, a: Any) -> Any:
        if self.device == "cpu" and isinstance(a, self.torch.Tensor):
            if a.dtype == self.torch.bfloat16:     # NumPy has no bfloat16: the simulator takes ml_dtypes'
                import ml_dtypes
                return a.view(self.torch.int16).numpy().view(ml_dtypes.bfloat16)
            return a.numpy()
        return a

    def torch_view(self, a: Any) -> Any:
        return a


class XpLib(ArrayLib):
    """CuPy on "cuda", NumPy on "cpu": the same API."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        if device == "cuda":
            import cupy
            self.xp, self.name = cupy, "cupy"
        else:
            self.xp, self.name = np, "numpy"

    def _dtype(self, dtype: str) -> Any:
        if dtype == "bfloat16":
            import ml_dtypes
            return ml_dtypes.bfloat16
        return np.dtype(dtype)

    def zeros(self, shape: tuple[int, ...], dtype: str = "float32") -> Any:
        return self.xp.zeros(shape, dtype=self._dtype(dtype))

    def from_numpy(self, a: np.ndarray) -> Any:
        return self.xp.asarray(np.ascontiguousarray(a))

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.array(a.get() if hasattr(a, "get") else a)

    def fill(self, a: Any, value: float) -> None:
        a.fill(value)


def array_lib(name: str, device: str) -> ArrayLib:
    """The library `name` ("torch", "cupy", "numpy") on `device` ("cuda" or "cpu")."""
    if device not in ("cuda", "cpu"):
        raise ArraysError(f"device: expected 'cuda' or 'cpu', got {device!r}")
    if name == "torch":
        return TorchLib(device)
    if name == "cupy" and device == "cuda":
        return XpLib("cuda")
    if name == "numpy" and device == "cpu":
        return XpLib("cpu")
    raise ArraysError(f"--arrays: expected 'torch' (GPU or simulator), 'cupy' (GPU) or 'numpy' (simulator), "
                      f"got {name!r} on the {'GPU' if device == 'cuda' else 'simulator'}")
