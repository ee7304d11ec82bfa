"""A DSL kernel as a PyTorch custom op, generated from its contract by `dsl.torch.custom_op`: used inside
an ordinary torch function, traced by `torch.compile(fullgraph=True)` without a graph break, captured
into a CUDA graph, differentiated through a backward kernel, and launched on torch's CURRENT stream.

    python examples/torch_custom_op.py

The op is SiLU, x * sigmoid(x), computed by a `@simt.kernel`. The contract's relation
`x.shape == out.shape` gives the output's shape (for the real and the fake implementation alike); the
backward kernel is bound by parameter names (x, grad_out -> grad_x). Launches go on
`bridge.Stream(torch.cuda.current_stream())`, so they are ordered with the torch ops around them on any
stream torch is using (here a side stream), without a host synchronisation.
"""
import argparse
import sys

import bridge
import dsl
from dsl import TypeVar, simt

T = TypeVar("T")


@simt.kernel(block=256, requires=["x.shape == out.shape"])
def silu_kernel(x: simt.Array[T], out: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    out[i] = x[i] / (T(1) + simt.exp(-x[i]))


@simt.kernel(block=256, requires=["x.shape == grad_x.shape", "grad_out.shape == grad_x.shape"])
def silu_grad_kernel(x: simt.Array[T], grad_out: simt.Array[T], grad_x: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    # d/dx x*sig(x) = sig(x) * (1 + x * (1 - sig(x)))
    grad_x[i] = grad_out[i] * (T(1) + x[i] * (T(1) - T(1) / (T(1) + simt.exp(-x[i])))) / (T(1) + simt.exp(-x[i]))


def register():
    """`kernelbridge_example::silu`: schema, fake, CPU/CUDA implementations and autograd, all generated."""
    return dsl.torch.custom_op("kernelbridge_example::silu", silu_kernel, backward=silu_grad_kernel)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"torch_custom_op needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False      # exact f32 matmuls on both sides of the check
    op = register()
    silu = lambda t: op(t.reshape(-1)).reshape(t.shape)   # the kernel is 1-D; views are free
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

    explanation = torch._dynamo.explain(lambda t: mlp(t, silu))(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(lambda t: mlp(t, silu), backend="aot_eager", fullgraph=True)
    yc = compiled(x)                                     # traced through the generated fake, one graph
    torch.testing.assert_close(yc, ref, rtol=1e-4, atol=1e-4)
    print(f"torch.compile(fullgraph=True): {explanation.graph_count} graph, "
          f"{explanation.graph_break_count} graph breaks, same result")

    static_x = x.clone()
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):                        # warm up outside the capture (compiles, loads)
        mlp(static_x, silu)
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = mlp(static_x, silu)
    static_x.copy_(torch.randn(513, 300, device="cuda", generator=gen))
    graph.replay()
    torch.testing.assert_close(static_y, mlp(static_x, F.silu), rtol=1e-4, atol=1e-4)
    print("CUDA graph: captured with the op inside, replayed on new input, same result as F.silu")

    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    mlp(xg, silu).square().sum().backward()              # backward: the generated op of silu_grad_kernel
    mlp(xr, F.silu).square().sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-4, atol=1e-4)
    print("autograd: gradients through the backward kernel match F.silu's")
    bridge.synchronize()                                 # would raise a recorded bridge.KernelFault
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
