"""`@simt.kernel` and `@simt.device`: the decorated objects users call.

Launch path: the first call for an argument signature goes through the native Dispatcher's miss
callback → `signature_of` → `dsl.compiler.compile_kernel` → `bridge.kernel_from_ptx` → its Launcher,
which the Dispatcher keeps; later calls with the same signature never leave C++. With `KB_SIMULATE=1`
in the environment every call runs on the CPU simulator instead (host arrays, GPU semantics).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

from dsl.no_device import add_simulate_hint
from dsl.observe import specialised
from dsl.once import fill_once, new_lock
from dsl.options import KernelOptions, OptionError, check_export, check_symbol_names, simt_options
from bridge.kernel import launch_options
from dsl.runmode import _ENV_DATA, _SIM_KEY, simulating
from dsl.simt.signature import signature_of

if TYPE_CHECKING:
    from dsl.backend.inspect import KernelInfo


def _param_names(f: Callable) -> tuple[str, ...] | None:
    """Positional parameter names from the code object (no source needed); None for other callables."""
    code = getattr(f, "__code__", None)
    return tuple(code.co_varnames[:code.co_argcount]) if code is not None else None


class SimtKernel:
    """A SIMT kernel: call it like a function with arrays; it specialises per argument signature."""

    def __init__(self, pyfunc: Callable, options: KernelOptions) -> None:
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.options = options
        self._anns: list | None = None
        # documented caches: per-signature IR / compiled code, and the native dispatcher; filled once
        # per key whichever threads ask (dsl/once.py)
        self._ir: dict[tuple, Any] = {}
        self._compiled: dict[tuple, Any] = {}
        self._fill_lock = new_lock()
        self._dispatcher: Any = None
        self._fast: Any = None            # the dispatcher's fastcall (`k(*args)` without keywords)
        self._sim_launchers: dict[int, tuple[Any, Any]] = {}   # id(IR function) -> (function, validator)

    # ------------------------------------------------------------------ signatures and IR
    @property
    def annotations(self) -> list:
        """What each parameter declares (dsl/annotations.py: no front end import, so the first launch
        in a fresh process with a warm cache stays on the light path)."""
        if self._anns is None:
            from dsl.annotations import parse_annotations
            self._anns = parse_annotations(self.pyfunc, "simt", "kernel")
        return self._anns

    def signature(self, *args: Any) -> list:
        """The IR signature these arguments select (NumPy arrays/scalars may stand for types)."""
        return signature_of(self.__name__, self.annotations, args)

    def build(self, *args: Any) -> Any:
        """The typed IR Function for these arguments (cached per signature)."""
        return self._ir_for(tuple(self.signature(*args)))

    def _ir_for(self, sig: tuple) -> Any:
        """The typed IR of signature `sig`, built once whichever threads ask (dsl/once.py)."""
        def make() -> Any:
            from dsl.frontend import build_ir
            return build_ir(self.pyfunc, list(sig), self.options)
        return fill_once(self._ir, sig, self._fill_lock, make)

    def ir(self, *args: Any) -> str:
        """The typed IR for these arguments as text (returned, not printed; like `ptx()`)."""
        from dsl.ir.printer import format_function
        return format_function(self.build(*args))

    def compile(self, *args: Any, arch: str = "sm_90") -> Any:
        """The CompiledKernel (PTX, name, contract JSON) for these arguments and `arch`."""
        sig = tuple(self.signature(*args))

        def make() -> Any:
            from dsl.compiler import compile_kernel
            return compile_kernel(self.pyfunc, list(sig), self.options, arch)
        return fill_once(self._compiled, (sig, arch), self._fill_lock, make)

    def ptx(self, *args: Any, arch: str = "sm_90") -> str:
        return self.compile(*args, arch=arch).ptx

    def contract(self, *args: Any) -> Any:
        from dsl.frontend import contract_for
        return contract_for(self.build(*args), self.options)

    def inspect(self, *args: Any, arch: str = "sm_90") -> KernelInfo:
        """Registers, spills and shared memory (`ptxas -v`), the contract, and SASS when available:
        a KernelInfo (`print(info)` for a short report)."""
        from dsl.backend.inspect import inspect_ptx
        ck = self.compile(*args, arch=arch)
        return inspect_ptx(self.__name__, ck.name, ck.ptx, ck.contract_json, ck.metadata, arch)

    # ------------------------------------------------------------------ simulation
    def simulate(self, *args: Any, grid: Any = None, block: Any = None, shared_mem: int = 0) -> None:
        """Run on the CPU simulator with NumPy arrays (modified in place), GPU semantics.

        The arguments and the launch configuration go through the same contract validator as a GPU
        launch (with host memory standing in for device memory), so a bad call raises the same error
        on both, and the grid and block are the ones a GPU launch would use.
        """
        from dsl import sim
        fn = self.build(*args)
        g, b, smem, skip = self._sim_validator(fn).validate_only(
            args, grid=grid, block=block, shared_mem=(shared_mem or None))
        if not skip:
            sim.run(fn, list(args), g, b, smem)

    def _sim_validator(self, fn: Any) -> Any:
        """A driver-less native Launcher over `fn`'s contract with simulator limits (cached per IR)."""
        def make() -> tuple:
            from dsl.frontend import contract_for
            from dsl.sim.validator import host_launcher
            return fn, host_launcher(contract_for(fn, self.options).to_json(), fn.name)
        hit = fill_once(self._sim_launchers, id(fn), self._fill_lock, make)
        if hit[0] is not fn:          # the id of an IR object no longer alive: made anew
            with self._fill_lock:
                hit = self._sim_launchers[id(fn)] = make()
        return hit[1]

    # ------------------------------------------------------------------ launches
    def _miss(self, args: tuple, device: int | None = None) -> Any:
        """Dispatcher miss: specialise for these arguments on the launch's device (its arch) and return
        that device's native Launcher."""
        import bridge
        try:
            dev = bridge.Device(device) if device is not None else bridge.current_device()
        except bridge.NoDeviceError as exc:
            add_simulate_hint(exc, self.__name__, " (and grid=/block= where the call has them)")     # same error, with how to run it without a GPU
            raise
        ck = self.compile(*args, arch=dev.arch)
        specialised(self, self.__name__, self.signature(*args), ck.metadata.get("arch"))   # dsl/observe.py
        return bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json, device=dev.ordinal).launcher

    @property
    def dispatcher(self) -> Any:
        if self._dispatcher is None:
            from bridge import _native
            self._dispatcher = _native.Dispatcher(self._miss, pass_device=True)   # the device is in the key
        return self._dispatcher

    def __call__(self, *args: Any, **kw: Any) -> None:
        """`k(*args, grid=, block=, shared_mem=, stream=)`. Without keywords (and without KB_SIMULATE)
        this is one C call: the dispatcher's fastcall, on this call's own argument tuple (the launcher
        recognises temporaries by their reference counts, so no wrapper level may be added)."""
        if not kw and _SIM_KEY not in _ENV_DATA:
            (self._fast or self._fastcall())(*args)
            return
        grid, block, shared_mem, stream = launch_options(self.__name__, kw)
        if simulating():
            self.simulate(*args, grid=grid, block=block, shared_mem=shared_mem or 0)
            return
        d = self._dispatcher or self.dispatcher
        d(*args, grid=grid, block=block, shared_mem=shared_mem or None, stream=stream)

    def _fastcall(self) -> Any:
        self._fast = self.dispatcher.fastcall
        return self._fast

    def launch(self, *args: Any, grid: Any = None, block: Any = None, stream: Any = None,
               shared_mem: int = 0) -> None:
        self(*args, grid=grid, block=block, shared_mem=shared_mem, stream=stream)

    def __getitem__(self, config: Any) -> Callable[..., None]:
        """`k[grid, block]`, `k[grid, block, stream]`, `k[grid, block, stream, shared_mem]`."""
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise TypeError("use kernel[grid, block], kernel[grid, block, stream] or "
                            "kernel[grid, block, stream, shared_mem]")
        grid, block = config[0], config[1]
        smem = config[3] if len(config) > 3 else 0
        if simulating():
            return lambda *args: self.simulate(*args, grid=grid, block=block, shared_mem=smem)
        return self.dispatcher[config]

    def __repr__(self) -> str:
        return f"<simt.kernel {self.__qualname__}>"

    def _dsl_call_(self, lowerer: Any, node: Any) -> Any:
        """Named in a call inside a kernel (the front end's call protocol): refused at the call."""
        lowerer.err(node.func, f"kernel '{self.__name__}' cannot be called from a kernel",
                    "make the shared code a @simt.device function")

    # ------------------------------------------------------------------ contract hook (bridge.testing)
    def launch_contract(self, *, dtypes: Any = None, layout: str = "any") -> Any:
        """The LaunchContract of the specialisation for a stated dtype choice, without arrays: every
        array of any strides (`layout="C"`: C-contiguous) and no alignment promise, so it is the most
        general contract of this kernel. `dtypes` binds generic dtypes: {"T": f32} or {"T": "f32"}
        (TypeVar name -> dtype). Used by bridge.testing to generate launches."""
        from dsl.frontend.contract import contract_for
        from dsl.ir.types import ArrayType
        from dsl.types import ir_scalar_from_dtype
        chosen = dict(dtypes or {})
        sig = []
        for ann in self.annotations:
            dt = ann.dtype
            if ann.is_generic:
                name = getattr(dt, "__name__", None) or getattr(dt, "name", None)
                if name not in chosen:
                    raise TypeError(f"{self.__name__}: parameter '{ann.name}' has the generic dtype "
                                    f"{name}: give dtypes={{{name!r}: ...}}")
                dt = ir_scalar_from_dtype(chosen[name])
                if dt is None:
                    raise TypeError(f"{self.__name__}: dtypes[{name!r}]: not a DSL dtype: {chosen[name]!r}")
            sig.append(ArrayType(dt, ann.ndim, ann.writable, layout, False, optional=ann.optional)
                       if ann.kind == "array" else dt)
        return contract_for(self._ir_for(tuple(sig)), self.options)


class DeviceFunction:
    """A `@simt.device` function: callable from kernels and other device functions (inlined)."""

    def __init__(self, pyfunc: Callable, export: str | None = None) -> None:
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.export = export

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"@simt.device function '{self.__name__}' can only be called from a "
                           "@simt.kernel or another @simt.device function")

    def __repr__(self) -> str:
        return f"<simt.device {self.__qualname__}>"

    def _dsl_call_(self, lowerer: Any, node: Any) -> Any:
        """Called inside a kernel or device function (the front end's call protocol): inlined there."""
        return lowerer.call_device(self, node)


def kernel(fn: Callable | None = None, *, block: int | Sequence[int] | None = None,
           launch_bounds: int | None = None, domain: int = 1, shared_mem: Any = 0, min_cc: int = 0,
           requires: Sequence[str] = (), inplace: Sequence[Sequence[str]] = (),
           boundscheck: bool = True, fastmath: bool = False, ftz: bool = False, grid_from: str | None = None,
           lineinfo: bool | None = None, pdl: bool = False, cooperative: bool = False,
           cluster: int | Sequence[int] | None = None, cluster_nonportable: bool = False) -> Any:
    """Declare a SIMT kernel and its launch contract. Usable as `@simt.kernel` or `@simt.kernel(...)`.

    The options are checked when the function is decorated: a bad one is a DslCompileError at the
    `def` (never something LLVM sees). `grid_from=` names the array a launch without `grid=` derives
    its grid from; without it the grid is derived only from the DisjointSlice the kernel writes at its
    ThreadIndex (docs/dsl.md, "Grids"). `lineinfo=` (default: on unless `KB_LINEINFO=0`) puts the
    Python file:line of every statement into the PTX for profilers and sanitizers ("Line info").
    `pdl=`, `cooperative=`, `cluster=` (and `cluster_nonportable=`) are the launch features of the
    contract (docs/dsl.md, "Launch features"): a programmatic dependent launch that waits for its
    predecessor in `simt.pdl.wait()` (at entry unless called), a cooperative grid that may call
    `simt.grid.sync()`, a thread-block cluster whose blocks share `simt.cluster.*`. `ftz=True` flushes
    f32 denormal inputs and results to zero, as nvcc's -ftz=true (`exp2` is one ex2.approx.ftz, add,
    mul and fma take their .ftz forms); `fastmath=True` implies it, as nvcc's --use_fast_math and
    numba's fastmath=True do."""
    given = dict(block=block, launch_bounds=launch_bounds, domain=domain, shared_mem=shared_mem,
                 min_cc=min_cc, requires=requires, inplace=inplace, boundscheck=boundscheck,
                 fastmath=fastmath, ftz=ftz, grid_from=grid_from, lineinfo=lineinfo, pdl=pdl, cooperative=cooperative,
                 cluster=cluster, cluster_nonportable=cluster_nonportable)

    def wrap(f: Callable) -> SimtKernel:
        if not callable(f):
            raise TypeError(f"@simt.kernel decorates a function, got {f!r}")
        try:
            check_symbol_names(f)
            options = simt_options(_param_names(f), **given)
        except OptionError as err:
            from dsl.frontend.decorator import raise_option_error
            raise_option_error(f, "simt.kernel", err)
        if options.grid_from is not None:
            from dsl.frontend.decorator import check_grid_from
            check_grid_from(f, options)
        return SimtKernel(f, options)

    return wrap(fn) if fn is not None else wrap


def device(fn: Callable | None = None, *, export: str | None = None) -> Any:
    """Declare a device function (callable from kernels). `export=` names a C symbol for C++ use
    (checked at the `def`: it must be a C identifier)."""
    def wrap(f: Callable) -> DeviceFunction:
        try:
            name = check_export(export)
        except OptionError as err:
            from dsl.frontend.decorator import raise_option_error
            raise_option_error(f, "simt.device", err)
        return DeviceFunction(f, name)
    return wrap(fn) if fn is not None else wrap
