"""Kernels that are not DSL kernels in the generated ops: a `bridge.Kernel` (a module's, a C++ kernel's, a
CuPy Raw/ElementwiseKernel's, a Triton kernel without scratch) or a `bridge.foreign` kernel with
parameters of its own (ForeignKernel, NumbaKernel).

What an op needs from a kernel is its parameters (names, array or scalar, dtype, ndim, which ones it
writes) and its relations, to plan inputs, outputs and output shapes (_plan.py), and a way to launch
it. For these kernels all of it is in the contract: `bridge.foreign.launch.user_args` gives the
arguments the user passes, `full_args` the tuple the launcher packs (numba's per-array fields, null
scratch pointers) and `full_kernel` the bridge.Kernel that runs. torch launches them like any kernel
(`k(*args, grid=, block=, stream=)`); JAX registers the full kernel with its XLA FFI handler, with
each parameter the user does not pass given by the call: numba's fields as scalars fixed at trace
time, each null pointer as a 1-byte result buffer of its own (the kernel never reads it; the FFI
slots have no null). They have no CPU simulator: on the CPU a call is validated, then refused.
Dependency direction: dsl → bridge only.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from bridge import errors as E

__all__ = ["is_foreign", "foreign_params", "outputs_read", "no_simulator", "full_call", "validate_host",
           "register"]

_WRITES = ("write", "readwrite", "atomic")


def is_foreign(kernel: Any) -> bool:
    """True for a bridge.Kernel or a bridge.foreign kernel (anything but a DSL kernel)."""
    from bridge.foreign.launch import ForeignKernel
    from bridge.kernel import Kernel
    return isinstance(kernel, (Kernel, ForeignKernel))


def _contract(kernel: Any) -> dict[str, Any]:
    from bridge.contract import native_contract
    from bridge.foreign.launch import full_kernel
    inner = full_kernel(kernel)
    if inner.contract is None:
        _ = inner.launcher             # raises MissingContractError, naming the kernel
    return json.loads(native_contract(inner.contract, kernel.name).to_json())


def foreign_params(kernel: Any, param_cls: Any) -> tuple[str, list[Any], tuple[str, ...], bool]:
    """(name, parameters, relations, False) of a bridge or foreign kernel, as `_plan.kernel_params`."""
    from bridge.foreign.launch import user_args
    params = []
    for k, a in enumerate(user_args(kernel)):
        dtype = None if a["dtype"] == "any" else a["dtype"]
        if a["kind"] == "array":
            ndim = a.get("ndim")
            params.append(param_cls(a["name"], k, "array", a.get("access", "read") in _WRITES, dtype,
                                    ndim if isinstance(ndim, int) and ndim >= 0 else None))
        else:
            params.append(param_cls(a["name"], k, "scalar", False, dtype, None))
    # numba's per-array fields are tied to their arrays by relations of their own: not the op's
    requires = tuple(r for r in _contract(kernel).get("requires", []) if "_kb_" not in r)
    return kernel.name, params, requires, False


def outputs_read(plan: Any) -> frozenset[str]:
    """The allocated outputs the kernel also reads (contract access readwrite): zero-filled."""
    from bridge.foreign.launch import user_args
    access = {a["name"]: a.get("access") for a in user_args(plan.kernel)}
    return frozenset(p.name for p in plan.outputs if access.get(p.name) == "readwrite")


def no_simulator(plan: Any) -> E.DeviceMismatchError:
    return E.DeviceMismatchError(f"{plan.name}: a {type(plan.kernel).__name__} runs on CUDA devices only (there "
                                 f"is no CPU simulator for kernels compiled outside the DSL); give CUDA "
                                 f"tensors/arrays", kernel=plan.name)


def full_call(call: Any) -> tuple:
    """The launcher's argument tuple for a traced call (`jax_call._Call`), with NumPy stand-ins for arrays."""
    from bridge.foreign.launch import full_args
    return full_args(call.plan.kernel, tuple(call._args(call.standins())))


def null_slots(call: Any) -> int:
    """How many parameters of the call the user does not pass and the kernel takes as null pointers."""
    return sum(1 for v in full_call(call) if v is None)


def validate_host(call: Any) -> None:
    """The one validator on the traced call's stand-ins (no GPU): a bad call is a typed error when traced."""
    import bridge
    from bridge import _native
    from bridge.contract import native_contract
    from bridge.foreign.launch import full_kernel
    from dsl.sim.validator import sim_limits
    limits, attrs = sim_limits()
    views = [bridge.asarray(a) if isinstance(a, np.ndarray) else a for a in full_call(call)]
    contract = native_contract(full_kernel(call.plan.kernel).contract, call.plan.name)
    _native.validate(contract, views, grid=call.grid, block=call.block, smem=None, limits=limits, attrs=attrs)


def _slots(call: Any, kernel: Any, dev: Any) -> tuple[list[Any], list[tuple[str, Any]]]:
    """(descriptions for the validator, FFI slots) of every parameter the full kernel takes."""
    from bridge import _native
    plan = call.plan
    standins = call.standins()
    by_id = {id(v): n for n, v in standins.items()}
    full = full_args(kernel, tuple(call._args(standins)))
    writable = [p.name for p in plan.writable]
    descs, slots, base, nulls = [], [], 1 << 40, 0
    for v in full:
        if isinstance(v, np.ndarray) or v is None:
            if v is None:
                shape, dtype, ro = [1], "u8", False
                slot = ("result", len(writable) + nulls)
                nulls += 1
            else:
                p = plan.by_name[by_id[id(v)]]
                shape, dtype, ro = list(call.shapes[p.name]), call.dtype(p), not p.writable
                slot = ("result", writable.index(p.name)) if p.writable else ("operand", call.operand_index[p.name])
            descs.append(_native.ArrayDesc(base, shape, None, dtype, 2, dev.ordinal, ro))
            base += (int(np.prod(shape, dtype=np.int64)) * 16 + 511) // 256 * 256
            slots.append(slot)
        else:
            v = v.item() if isinstance(v, np.generic) else v
            descs.append(v)
            slots.append(("scalar", v))
    return descs, slots


def full_args(kernel: Any, args: tuple) -> tuple:
    from bridge.foreign.launch import full_args as full
    return full(kernel, args)


def register(call: Any, mod: Any) -> int:
    """Validate the traced call on the current device and register the full kernel's FFI launch entry."""
    import bridge
    from bridge import _driver, _native
    from bridge.contract import native_contract
    from bridge.foreign.launch import full_kernel
    dev = bridge.current_device()
    _driver.ensure_current(dev.ordinal)
    kernel = call.plan.kernel.on_device(dev.ordinal)
    bk = full_kernel(kernel)
    descs, slots = _slots(call, kernel, dev)
    contract = native_contract(bk.contract, bk.name)
    _native.validate(contract, descs, grid=call.grid, block=call.block, smem=None, limits=dev.limits,
                     attrs=bk.attributes)
    lim, at = dev.limits, bk.attributes
    limits = {k: getattr(lim, k) for k in ("cc", "max_threads_per_block", "max_block", "max_grid",
                                          "smem_per_block", "smem_per_block_optin", "sm_count")}
    attrs = {k: getattr(at, k) for k in ("max_threads_per_block", "static_smem", "num_regs", "max_dynamic_smem")}
    return mod.register(bk.handle, _driver.primary_context(dev.ordinal), dev.ordinal, contract.to_json(), limits,
                        attrs, _dims(call.grid, 0), _dims(call.block, 0), -1, slots)


def _dims(v: Any, fill: int) -> tuple[int, int, int]:
    """A launch dimension as the FFI entry takes it (3 ints; `fill` for None: derived)."""
    if v is None:
        return (fill, fill, fill)
    t = (v,) if isinstance(v, int) else tuple(v)
    return tuple(t) + (1,) * (3 - len(t))  # type: ignore[return-value]
