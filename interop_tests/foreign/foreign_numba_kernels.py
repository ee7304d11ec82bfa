"""numba-cuda kernels for the foreign-kernel tests. Imported only by tests that have already skipped when
numba-cuda is absent; decorating compiles nothing (bridge.foreign.numba compiles for a signature)."""
from __future__ import annotations

import numpy as np

if not hasattr(np, "row_stack"):
    # The H200 image pairs numba-cuda with NumPy 2.5, which removed `row_stack` (an alias of vstack) that
    # this numba-cuda still reads while compiling; restore the alias so the tests exercise our wrapper
    # rather than numba's NumPy support (benchmarks/_common.try_import does the same).
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402 - after the NumPy alias above

_MISSING_LIBRARY = ("DynamicLibNotFoundError", "NvvmSupportError", "NvrtcSupportError")


def compile_problem() -> str | None:
    """Why numba cannot compile here (it needs NVVM, and NVRTC for the supported architectures), or None.
    Only a library that cannot be loaded, or a NumPy too new for the installed numba-cuda (the H200
    machine's numba-cuda reads `np.row_stack`, which NumPy 2.5 removed), is a reason; any other error
    propagates."""
    try:
        cuda.compile_ptx(shout.py_func, "void(float32[::1])", cc=(9, 0))
    except Exception as exc:   # noqa: BLE001 - re-raised unless a library is missing or NumPy is too new
        numpy_too_new = isinstance(exc, AttributeError) and "module 'numpy'" in str(exc)
        if type(exc).__name__ not in _MISSING_LIBRARY and not numpy_too_new:
            raise
        import numpy
        return (f"numba-cuda cannot compile here: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                + (f" (NumPy {numpy.__version__} is newer than this numba-cuda supports)" if numpy_too_new else ""))
    return None


@cuda.jit
def saxpy(a, x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = a * x[i] + y[i]


@cuda.jit
def scale_rows(x, w, out):
    """out[i, j] = x[i, j] * w[j] + x.size, through a row view of x: numba indexes x and the view with
    the byte strides it was given, and x.size is the nitems field."""
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        row = x[i]
        out[i, j] = row[j] * w[j] + x.size


@cuda.jit
def mul_sub(u, v, out, c, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = u[i] * v[i] - c


@cuda.jit
def fill(x, s):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = s


@cuda.jit
def half_add(x, s):
    """float16 arithmetic: numba links a CUDA C++ helper for it at load time."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = x[i] + s


@cuda.jit
def shout(x):
    if cuda.grid(1) == 0:
        print(x[0])


@cuda.jit
def grid_synced(out):
    g = cuda.cg.this_grid()
    out[cuda.grid(1)] = 1.0
    g.sync()


@cuda.jit(device=True)
def twice(v):
    return 2 * v


@cuda.jit(debug=True, opt=False)
def debugged(x):
    x[0] = 1.0
