// AdamW update of a GPT-2 training step on flat f32 parameters, first and second moments m, v and
// gradients, one element per thread (grid-stride: any grid >= 1 is correct; the derived grid gives each
// thread one element). For step t >= 1 (bias corrections 1 - beta^t computed here):
//   g = grads * grad_scale             (grad_scale: e.g. the global-norm clipping factor, 1 for none)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   params -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * params)
#include "llm_common.cuh"

extern "C" __global__ void __launch_bounds__(512)
adamw_update(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
             const float* __restrict__ grads, long long n, float lr, float beta1, float beta2, float eps,
             float weight_decay, float grad_scale, int t) {
  const float correction1 = 1.0f - powf(beta1, static_cast<float>(t));
  const float correction2 = 1.0f - powf(beta2, static_cast<float>(t));
  for (long long i = kb_llm::first_chunk(1); i < n; i += kb_llm::chunk_stride(1)) {
    const float g = grads[i] * grad_scale;
    const float mi = fmaf(beta1, m[i] - g, g);          // beta1 m + (1 - beta1) g
    const float vi = fmaf(beta2, v[i] - g * g, g * g);  // beta2 v + (1 - beta2) g^2
    m[i] = mi;
    v[i] = vi;
    const float p = params[i];
    const float mhat = mi / correction1, vhat = vi / correction2;
    params[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
  }
}

KB_CONTRACT(adamw_update,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(params, f32, 1, readwrite),
                    KB_ARRAY(m, f32, 1, readwrite),
                    KB_ARRAY(v, f32, 1, readwrite),
                    KB_ARRAY(grads, f32, 1, read),
                    KB_SCALAR(n, i64),
                    KB_SCALAR(lr, f32),
                    KB_SCALAR(beta1, f32),
                    KB_SCALAR(beta2, f32),
                    KB_SCALAR(eps, f32),
                    KB_SCALAR(weight_decay, f32),
                    KB_SCALAR(grad_scale, f32),
                    KB_SCALAR(t, i32)),
            KB_REQUIRES("len(params) == n", "len(m) == n", "len(v) == n", "len(grads) == n", "t >= 1"),
            KB_GRID_FROM(params));
