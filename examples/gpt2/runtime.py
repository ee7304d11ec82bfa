"""Where one step's kernels run: on the GPU (launched on the current stream) or on the CPU simulator
(`kernel.simulate` on NumPy views of the host buffers), with the array library of the model's
buffers, the C++ kernels loaded once, and scratch buffers made on first use.

Scratch is made on first use, and the first step always runs eagerly, so a CUDA-graph capture
(`--graph`, after that first step) never allocates through the bridge.
"""
from __future__ import annotations

from typing import Any

from dsl import tile

from .arrays import ArrayLib
from .config import GPT2Config

SIM_SM_COUNT = 132


class Runtime:
    """The launch context every registry function takes first."""

    def __init__(self, lib: ArrayLib, cfg: GPT2Config, simulate: bool) -> None:
        if simulate and lib.on_gpu:
            raise ValueError(f"simulate: the CPU simulator needs host arrays, got {lib.name} on {lib.device}")
        if not simulate and not lib.on_gpu:
            raise ValueError(f"simulate: host ({lib.name}) arrays run on the simulator only; pass simulate=True")
        self.lib, self.cfg, self.simulate = lib, cfg, simulate
        self._scratch: dict[str, Any] = {}
        self._cpp: dict[str, Any] = {}
        self.state: dict[str, Any] = {}          # what a side keeps between calls (e.g. torch's philox pair)

    # ---- arrays ----------------------------------------------------------------------------------
    def arg(self, a: Any) -> Any:
        return self.lib.kernel_arg(a)

    def part(self, a: Any, tile_shape: tuple[int, ...]) -> Any:
        """A tile partition of `a` (a NumPy view of it on the simulator)."""
        return tile.partition(self.arg(a), tile_shape)

    def scratch(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Any:
        """The scratch buffer `name`, made on first use (the same shape and dtype every time)."""
        buf = self._scratch.get(name)
        if buf is None:
            buf = self._scratch[name] = self.lib.zeros(shape, dtype)
        return buf

    def torch(self, a: Any) -> Any:
        return self.lib.torch_view(a)

    # ---- launches --------------------------------------------------------------------------------
    def launch(self, kernel: Any, *args: Any, **kw: Any) -> None:
        """Launch a DSL kernel (or simulate it) with the arrays as the launch path takes them."""
        args = tuple(self.arg(a) for a in args)
        (kernel.simulate if self.simulate else kernel)(*args, **kw)

    def cpp(self, name: str) -> Any:
        """The C++ kernel `name` of cpp/kernels/llm/, with its embedded contract (installed fatbin)."""
        if self.simulate:
            raise RuntimeError(f"{name}: the C++ kernels run on a GPU only; on the CPU simulator use --dsl all")
        k = self._cpp.get(name)
        if k is None:
            import bridge
            k = self._cpp[name] = bridge.cpp_kernels.llm_kernel(name)
        return k

    @property
    def sm_count(self) -> int:
        """The GPU's SMs (grid sizing: the C++ layernorm backward, dW's K splits); on the simulator an
        H200's SIM_SM_COUNT, so it takes the launch shapes the GPU takes."""
        if self.simulate:
            return SIM_SM_COUNT
        if "sm_count" not in self.state:
            import bridge
            self.state["sm_count"] = bridge.current_device().sm_count
        return self.state["sm_count"]
