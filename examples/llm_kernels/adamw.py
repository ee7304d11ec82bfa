"""DSL port of cpp/kernels/llm/adamw.cu: the AdamW update of a GPT-2 step, one element a thread.

Started with `python -m dsl port cpp/kernels/llm/adamw.cu --kernel adamw_update`: `n` is dropped (it
is len(params)); the hyperparameters stay scalars in the C++ order. The body is the C++ one: the
moments through fma (`beta1 m + (1 - beta1) g` as fma(beta1, m - g, g)), the bias corrections from
powf, params, m and v written at the thread's own index (read-write slices). No `unsafe`.
"""
from __future__ import annotations

from dsl import f32, i32, simt


@simt.kernel(launch_bounds=512, min_cc=80,
             requires=["len(m) == len(params)", "len(v) == len(params)", "len(grads) == len(params)", "t >= 1"])
def adamw_update(params: simt.DisjointSlice[f32], m: simt.DisjointSlice[f32], v: simt.DisjointSlice[f32],
                 grads: simt.Array[f32], lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32,
                 grad_scale: f32, t: i32):
    i = simt.thread.index_1d()
    if i < len(params):
        correction1 = f32(1.0) - simt.pow(beta1, f32(t))
        correction2 = f32(1.0) - simt.pow(beta2, f32(t))
        g = grads[i] * grad_scale
        mi = simt.fma(beta1, m[i] - g, g)
        vi = simt.fma(beta2, v[i] - g * g, g * g)
        m[i] = mi
        v[i] = vi
        p = params[i]
        mhat = mi / correction1
        vhat = vi / correction2
        params[i] = p - lr * (mhat / (simt.sqrt(vhat) + eps) + weight_decay * p)
