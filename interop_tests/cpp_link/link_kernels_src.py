"""DSL side of the linking tests: a kernel calling C++, and a device function exported to C++."""
from pathlib import Path

from dsl import f32, simt

HERE = Path(__file__).resolve().parent
CPP = HERE / "cpp_device.cu"
CPP_USER = HERE / "cpp_softclip_user.cu"

cpp_affine = simt.extern_device("cpp_affine", "f32(f32, f32, f32)", link=[CPP])


@simt.kernel(requires=["len(x) == len(out)"])
def affine_via_cpp(x: simt.Array[f32], a: f32, b: f32, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = cpp_affine(x[i], a, b)


@simt.device(export="dsl_softclip")
def softclip(v: f32, limit: f32) -> f32:
    if v > limit:
        return limit + (v - limit) * f32(0.125)
    if v < -limit:
        return -limit + (v + limit) * f32(0.125)
    return v
