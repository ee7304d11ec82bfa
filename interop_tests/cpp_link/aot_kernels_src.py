"""DSL kernels compiled ahead of time by the cpp_link tests (python -m dsl.aot)."""
from dsl import f32, i32, simt


@simt.kernel(requires=["len(x) == len(out)", "len(y) == len(out)"])
def scale_add(x: simt.Array[f32], y: simt.Array[f32], a: f32, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a * x[i] + y[i]


@simt.kernel(domain=2, block=(16, 16), requires=["img.shape[0] == out.shape[0]", "img.shape[1] == out.shape[1]"])
def clamp2d(img: simt.Array[f32, 2], lo: f32, out: simt.DisjointSlice[f32, 2]):
    r, c = simt.thread.index_2d()
    out[r, c] = max(img[r, c], lo)


@simt.kernel
def offset_i32(x: simt.Array[i32], k: i32, out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    out[i] = x[i] + k
