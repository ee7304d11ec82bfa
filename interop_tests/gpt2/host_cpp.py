"""Mixed C++ / DSL GPT-2 steps on the CPU simulator, for tests: the C++ side of every op, as far as a
CPU can take it.

- A cpp/kernels/llm kernel cannot run on the CPU, but its launch can be checked: `HostCppKernel`
  validates each call with the native validator against the C++ kernel's own contract, read from the
  installed fatbin (host memory standing in for device memory: the refusals, classes and texts of a
  GPU launch). A call that passes launches nothing; the op's DSL port then computes the result (the
  ports equal the C++ kernels: interop_tests/porting/test_llm_ports.py). So a mixed step on the
  simulator proves the C++ side's call sites (arguments, sizes, grids) against its contracts, and a
  buffer the C++ kernel would refuse stops the step at that launch, as on the GPU.
- The torch-side ops (matmul: cuBLAS's calls on CPU tensors, grad_clip) run as they are; attention's
  SDPA kernels are CUDA-only, so float64 formulas stand in for them (`sdpa_stand_in`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from bridge import cpp_kernels
from bridge.fatbin import embedded_contracts
from dsl.sim.validator import host_launcher
from examples.gpt2 import kernels_cpp, registry
from examples.gpt2.arrays import array_lib
from examples.gpt2.config import GPT2Config
from examples.gpt2.model import GPT2
from examples.gpt2.runtime import Runtime

TORCH_OPS = frozenset(n for n in registry.NAMES if not registry.CPP_SIDE[n].startswith("cpp/kernels/llm"))
_CONTRACTS: dict[str, str] = {}      # kernel -> contract JSON, read once from the installed fatbins


def cpp_contract(name: str) -> str:
    """The contract JSON the C++ kernel `name` carries in its installed fatbin."""
    if not _CONTRACTS:
        for module in cpp_kernels.LLM_KERNELS:
            with open(cpp_kernels.path(module), "rb") as f:
                _CONTRACTS.update(embedded_contracts(f.read()))
    return _CONTRACTS[name]


def _dim3(v: Any) -> tuple[int, int, int] | None:
    if v is None:
        return None
    v = tuple(v) if isinstance(v, (tuple, list)) else (int(v),)
    return tuple(int(x) for x in v) + (1,) * (3 - len(v))


class HostCppKernel:
    """Launch syntax of a bridge kernel (`k[grid, block](*args)`, `k(*args, block=)`); each call is
    validated on the host against the C++ contract and counted in `launches`, nothing runs."""

    def __init__(self, name: str, rt: Runtime, launches: list[str]) -> None:
        self.name, self.rt, self.launches = name, rt, launches
        self.launcher = host_launcher(cpp_contract(name), name)

    def __getitem__(self, config: tuple) -> Callable[..., None]:
        grid, block = config
        return lambda *args: self._validate(args, grid, block)

    def __call__(self, *args: Any, grid: Any = None, block: Any = None) -> None:
        self._validate(args, grid, block)

    def _validate(self, args: tuple, grid: Any, block: Any) -> None:
        self.launcher.validate_only(tuple(self.rt.arg(a) for a in args), grid=_dim3(grid), block=_dim3(block))
        self.launches.append(self.name)


class HostCppRuntime(Runtime):
    """The simulator's Runtime whose `cpp(name)` is a HostCppKernel; `launches` lists the C++ kernels
    validated so far, in order."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__(array_lib("torch", "cpu"), cfg, simulate=True)
        self.launches: list[str] = []

    def cpp(self, name: str) -> Any:
        return HostCppKernel(name, self, self.launches)


def validated_then_port(name: str) -> Callable[..., None]:
    """Op `name`'s C++ side as the simulator runs it: the C++ call (validated), then the DSL port."""
    cpp, dsl = registry.REGISTRY[name]["cpp"], registry.REGISTRY[name]["dsl"]

    def op(rt: Runtime, *args: Any) -> None:
        cpp(rt, *args)
        dsl(rt, *args)
    return op


def mixed_model(cfg: GPT2Config, dsl: frozenset[str]) -> GPT2:
    """The step with the ops in `dsl` on the DSL side and the others on their C++ side as above
    (use with `sdpa_stand_in` patched in when attention is on the C++ side)."""
    model = GPT2(HostCppRuntime(cfg), dsl)
    for name, side in model.sides.items():
        if side == "cpp" and name not in TORCH_OPS:
            model.ops[name] = validated_then_port(name)
    return model


# ---- float64 formulas for torch's CUDA-only memory-efficient attention ops --------------------------
def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    s = q.double() @ k.double().transpose(-1, -2) * q.shape[-1] ** -0.5
    T = s.shape[-1]
    return s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def stand_in_forward(q, k, v, bias, compute_lse, dropout_p, causal):
    """(out (B,H,T,D), log-sum-exp (B,H,T), philox seed, offset) of causal softmax attention."""
    assert bias is None and compute_lse and dropout_p == 0.0 and causal
    s = _scores(q, k)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.exp(s - lse[..., None]) @ v.double()
    return out.to(q.dtype), lse.float(), torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)


def stand_in_backward(dout, q, k, v, bias, out, lse, seed, offset, dropout_p, mask, causal):
    """(dq, dk, dv, None) from the forward's out and log-sum-exp, as FlashAttention's backward."""
    assert bias is None and dropout_p == 0.0 and causal and list(mask) == [True, True, True, False]
    scale = q.shape[-1] ** -0.5
    p = torch.exp(_scores(q, k) - lse.double()[..., None])
    do = dout.double()
    dp = do @ v.double().transpose(-1, -2)
    ds = p * (dp - (do * out.double()).sum(-1, keepdim=True))
    dq, dk = ds @ k.double() * scale, ds.transpose(-1, -2) @ q.double() * scale
    return dq.to(q.dtype), dk.to(q.dtype), (p.transpose(-1, -2) @ do).to(q.dtype), None


def sdpa_stand_in(monkeypatch: Any) -> None:
    """Make kernels_cpp's attention ops call the float64 formulas (CPU tensors)."""
    monkeypatch.setattr(kernels_cpp, "sdpa_efficient", lambda: (stand_in_forward, stand_in_backward))
