"""A DSL kernel as a PyTorch custom op: `torch.library.custom_op` + `register_fake` (+ autograd), used
inside an ordinary torch function, traced by `torch.compile`, and launched on torch's CURRENT stream.

    python examples/torch_custom_op.py

The op is SiLU, x * sigmoid(x), computed by a `@simt.kernel`. Its launch goes on
`bridge.Stream(torch.cuda.current_stream())`, so it is ordered with the torch ops around it on any
stream torch is using (here a side stream), without a host synchronisation.
"""
import argparse
import sys

import bridge
from dsl import f32, simt


@simt.kernel(block=256, requires=["len(x) == len(out)"])
def silu_kernel(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = x[i] / (1.0 + simt.exp(-x[i]))


def register(torch):  # no `from __future__ import annotations` here: torch reads the real annotations
    """Define `kernelbridge_example::silu` (forward by the DSL kernel, fake for tracing, autograd)."""

    @torch.library.custom_op("kernelbridge_example::silu", mutates_args=())
    def silu(x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError(f"kernelbridge_example::silu: expected a float32 CUDA tensor, got {x.dtype} "
                            f"on {x.device}")
        xc = x.detach().contiguous()
        out = torch.empty_like(xc)
        silu_kernel(xc.view(-1), out.view(-1), stream=bridge.Stream(torch.cuda.current_stream(x.device)))
        return out

    @silu.register_fake
    def _(x):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 + x * (1 - s))

    silu.register_autograd(backward, setup_context=setup_context)
    return silu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"torch_custom_op needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False      # exact f32 matmuls on both sides of the check
    silu = register(torch)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(513, 300, device="cuda", generator=gen)
    w1 = torch.randn(300, 1000, device="cuda", generator=gen) / 17
    b1 = torch.randn(1000, device="cuda", generator=gen)
    w2 = torch.randn(1000, 10, device="cuda", generator=gen) / 31

    def mlp(x, act):
        """An ordinary torch function; `act` is our custom op or torch's reference."""
        return act(x @ w1 + b1) @ w2

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                       # torch's current stream is now `side`
        y = mlp(x, silu)
        ref = mlp(x, F.silu)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    print(f"forward on a side stream: torch.ops.kernelbridge_example.silu matches F.silu "
          f"(max abs diff {(y - ref).abs().max().item():.2e})")

    compiled = torch.compile(lambda t: mlp(t, silu), backend="eager", fullgraph=True)
    yc = compiled(x)                                     # traced through register_fake, one graph
    torch.testing.assert_close(yc, ref, rtol=1e-4, atol=1e-4)
    print("torch.compile(fullgraph=True): traced through the fake kernel, same result")

    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    mlp(xg, silu).square().sum().backward()
    mlp(xr, F.silu).square().sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-4, atol=1e-4)
    print("autograd: gradients match F.silu's")
    bridge.synchronize()                                 # would raise a recorded bridge.KernelFault
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
