"""`ForeignKernel`: a `bridge.Kernel` whose compiled code takes trailing parameters its own system fills.

Triton appends scratch pointers (global_scratch, profile_scratch in 3.x) after a kernel's declared
parameters; its launcher passes them, never its user. Here the contract declares them as optional
`u8` pointer arrays after the user's arguments, so the one validator and the one packer see the whole
list, and this wrapper passes them: None (a null pointer) when the kernel needs no scratch, else a
stream-ordered buffer of `per_program` bytes per program, allocated for the launch's grid.

Cost: the launch goes through `Launcher.launch(..., keep_all=True)`, not the one-C-call fastcall, because
the argument tuple is rebuilt here (a rebuilt tuple hides which arrays only the call holds, so every
array is kept alive until the launch completes: safe, a little slower); `k(*args)` without keywords
calls it positionally with the null tail built once. Kernels without hidden parameters (declared C
kernels, CuPy kernels, Triton kernels whose code reads no scratch pointer: triton_jit drops those) are
plain `bridge.Kernel`s and keep the fastcall. A native contract field for trailing null pointers (the
packer appending them) would let every Triton kernel be one: docs/interop.md, "Launch cost".

`user_args(k)` / `full_args(k, args)` / `full_kernel(k)` describe any of these kernels uniformly (the
arguments the user passes, the tuple the launcher packs, the bridge.Kernel that runs) for the
framework integrations (dsl/integrations/_foreign.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bridge.contract import native_contract
from bridge.errors import ForeignKernelError
from bridge.kernel import Kernel, _check_peer_flag, _peer_option, launch_options

__all__ = ["Hidden", "ForeignKernel", "user_args", "full_args", "full_kernel"]


@dataclass(frozen=True)
class Hidden:
    """One trailing parameter the wrapper fills: its contract name, and the scratch bytes each program
    needs (0: a null pointer) at `align` bytes (bridge allocations are 256-byte aligned; more is refused
    when the kernel is wrapped)."""

    name: str
    per_program: int = 0
    align: int = 1


class ForeignKernel:
    """A foreign kernel with hidden trailing parameters. Launch it like a `bridge.Kernel`:
    `k(*args, grid=, block=, shared_mem=, stream=)`, `k[grid, block](*args)`, `k.launch(...)`;
    `k.kernel` is the underlying bridge.Kernel (whose contract includes the hidden arguments),
    `k.contract` the contract the user's arguments are checked against, `k.info` what the foreign
    compiler reported (metadata, entry name, compiler)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("foreign kernels come from bridge.foreign.triton(...) or bridge.foreign.load(...)")

    @classmethod
    def _create(cls, kernel: Kernel, hidden: tuple[Hidden, ...], contract: Any, info: dict[str, Any]) -> ForeignKernel:
        self = object.__new__(cls)
        self.kernel, self.hidden, self.contract, self.info = kernel, hidden, contract, info
        self.name = kernel.name
        self._nulls = tuple(None for _ in hidden)
        self._scratch = any(h.per_program for h in hidden)
        self._native_launch = kernel.launcher.launch      # bound once: the hot path's one attribute
        self._direct = not self._scratch                   # k(*args) is args + nulls (NumbaKernel: not so)
        return self

    def _launch(self, args: tuple, grid: Any, block: Any, shared_mem: Any, stream: Any, peer: bool) -> None:
        launcher = self.kernel.launcher
        tail = self._nulls
        if self._scratch:
            tail = self._scratch_args(launcher, args, grid, block, shared_mem, stream)
        launcher.launch(args + tail, grid, block, shared_mem, stream, keep_all=True, peer_access=peer)

    def _scratch_args(self, launcher: Any, args: tuple, grid: Any, block: Any, shared_mem: Any,
                      stream: Any) -> tuple:
        """Scratch buffers for this launch's grid (resolved by the validator when not given)."""
        from bridge.array import empty
        resolved, _block, _smem, skip = launcher.validate_only(args + self._nulls, grid, block, shared_mem)
        programs = 0 if skip else resolved[0] * resolved[1] * resolved[2]
        out = []
        for h in self.hidden:
            nbytes = h.per_program * programs
            out.append(empty((max(nbytes, 1),), "uint8", stream=stream) if h.per_program else None)
        return tuple(out)

    def __call__(self, *args: Any, **kw: Any) -> None:
        """`k(*args, grid=, block=, shared_mem=, stream=, peer_access=False)`: the user's arguments only."""
        if not kw and self._direct:               # the common case: nulls appended, one native call
            self._native_launch(args + self._nulls, None, None, None, None, True, False)
            return
        peer = _peer_option(self.name, kw)
        grid, block, shared_mem, stream = launch_options(self.name, kw)
        self._launch(args, grid, block, shared_mem, stream, peer)

    def launch(self, *args: Any, grid: Any = None, block: Any = None, stream: Any = None,
               shared_mem: int | None = None, peer_access: bool = False) -> None:
        _check_peer_flag(self.name, peer_access)
        self._launch(args, grid, block, shared_mem, stream, peer_access)

    def __getitem__(self, config: Any) -> Any:
        """`k[grid, block]`, `k[grid, block, stream]`, `k[grid, block, stream, shared_mem]`."""
        parts = tuple(config) if isinstance(config, tuple) else (config,)
        if not 2 <= len(parts) <= 4:
            raise TypeError(f"{self.name}: expected k[grid, block], k[grid, block, stream] or "
                            f"k[grid, block, stream, shared_mem], got {len(parts)} item(s)")
        grid, block = parts[0], parts[1]
        stream = parts[2] if len(parts) > 2 else None
        shared_mem = parts[3] if len(parts) > 3 else None
        return lambda *args: self._launch(args, grid, block, shared_mem, stream, False)

    def on_device(self, device: Any) -> ForeignKernel:
        """This kernel loaded on `device`."""
        return ForeignKernel._create(self.kernel.on_device(device), self.hidden, self.contract, self.info)

    def __repr__(self) -> str:
        names = ", ".join(h.name for h in self.hidden)
        return f"<bridge.foreign.ForeignKernel {self.name!r} on device {self.kernel.device} (fills {names})>"

    def full_args(self, args: tuple) -> tuple:
        """The tuple the launcher packs for the user's `args` (hidden parameters null); a kernel that
        needs scratch memory per launch cannot be described this way (ForeignKernelError)."""
        if self._scratch:
            needs = ", ".join(h.name for h in self.hidden if h.per_program)
            raise ForeignKernelError(f"{self.name}: the kernel needs scratch memory per launch ({needs}), which "
                                     f"only its own launch allocates", kernel=self.name)
        return tuple(args) + self._nulls


def _contract_dict(contract: Any, name: str) -> dict[str, Any]:
    return json.loads(native_contract(contract, name).to_json())


def full_kernel(k: Any) -> Kernel:
    """The bridge.Kernel that runs `k` (a bridge.Kernel, ForeignKernel or NumbaKernel)."""
    return k.kernel if isinstance(k, ForeignKernel) else k


def user_args(k: Any) -> list[dict[str, Any]]:
    """The contract arguments (JSON dicts: name, kind, dtype, ndim, access, ...) of what the user passes to
    `k`, in order: a bridge.Kernel's contract, a ForeignKernel's visible contract, a NumbaKernel's own
    parameters (not numba's per-array fields)."""
    if isinstance(k, ForeignKernel):
        args = _contract_dict(k.contract, k.name)["args"]
        own = getattr(k, "params", None)          # NumbaKernel: its contract spells out numba's fields
        if own is not None:
            by = {a["name"]: a for a in args}
            return [by[p.name] for p in own]
        return args
    if isinstance(k, Kernel):
        if k.contract is None:
            _ = k.launcher                        # raises MissingContractError, naming the kernel
        return _contract_dict(k.contract, k.name)["args"]
    raise TypeError(f"expected a bridge.Kernel or a bridge.foreign kernel, got {type(k).__name__}")


def full_args(k: Any, args: tuple) -> tuple:
    """The tuple `full_kernel(k)`'s launcher packs for the user's `args`."""
    return k.full_args(tuple(args)) if isinstance(k, ForeignKernel) else tuple(args)
