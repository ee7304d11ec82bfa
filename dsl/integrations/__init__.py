"""Framework integrations: DSL kernels as PyTorch custom ops and as JAX primitives (docs/integrations.md).

`dsl.torch.custom_op(...)` (dsl/integrations/torch_op.py) and `dsl.jax.kernel_call(...)`
(dsl/integrations/jax_call.py). Nothing here imports torch or jax until one of them is used, so
`import dsl` works without either installed.
"""
