"""DSL versions of the porting example's kernels, bit-for-bit the same arithmetic as kernels/*.cu.

Compiled ahead of time for the C++ app (`python -m dsl.aot dsl_kernels.py`) and launched directly
from Python by run_porting.py.
"""
from dsl import f32, i32, simt, u32


@simt.kernel(domain=2, block=(16, 16), requires=["img.shape == out.shape"])
def blur3x3(img: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, c = simt.thread.index_2d()
    rows = img.shape[0]
    cols = img.shape[1]
    s = f32(0)
    for dr in range(-1, 2):
        for dc in range(-1, 2):
            rr = min(max(r + dr, 0), rows - 1)
            cc = min(max(c + dc, 0), cols - 1)
            s += img[rr, cc]
    out[r, c] = s / f32(9)


@simt.kernel(block=256, requires=["len(hist) == 256"])
def histogram256(v: simt.Array[f32], hist: simt.DisjointSlice[u32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(v):
        b = min(max(i32(v[i] * f32(256)), 0), 255)
        with simt.unsafe():
            simt.atomic.add(hist, b, u32(1))


@simt.kernel(launch_bounds=256, requires=["len(v) == len(out)"])
def normalize(v: simt.Array[f32], lo: f32, hi: f32, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = min(max((v[i] - lo) / (hi - lo), f32(0)), f32(1))
