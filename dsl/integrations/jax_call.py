"""`dsl.jax.kernel_call(kernel, ...)`: a SIMT or tile kernel (or a bridge / bridge.foreign kernel:
_foreign.py) as a JAX operation, usable under `jax.jit`.

Why two paths: on a GPU backend the kernel is an XLA FFI custom call (cpp/jax/kb_jax_ffi.cpp) launched
on XLA's stream with XLA's buffers, validated by the kernel's contract both when traced (typed bridge
errors, here) and at each call (the same validator, in C++); on the CPU backend it is a
`jax.pure_callback` running the kernel on the simulator. Both take their roles, output shapes and
dtypes from one `OpPlan` (dsl/integrations/_plan.py). `jax.vmap` is supported sequentially: one launch
per batch element (each launch validated like an unbatched call). See docs/integrations.md.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np

from bridge import errors as E
from dsl.integrations._kernels import host_dtype, outputs_read, param_dtype, standin
from dsl.sim.validator import sim_limits
from dsl.integrations._plan import LONG, OpPlan

API = "dsl.jax.kernel_call"
TARGET = "kernelbridge_dsl_launch"      # the FFI target name registered for platform CUDA
_registered = False
_register_lock = threading.Lock()


def _jax() -> Any:
    try:
        import jax
    except ImportError as exc:     # optional extra: pip install kernelbridge[jax]
        raise ImportError(f"{API} needs JAX (pip install 'kernelbridge[jax]'): {exc}") from None
    return jax


def _ffi_module() -> Any:
    """The compiled FFI handler module, or None when this installation was built without it."""
    try:
        from dsl.integrations import _jax_ffi
    except ImportError:
        return None
    return _jax_ffi


def ffi_available() -> bool:
    """True when the XLA FFI handler was built (jaxlib importable when the package was installed)."""
    return _ffi_module() is not None


def _register_target(jax: Any) -> Any:
    global _registered
    mod = _ffi_module()
    if mod is None:
        raise ImportError(f"{API} on a GPU needs the XLA FFI handler, which is built only when jaxlib is "
                          f"importable at install time: pip install --no-build-isolation -e . with jax installed")
    with _register_lock:
        if not _registered:
            jax.ffi.register_ffi_target(TARGET, mod.handler(), platform="CUDA")
            _registered = True
    return mod


def check_faults() -> None:
    """Raise `bridge.KernelFault` for a run-time bounds fault recorded by a kernel launched through
    kernel_call on the GPU (and clear it). JAX offers no hook at its synchronisation: call this after
    `jax.block_until_ready(...)`, as `bridge.synchronize()` does for bridge launches."""
    mod = _ffi_module()
    if mod is None:
        return
    E.raise_faults(mod.take_faults())


def _tracer(jax: Any) -> type:
    """JAX's Tracer class (`jax.core.Tracer`; its private home where a release no longer exports it)."""
    t = getattr(getattr(jax, "core", None), "Tracer", None)
    if t is None:
        from jax._src.core import Tracer as t  # type: ignore[no-redef]
    return t


def _on_gpu(jax: Any, arrays: Sequence[Any]) -> bool:
    """Where the call runs: the device of concrete input arrays, else JAX's default device
    (`jax.default_device(...)`), else its default backend."""
    for a in arrays:
        if isinstance(a, jax.Array) and not isinstance(a, _tracer(jax)):
            try:
                return next(iter(a.devices())).platform in ("gpu", "cuda")
            except (AttributeError, StopIteration, RuntimeError):
                break
    dev = jax.config.jax_default_device
    if dev is not None:
        platform = dev if isinstance(dev, str) else getattr(dev, "platform", "")
        return platform in ("gpu", "cuda")
    return jax.default_backend() in ("gpu", "cuda")


class KernelCall:
    """`kernel_call(...)`'s result: call it with the op's inputs (JAX arrays and concrete scalars)."""

    def __init__(self, plan: OpPlan) -> None:
        self.plan = plan
        self._entries: dict[tuple, int] = {}    # documented cache: call signature -> FFI launch entry id
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<dsl.jax.kernel_call {self.plan.name}>"

    # ------------------------------------------------------------------ tracing
    def _inputs(self, jax: Any, args: Sequence[Any]) -> dict[str, Any]:
        import jax.numpy as jnp
        plan = self.plan
        named = plan.split(args)
        for p in plan.inputs:
            v = named[p.name]
            if p.is_array:
                named[p.name] = v if hasattr(v, "shape") and hasattr(v, "dtype") else jnp.asarray(v)
                continue
            if isinstance(v, _tracer(jax)):
                raise E.ArgumentKindError(
                    f"{p.where(plan.name)}: a kernel scalar must be a concrete number when traced, got a traced "
                    f"value; make it static (jax.jit(..., static_argnums=...)) or bind it with static=",
                    kernel=plan.name, arg=p.index, arg_name=p.name)
            if hasattr(v, "ndim") and getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
                named[p.name] = v.item()
        return named

    def __call__(self, *args: Any) -> Any:
        jax = _jax()
        from bridge import dtypes
        plan = self.plan
        named = self._inputs(jax, args)
        facts = {}
        for p in plan.inputs:
            if p.is_array:
                v = named[p.name]
                try:
                    dt: str | None = dtypes.normalize(v.dtype, arg=p.name)
                except E.DTypeError:
                    dt = None
                facts[p.name] = (dt, LONG.get(dt or "", str(v.dtype)), tuple(v.shape))
        binding = plan.bind(facts)
        in_shapes = {n: f[2] for n, f in facts.items()}
        out_shapes = plan.output_shapes(named, in_shapes, args)
        shapes = {**in_shapes, **out_shapes}
        tiles = {p.name: plan.tile_shape(p, args) for p in plan.params if p.kind == "partition"}
        scalars = {p.name: plan.static.get(p.name, named.get(p.name)) for p in plan.params if not p.is_array}
        read = outputs_read(plan, binding, tiles, scalars)
        grid, block = plan.launch_config(args)
        call = _Call(plan, named, binding, shapes, tiles, scalars, read, grid, block, args)
        arrays = [named[p.name] for p in plan.inputs if p.is_array]
        results = self._gpu(jax, call) if _on_gpu(jax, arrays) else self._cpu(jax, call)
        results = tuple(results)
        return results[0] if len(results) == 1 else results

    # ------------------------------------------------------------------ operands / results
    @staticmethod
    def _operands(jax: Any, c: "_Call", zeros: bool) -> tuple[list[Any], dict[int, int], list[Any]]:
        """(XLA operands, input_output_aliases, result types): the input arrays in op order, then (when
        `zeros`: XLA's results start uninitialised) a zero array for each allocated output the kernel
        reads; every writable parameter is a result, aliased to its operand when it has one (in place:
        XLA copies first if the input is still used elsewhere)."""
        import jax.numpy as jnp
        plan = c.plan
        operands = [c.named[p.name] for p in plan.inputs if p.is_array]
        index = {p.name: k for k, p in enumerate(q for q in plan.inputs if q.is_array)}
        aliases: dict[int, int] = {}
        types = []
        for j, p in enumerate(plan.writable):
            dt = host_dtype(c.dtype(p))
            types.append(jax.ShapeDtypeStruct(c.shapes[p.name], dt))
            if p.name in plan.mutates:
                aliases[index[p.name]] = j
            elif zeros and p.name in c.read:
                index[p.name] = len(operands)
                aliases[len(operands)] = j
                operands.append(jnp.zeros(c.shapes[p.name], dt))
        if plan.is_foreign:                    # a null pointer parameter: a 1-byte result of its own
            from dsl.integrations._foreign import null_slots
            types += [jax.ShapeDtypeStruct((1,), np.uint8)] * null_slots(c)
        c.operand_index = index
        return operands, aliases, types

    def _cpu(self, jax: Any, c: "_Call") -> Sequence[Any]:
        c.validate_host()
        if c.plan.is_foreign and not any(isinstance(c.named[p.name], _tracer(jax)) for p in c.plan.inputs
                                         if p.is_array):
            from dsl.integrations._foreign import no_simulator
            raise no_simulator(c.plan)          # an eager call: say so now, not from inside a callback
        operands, _, types = self._operands(jax, c, zeros=False)
        types = types[:len(c.plan.writable)]

        def host(*ops: Any) -> tuple:
            return tuple(c.simulate([np.asarray(o) for o in ops]))

        return jax.pure_callback(host, tuple(types), *operands, vmap_method="sequential")

    def _gpu(self, jax: Any, c: "_Call") -> Sequence[Any]:
        mod = _register_target(jax)
        operands, aliases, types = self._operands(jax, c, zeros=True)
        key = c.key()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = c.register(mod)
        if entry < 0:                          # a tile kernel with no tiles: nothing to launch
            import jax.numpy as jnp
            return [operands[c.operand_index[p.name]] if p.name in c.operand_index
                    else jnp.zeros(t.shape, t.dtype) for p, t in zip(c.plan.writable, types)]
        call = jax.ffi.ffi_call(TARGET, tuple(types), input_output_aliases=aliases or None,
                                vmap_method="sequential")
        return call(*operands, launch_id=np.int64(entry))[:len(c.plan.writable)]


class _Call:
    """One traced call: everything known about it at trace time."""

    def __init__(self, plan: OpPlan, named: dict, binding: dict, shapes: dict, tiles: dict, scalars: dict,
                 read: frozenset, grid: Any, block: Any, inputs: Sequence[Any]) -> None:
        self.plan, self.named, self.binding, self.shapes = plan, named, binding, shapes
        self.tiles, self.scalars, self.read, self.grid, self.block = tiles, scalars, read, grid, block
        self.inputs = inputs
        self.operand_index: dict[str, int] = {}

    def dtype(self, p: Any) -> str:
        return param_dtype(self.plan, p, self.binding)  # type: ignore[return-value]

    def key(self) -> tuple:
        return (tuple(sorted((str(k), v) for k, v in self.binding.items())), tuple(sorted(self.shapes.items())),
                tuple(sorted((k, repr(v)) for k, v in self.scalars.items())), tuple(sorted(self.tiles.items())),
                repr(self.grid), repr(self.block))

    def _args(self, arrays: Mapping[str, Any]) -> list[Any]:
        from dsl import tile
        plan = self.plan
        named = {n: arrays.get(n, v) for n, v in self.named.items()}
        outs = {p.name: arrays[p.name] for p in plan.outputs}
        return plan.kernel_args(named, outs, self.inputs, partition=tile.partition)

    def standins(self) -> dict[str, np.ndarray]:
        return {p.name: standin(self.dtype(p), self.shapes[p.name]) for p in self.plan.params if p.is_array}

    # ------------------------------------------------------------------ CPU (simulator)
    def validate_host(self) -> None:
        """The simulator's checks, at trace time: a bad call is a typed error before anything runs."""
        plan = self.plan
        if plan.is_foreign:
            from dsl.integrations._foreign import validate_host
            validate_host(self)
            return
        args = self._args(self.standins())
        if plan.is_tile:
            plan.kernel.validate_host(*args)
            return
        import bridge
        from bridge import _native
        limits, attrs = sim_limits()
        contract = plan.kernel.contract(*args)
        views = [bridge.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        _native.validate(contract.native(), views, grid=self.grid, block=self.block, smem=None, limits=limits,
                         attrs=attrs)

    def simulate(self, ops: list[np.ndarray]) -> list[np.ndarray]:
        plan = self.plan
        if plan.is_foreign:
            from dsl.integrations._foreign import no_simulator
            raise no_simulator(plan)
        arrays: dict[str, np.ndarray] = {}
        for p in plan.inputs:
            if p.is_array:
                a = ops[self.operand_index[p.name]]
                arrays[p.name] = np.array(a, copy=True) if p.writable else a
        for p in plan.outputs:
            shape, dt = self.shapes[p.name], host_dtype(self.dtype(p))
            arrays[p.name] = np.zeros(shape, dt) if p.name in self.read else np.empty(shape, dt)
        args = self._args(arrays)
        if plan.is_tile:
            plan.kernel.simulate(*args)
        else:
            plan.kernel.simulate(*args, grid=self.grid, block=self.block)
        return [arrays[p.name] for p in plan.writable]

    # ------------------------------------------------------------------ GPU (FFI entry)
    def register(self, mod: Any) -> int:
        """Specialise, load and validate for this call's shapes; register the FFI launch entry."""
        import bridge
        from bridge import _driver, _native
        plan = self.plan
        if plan.is_foreign:
            from dsl.integrations._foreign import register
            return register(self, mod)
        dev = bridge.current_device()
        _driver.ensure_current(dev.ordinal)     # the fault record below is allocated in its context
        args = self._args(self.standins())
        if plan.is_tile:
            from dsl.tile.host import Partition
            if next(a.num_tiles for a in args if isinstance(a, Partition)) == 0:
                return -1                               # no tile: nothing to launch
            ck = plan.kernel.compile(tuple(args), dev.arch)
            # the grid is the validator's (grid_from: one block per tile, capped by the contract's
            # max_blocks_per_sm for persistent kernels), as for every other tile launch
            grid, block, smem = None, (ck.threads, 1, 1), ck.dynamic_smem
            params = [p for p in plan.params if p.kind != "const"]
        else:
            ck = plan.kernel.compile(*args, arch=dev.arch)
            grid, block, smem = self.grid, self.block, None
            params = list(plan.params)
        if '"cooperative":true' in ck.contract_json.replace(" ", ""):
            # the FFI handler launches with cuLaunchKernel: nothing would guarantee the co-residency a
            # grid barrier needs (PDL waits and compiled clusters work without launch attributes)
            raise E.ContractDefinitionError(f"{API}: {plan.name}: cooperative=True kernels cannot run as XLA "
                                            "custom calls yet (the FFI handler launches without the cooperative "
                                            "attribute)", kernel=plan.name)
        bk = bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json)
        descs, slots, base = [], [], 1 << 40
        writable = [p.name for p in plan.writable]
        for p in params:
            if p.is_array:
                shape = self.shapes[p.name]
                descs.append(_native.ArrayDesc(base, list(shape), None, self.dtype(p), 2, dev.ordinal, not p.writable))
                base += (int(np.prod(shape, dtype=np.int64)) * host_dtype(self.dtype(p)).itemsize + 511) // 256 * 256
                slots.append(("result", writable.index(p.name)) if p.writable
                             else ("operand", self.operand_index[p.name]))
            else:
                v = self.scalars[p.name]
                v = v.item() if isinstance(v, np.generic) else v
                descs.append(v)
                slots.append(("scalar", v))
        resolved, _ = _native.validate(bk.contract, descs, grid=grid, block=block, smem=smem, limits=dev.limits,
                                       attrs=bk.attributes)
        if plan.is_tile:
            grid = resolved
        lim, at = dev.limits, bk.attributes
        limits = {k: getattr(lim, k) for k in ("cc", "max_threads_per_block", "max_block", "max_grid",
                                              "smem_per_block", "smem_per_block_optin", "sm_count")}
        attrs = {k: getattr(at, k) for k in ("max_threads_per_block", "static_smem", "num_regs", "max_dynamic_smem")}
        return mod.register(bk.handle, _driver.primary_context(dev.ordinal), dev.ordinal, ck.contract_json,
                            limits, attrs, _dims(grid, 0), _dims(block, 0), -1 if smem is None else smem, slots)


def _dims(v: Any, fill: int) -> tuple[int, int, int]:
    if v is None:
        return (fill, fill, fill)
    t = (v,) if isinstance(v, int) else tuple(v)
    return tuple(t) + (1,) * (3 - len(t))  # type: ignore[return-value]


def kernel_call(kernel: Any, *, mutates: Sequence[str] | str | None = None,
                out_shapes: Mapping[str, Any] | None = None, out_dtypes: Mapping[str, Any] | None = None,
                static: Mapping[str, Any] | None = None, grid: Any = None, block: Any = None,
                tiles: Mapping[str, Any] | None = None, backward: Any = None,
                backward_options: Mapping[str, Any] | None = None) -> Any:
    """`kernel` as a JAX operation: `kernel_call(k, ...)(*inputs)` returns the kernel's writable arrays
    (one array, or a tuple in parameter order), under `jax.jit` or eagerly.

    Inputs are the kernel's read-only arrays, the writable ones named in `mutates` (their new values are
    returned; JAX arrays are immutable) and its scalars not bound by `static` (concrete numbers), in
    the kernel's order. Outputs' shapes come from the contract's relations or `out_shapes`; `tiles`,
    `grid`, `block` as for dsl.torch.custom_op (values or callables of the inputs). `backward`: a
    callable `(saved, *cotangents)` or a kernel bound by parameter names, making the call
    differentiable with `jax.grad` (dsl/integrations/jax_vjp.py).
    """
    _jax()
    call = KernelCall(OpPlan(kernel, API, mutates=mutates, out_shapes=out_shapes, out_dtypes=out_dtypes,
                             static=static, grid=grid, block=block, tiles=tiles))
    if backward is None:
        if backward_options:
            raise ValueError(f"{API}: {call.plan.name}: backward_options= needs backward=")
        return call
    from dsl.integrations.jax_vjp import Differentiable
    return Differentiable(call, backward, backward_options, kernel_call)
