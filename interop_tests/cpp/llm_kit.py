"""The GPT-2 training-step kernels of cpp/kernels/llm/ for tests and benchmarks: NumPy float64
references written from the math (never from the kernels), and a loader that takes the installed
module, or compiles the family from source for this GPU when the package was built before it existed.
"""
from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "cpp" / "kernels" / "llm"
EPS = 1e-5                                  # layernorm epsilon of the kernels (GPT-2's)
GELU_SCALE = math.sqrt(2.0 / math.pi)
GELU_CUBE = 0.044715


def family_sources() -> dict[str, Path]:
    """Module name (llm_<family>) -> its source file, for every cpp/kernels/llm/*.cu."""
    return {f"llm_{p.stem}": p for p in sorted(SOURCES.glob("*.cu"))}


def nvcc_command(nvcc: str, source: Path, out: Path, archs: tuple[int, ...] = (80, 90)) -> list[str]:
    """The package build's nvcc line (cpp/cmake/kernelbridge.cmake): a fatbin with SASS per arch and
    PTX of the highest, plus ptxas's resource report (-Xptxas -v)."""
    import bridge
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    gencode.append(f"-gencode=arch=compute_{max(archs)},code=compute_{max(archs)}")
    return [nvcc, "-fatbin", "-O3", "-std=c++17", f"-I{bridge.cpp_kernels.include_dir()}", *gencode,
            "-Xptxas", "-v", str(source), "-o", str(out)]


_LOADED: dict[str, Any] = {}                # module name -> bridge module (this process)


def _compiled_from_source(module: str) -> Any:
    """Compile one family for this GPU (nvcc -cubin) and load it with its embedded contracts."""
    import bridge
    from bridge.toolkit import locate
    nvcc = locate("nvcc").path or shutil.which("nvcc")
    if not nvcc:
        raise FileNotFoundError(f"{module} is not installed and no nvcc was found to build it from "
                                f"{family_sources()[module]}")
    arch = bridge.current_device().arch
    with tempfile.TemporaryDirectory(prefix=f"kb_{module}_") as tmp:
        out = Path(tmp) / f"{module}.cubin"
        cmd = [nvcc, "-cubin", "-O3", "-std=c++17", f"-arch={arch}", f"-I{bridge.cpp_kernels.include_dir()}",
               str(family_sources()[module]), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed for {module} ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
        return bridge.load_module(out.read_bytes(), name=module)


def load_module(module: str) -> tuple[Any, str]:
    """(module, where from): the installed llm_<family> fatbin, else the family built from source."""
    import bridge
    if module not in _LOADED:
        try:
            _LOADED[module] = (bridge.cpp_kernels.load(module), "installed")
        except bridge.cpp_kernels.CppKernelsMissing:
            _LOADED[module] = (_compiled_from_source(module), "built from source (package predates it)")
    return _LOADED[module]


def kernel(name: str) -> Any:
    """The bridge kernel `name` (e.g. "layernorm_forward") from its family's module."""
    import bridge
    for module, kernels in bridge.cpp_kernels.LLM_KERNELS.items():
        if name in kernels:
            return getattr(load_module(module)[0], name)
    raise KeyError(f"{name!r} is not a cpp/kernels/llm kernel")


# ---- float64 references ---------------------------------------------------------------------------
def f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def gelu(x: Any) -> np.ndarray:
    x = f64(x)
    return 0.5 * x * (1.0 + np.tanh(GELU_SCALE * (x + GELU_CUBE * x**3)))


def gelu_grad(x: Any) -> np.ndarray:
    x = f64(x)
    t = np.tanh(GELU_SCALE * (x + GELU_CUBE * x**3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_SCALE * (1.0 + 3.0 * GELU_CUBE * x * x)


def gelu_grad_f32_error(x: Any, g: Any) -> np.ndarray:
    """A bound on the error of gelu_grad(x) * g evaluated in f32 (per element). gelu_grad is the sum
    0.5 (1 + t) + 0.5 x (1 - t^2) u'(x) with t = tanh(u) near -1 for x below about -3: 1 + t and 1 - t^2
    are then known only to a few f32 ulps of 1 (2^-24 each), so each term's error scales with 1 and with
    |x| u'(x), not with the small result they cancel to (an element at x = -4.3 was off by 2e-6)."""
    x = f64(x)
    slope = GELU_SCALE * (1.0 + 3.0 * GELU_CUBE * x * x)
    return 8 * 2.0**-24 * (1.0 + np.abs(x) * slope) * np.abs(f64(g))


def layernorm_forward(inp: Any, weight: Any, bias: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, mean, rstd) of rows of inp (N, C)."""
    x = f64(inp)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + EPS)
    out = (x - mean[:, None]) * rstd[:, None] * f64(weight) + f64(bias)
    return out, mean, rstd


def layernorm_backward(dout: Any, inp: Any, weight: Any, mean: Any, rstd: Any) -> tuple[np.ndarray, ...]:
    """(dinp, dweight, dbias) increments, from the given row statistics."""
    g, m, s = f64(dout), f64(mean)[:, None], f64(rstd)[:, None]
    xhat = (f64(inp) - m) * s
    dnorm = g * f64(weight)
    dinp = (dnorm - dnorm.mean(axis=1, keepdims=True) - xhat * (dnorm * xhat).mean(axis=1, keepdims=True)) * s
    return dinp, (xhat * g).sum(axis=0), g.sum(axis=0)


def encoder_forward(inp: np.ndarray, wte: Any, wpe: Any) -> np.ndarray:
    """(B, T, C): wte[token] + wpe[position]; NaN rows for tokens outside [0, V)."""
    V, T = wte.shape[0], inp.shape[1]
    ok = (inp >= 0) & (inp < V)
    out = f64(wte)[np.where(ok, inp, 0)] + f64(wpe)[:T][None, :, :]
    out[~ok] = np.nan
    return out


def encoder_backward(dout: Any, inp: np.ndarray, V: int, max_t: int) -> tuple[np.ndarray, np.ndarray]:
    """(dwte, dwpe) increments; tokens outside [0, V) add nothing to dwte."""
    g = f64(dout)
    B, T, C = g.shape
    dwte, dwpe = np.zeros((V, C)), np.zeros((max_t, C))
    ok = (inp >= 0) & (inp < V)
    np.add.at(dwte, inp[ok], g[ok])
    dwpe[:T] = g.sum(axis=0)
    return dwte, dwpe


def _log_softmax(logits: Any, V: int) -> np.ndarray:
    z = f64(logits)[:, :V]
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def crossentropy_forward(logits: Any, targets: np.ndarray, V: int) -> np.ndarray:
    """Per-row loss over the first V columns; NaN for a target outside [0, V)."""
    lp = _log_softmax(logits, V)
    ok = (targets >= 0) & (targets < V)
    loss = -lp[np.arange(len(targets)), np.where(ok, targets, 0)]
    return np.where(ok, loss, np.nan)


def crossentropy_backward(logits: Any, dlosses: Any, targets: np.ndarray, V: int) -> np.ndarray:
    """dlogits (N, Vp): (softmax - onehot) * dloss over V columns, 0 on the padding, NaN rows for bad targets."""
    n, vp = np.shape(logits)
    d = np.zeros((n, vp))
    p = np.exp(_log_softmax(logits, V))
    ok = (targets >= 0) & (targets < V)
    p[np.arange(n)[ok], targets[ok]] -= 1.0
    d[:, :V] = p * f64(dlosses)[:, None]
    d[~ok, :V] = np.nan
    return d


def adamw(params: Any, m: Any, v: Any, grads: Any, *, lr: float, beta1: float, beta2: float, eps: float,
          weight_decay: float, grad_scale: float, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(params, m, v) after one AdamW step t (bias-corrected)."""
    g = f64(grads) * grad_scale
    m1 = beta1 * f64(m) + (1.0 - beta1) * g
    v1 = beta2 * f64(v) + (1.0 - beta2) * g * g
    mhat, vhat = m1 / (1.0 - beta1**t), v1 / (1.0 - beta2**t)
    p = f64(params)
    return p - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p), m1, v1
