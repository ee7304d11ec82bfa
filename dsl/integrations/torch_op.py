"""`dsl.torch.custom_op("ns::name", kernel, ...)`: a SIMT or tile kernel (or a bridge / bridge.foreign kernel:
_foreign.py) as a `torch.library` custom op.

Why generated: a hand-written op repeats what the kernel's contract already says (which parameters are
written, how output shapes follow from inputs) in four places: the schema, the fake implementation,
the allocation and the launch. Here all four come from one `OpPlan` (dsl/integrations/_plan.py), so
`torch.compile(fullgraph=True)` traces the op through its fake implementation without a graph break,
and the real implementation launches on torch's current stream (CUDA) or runs the kernel on the CPU
simulator (CPU tensors). See docs/integrations.md.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Sequence

from bridge import errors as E
from dsl.integrations._kernels import outputs_read
from dsl.integrations._plan import LONG, OpPlan, Param

API = "dsl.torch.custom_op"


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:     # optional extra: pip install kernelbridge[torch]
        raise ImportError(f"{API} needs PyTorch (pip install 'kernelbridge[torch]'): {exc}") from None
    return torch


def _schema_type(p: Param) -> str:
    if p.is_array:
        return "Tensor"
    d = p.dtype
    if isinstance(d, str):
        return "float" if d.startswith(("f", "bf")) else "bool" if d == "bool" else "int"
    return "Scalar"            # generic (TypeVar) scalar: int or float, bound by the arrays


def schema_of(plan: OpPlan) -> str:
    """The op's schema: inputs in kernel order (mutated arrays as `Tensor(aK!)`), outputs as returns."""
    parts, alias = [], 0
    for p in plan.inputs:
        t = _schema_type(p)
        if p.name in plan.mutates:
            t = f"Tensor(a{alias}!)"
            alias += 1
        parts.append(f"{t} {p.name}")
    n = len(plan.outputs)
    ret = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"({', '.join(parts)}) -> {ret}"


def _facts(torch: Any, plan: OpPlan, named: Mapping[str, Any]) -> dict[str, tuple]:
    from bridge import dtypes
    out = {}
    for p in plan.inputs:
        if not p.is_array:
            continue
        t = named[p.name]
        text = str(t.dtype).replace("torch.", "")
        try:
            name: str | None = dtypes.normalize(t.dtype, arg=p.name)
        except E.DTypeError:
            name = None
        out[p.name] = (name, LONG.get(name or "", text), tuple(t.shape))
    return out


def _device(torch: Any, plan: OpPlan, named: Mapping[str, Any]) -> Any:
    """The device of the op's tensors (all must agree); torch's default device when there are none."""
    dev = None
    for p in plan.inputs:
        if not p.is_array:
            continue
        d = named[p.name].device
        if dev is None:
            dev = d
        elif d != dev:
            raise E.DeviceMismatchError(f"{p.where(plan.name)}: expected a tensor on {dev} (like the earlier "
                                        f"tensor arguments), got one on {d}", kernel=plan.name, arg=p.index,
                                        arg_name=p.name)
    return dev if dev is not None else torch.get_default_device()


def _prepare(torch: Any, plan: OpPlan, args: Sequence[Any]) -> tuple[dict, dict, Any, dict, dict]:
    """(inputs by name, type bindings, device, output shapes, output dtypes) of one call, checked."""
    named = plan.split(args)
    binding = plan.bind(_facts(torch, plan, named))
    device = _device(torch, plan, named)
    shapes = plan.output_shapes(named, {p.name: tuple(named[p.name].shape) for p in plan.inputs if p.is_array},
                                args)
    from bridge import dtypes
    tdt = {p.name: dtypes.to_torch(plan.output_dtype(p, binding)) for p in plan.outputs}
    return named, binding, device, shapes, tdt


def _returns(plan: OpPlan, outputs: Mapping[str, Any]) -> Any:
    outs = tuple(outputs[p.name] for p in plan.outputs)
    return None if not outs else outs[0] if len(outs) == 1 else outs


class _Fake:
    """The fake (meta) implementation: the same checks and shape rules, no kernel."""

    def __init__(self, plan: OpPlan) -> None:
        self.plan = plan

    def __call__(self, *args: Any) -> Any:
        torch = _torch()
        named, _, device, shapes, tdt = _prepare(torch, self.plan, args)
        return _returns(self.plan, {n: torch.empty(shapes[n], dtype=tdt[n], device=device) for n in shapes})


class _Impl:
    """The real implementation: allocate outputs, then launch (CUDA) or simulate (CPU)."""

    def __init__(self, plan: OpPlan) -> None:
        self.plan = plan

    def __call__(self, *args: Any) -> Any:
        torch = _torch()
        plan = self.plan
        named, binding, device, shapes, tdt = _prepare(torch, plan, args)
        tiles = {p.name: plan.tile_shape(p, args) for p in plan.params if p.kind == "partition"}
        scalars = {p.name: plan.static.get(p.name, named.get(p.name)) for p in plan.params if not p.is_array}
        zero = outputs_read(plan, binding, tiles, scalars)
        outputs = {n: (torch.zeros if n in zero else torch.empty)(shapes[n], dtype=tdt[n], device=device)
                   for n in shapes}
        # detached views share storage (in-place writes land in the caller's tensor) and carry no autograd
        arrays = {n: (v.detach() if isinstance(v, torch.Tensor) else v) for n, v in named.items()}
        if device.type == "cuda":
            _launch_cuda(torch, plan, arrays, outputs, args, device)
        elif device.type == "cpu":
            _simulate(torch, plan, arrays, outputs, args)
        else:
            raise E.DeviceMismatchError(f"{plan.name}: tensors on {device}: kernels run on CUDA devices and, "
                                        f"through the simulator, on the CPU", kernel=plan.name)
        return _returns(plan, outputs)


def _host(torch: Any, t: Any) -> Any:
    """A NumPy view (no copy) of a CPU tensor; bfloat16 through its bits."""
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.resolve_conj().resolve_neg().numpy()


def _simulate(torch: Any, plan: OpPlan, named: dict, outputs: dict, inputs: Sequence[Any]) -> None:
    from dsl import tile
    if plan.is_foreign:
        from dsl.integrations._foreign import no_simulator
        raise no_simulator(plan)
    host_in = {n: _host(torch, v) if isinstance(v, torch.Tensor) else v for n, v in named.items()}
    host_out = {n: _host(torch, v) for n, v in outputs.items()}
    args = plan.kernel_args(host_in, host_out, inputs, partition=tile.partition)
    if plan.is_tile:
        plan.kernel.simulate(*args)
    else:
        grid, block = plan.launch_config(inputs)
        plan.kernel.simulate(*args, grid=grid, block=block)


def _extent(t: Any) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    lo = hi = t.data_ptr()
    for n, s in zip(t.shape, t.stride()):
        span = (n - 1) * s * t.element_size()
        lo, hi = (lo + span, hi) if span < 0 else (lo, hi + span)
    return lo, hi + t.element_size()


@contextlib.contextmanager
def _capture_guard(torch: Any, tensors: Sequence[Any]) -> Iterator[None]:
    """Inside a torch CUDA-graph capture: launch in the RELAXED capture mode and keep the captured
    launch out of the bridge's memory log.

    Why: torch captures in "global" mode, where event queries (the bridge polls its keep-alive list
    and prunes its log with them) invalidate the capture; and the log would otherwise wait on events
    recorded outside the capture, or remember events recorded inside it, which no stream may wait on
    later. torch synchronises the device when a capture begins, so the history of these bytes is
    complete work; the graph's replays are ordered by torch's stream semantics, as for torch's ops.
    """
    if not torch.cuda.is_current_stream_capturing():
        yield
        return
    from bridge import _driver, _native
    ranges = [r for r in (_extent(t) for t in tensors) if r is not None]
    for lo, hi in ranges:
        _native.forget_range(lo, hi)
    relaxed = _driver.raw().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    previous = _driver.call("cuThreadExchangeStreamCaptureMode", relaxed)
    try:
        yield
    finally:
        _driver.call("cuThreadExchangeStreamCaptureMode", previous)
        for lo, hi in ranges:
            _native.forget_range(lo, hi)


@contextlib.contextmanager
def launching(*tensors: Any) -> Iterator[Any]:
    """For a hand-written torch op that launches several kernels: yields the bridge Stream of torch's
    current stream on the tensors' (CUDA) device, with the capture guard around the block, so launches
    inside are ordered like torch's ops and can be captured in torch's CUDA graphs (as custom_op's are)."""
    torch = _torch()
    import bridge
    cuda = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda]
    if not cuda:
        raise ValueError(f"dsl.torch.launching: expected CUDA tensors, got {[type(t).__name__ for t in tensors]}")
    with _capture_guard(torch, cuda):
        yield bridge.Stream(torch.cuda.current_stream(cuda[0].device))


def _launch_cuda(torch: Any, plan: OpPlan, named: dict, outputs: dict, inputs: Sequence[Any], device: Any) -> None:
    import bridge
    from dsl import tile
    stream = bridge.Stream(torch.cuda.current_stream(device))
    args = plan.kernel_args(named, outputs, inputs, partition=tile.partition)
    tensors = [v for v in (*named.values(), *outputs.values()) if isinstance(v, torch.Tensor)]
    with _capture_guard(torch, tensors):
        if plan.is_tile:
            plan.kernel(*args, stream=stream)
        else:
            grid, block = plan.launch_config(inputs)
            plan.kernel(*args, grid=grid, block=block, stream=stream)


# ---------------------------------------------------------------------------------------------- autograd

def _default_setup(torch: Any, plan: OpPlan) -> tuple[Callable, Callable[[Any], None]]:
    """setup_context saving every input and output; `restore(ctx)` sets `ctx.saved` (name -> value)."""
    names = [p.name for p in plan.inputs] + [p.name for p in plan.outputs]

    def setup(ctx: Any, inputs: tuple, output: Any) -> None:
        outs = output if isinstance(output, tuple) else (output,)
        values = dict(zip(names, (*inputs, *outs)))
        tnames = [n for n, v in values.items() if isinstance(v, torch.Tensor)]
        ctx.save_for_backward(*(values[n] for n in tnames))
        ctx.kb_tensor_names = tnames
        ctx.kb_values = {n: v for n, v in values.items() if n not in tnames}

    def restore(ctx: Any) -> None:
        ctx.saved = {**ctx.kb_values, **dict(zip(ctx.kb_tensor_names, ctx.saved_tensors))}

    return setup, restore


def _kernel_backward(torch: Any, plan: OpPlan, name: str, kernel: Any,
                     options: Mapping[str, Any]) -> tuple[Callable, Callable]:
    """A backward kernel as its own custom op `name + "_backward"`, bound by parameter names
    (dsl/integrations/_backward.py)."""
    from dsl.integrations._backward import bind_backward
    bound = bind_backward(plan, kernel, options, API)
    bw_op = custom_op(f"{name}_backward", kernel, out_shapes=bound.out_shapes or None, **bound.options)
    bw_plan: OpPlan = bw_op._kb_plan
    setup, restore = _default_setup(torch, plan)

    def backward(ctx: Any, *grads: Any) -> tuple:
        restore(ctx)
        values = dict(ctx.saved)
        values.update({g: grads[k] for k, g in enumerate(bound.grads_of)})
        res = bw_op(*(values[q.name] for q in bw_plan.inputs))
        res = res if isinstance(res, tuple) else (res,)
        by_input = {q.name[5:]: r for q, r in zip(bw_plan.outputs, res)}
        return tuple(by_input.get(p.name) for p in plan.inputs)

    return setup, backward


def _register_autograd(torch: Any, op: Any, plan: OpPlan, name: str, backward: Any, setup_context: Any,
                       options: Mapping[str, Any] | None) -> None:
    from dsl.integrations._plan import kernel_params
    if plan.mutates:
        raise ValueError(f"{API}: {plan.name}: backward= is not supported for ops that mutate their inputs "
                         f"(mutates={sorted(plan.mutates)}); torch.library autograd needs a functional op")
    try:
        kernel_params(backward, API)
        is_kernel = True
    except TypeError:
        is_kernel = False
    if is_kernel:
        if setup_context is not None:
            raise ValueError(f"{API}: {plan.name}: setup_context= goes with a Python backward; a backward "
                             f"kernel binds what it needs by parameter name")
        setup, bw = _kernel_backward(torch, plan, name, backward, options or {})
    elif callable(backward):
        if options:
            raise ValueError(f"{API}: {plan.name}: backward_options= is for a backward kernel")
        if setup_context is None:
            setup, restore = _default_setup(torch, plan)

            def bw(ctx: Any, *grads: Any) -> Any:
                restore(ctx)
                return backward(ctx, *grads)
        else:
            setup, bw = setup_context, backward
    else:
        raise TypeError(f"{API}: {plan.name}: backward: expected a callable (ctx, *grads) or a "
                        f"@simt.kernel/@tile.kernel, got {type(backward).__name__}")

    def backward_all(ctx: Any, *grads: Any) -> Any:
        res = bw(ctx, *grads)
        return res if isinstance(res, tuple) else (res,)

    op.register_autograd(backward_all, setup_context=setup)


def custom_op(name: str, kernel: Any, *, mutates: Sequence[str] | str | None = None,
              out_shapes: Mapping[str, Any] | None = None, out_dtypes: Mapping[str, Any] | None = None,
              static: Mapping[str, Any] | None = None, grid: Any = None, block: Any = None,
              tiles: Mapping[str, Any] | None = None, backward: Any = None, setup_context: Any = None,
              backward_options: Mapping[str, Any] | None = None) -> Any:
    """Define the torch custom op `name` ("namespace::op") that runs `kernel`; returns it
    (`torch.library.CustomOpDef`: call it, or use `torch.ops.namespace.op`).

    Op inputs are the kernel's read-only arrays, the writable ones named in `mutates` (written in
    place) and its scalars not bound by `static`, in the kernel's order; the other writable arrays are
    allocated and returned. `out_shapes`/`out_dtypes`/`tiles`/`grid`/`block` take values or callables
    of the op's inputs. `backward`: a callable `(ctx, *grads)` (with `ctx.saved`: inputs and outputs
    by name) or a kernel bound by parameter names (docs/integrations.md).
    """
    torch = _torch()
    plan = OpPlan(kernel, API, mutates=mutates, out_shapes=out_shapes, out_dtypes=out_dtypes, static=static,
                  grid=grid, block=block, tiles=tiles)
    mutated = tuple(p.name for p in plan.inputs if p.name in plan.mutates)
    op = torch.library.custom_op(name, _Impl(plan), mutates_args=mutated, schema=schema_of(plan))
    op.register_fake(_Fake(plan))
    op._kb_plan = plan
    if backward is not None:
        _register_autograd(torch, op, plan, name, backward, setup_context, backward_options)
    elif setup_context is not None or backward_options:
        raise ValueError(f"{API}: {plan.name}: setup_context=/backward_options= need backward=")
    return op
