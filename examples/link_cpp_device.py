"""Device-function linking between the DSL and CUDA C++, both ways, through nvJitLink.

1. DSL -> C++: a DSL kernel calls `cpp_gelu`, a CUDA C++ `extern "C" __device__` function, declared in
   Python with `simt.extern_device`. `dsl.link` compiles the .cu file (PTX, or LTO-IR with lto=True)
   and links it with the kernel's PTX into one cubin; the kernel keeps its launch contract.
2. C++ -> DSL: a CUDA C++ kernel calls `dsl_softsign`, a `@simt.device(export="dsl_softsign")`
   function emitted as PTX by `dsl.link.export_device`.

Without a GPU this prints the link results (cubin sizes); with one it runs both and checks NumPy.
    python examples/link_cpp_device.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dsl import f32, link, simt

HERE = Path(__file__).resolve().parent / "link_cpp"
CPP = HERE / "cpp_gelu.cu"
CPP_USER = HERE / "softsign_user.cu"

cpp_gelu = simt.extern_device("cpp_gelu", "f32(f32)", link=[CPP])


@simt.kernel(requires=["len(x) == len(out)"])
def gelu(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = cpp_gelu(x[i])


@simt.device(export="dsl_softsign")
def softsign(x: f32, k: f32) -> f32:
    return x / (f32(1) + k * abs(x))


def main() -> None:
    import argparse

    import bridge
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    n = 100_003
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(n) * 2).astype(np.float32)
    arch = "sm_90"
    if bridge.gpu_available():
        cc = bridge.current_device().cc
        arch = f"sm_{cc[0]}{cc[1]}"
    # 1. DSL kernel -> C++ device function
    lk = link.link_kernel(gelu, x, x, arch=arch, lto=True)
    print(f"DSL->C++: linked {lk.name} with cpp_gelu into a {len(lk.cubin)}-byte cubin for {arch} (LTO-IR)")
    # 2. C++ kernel -> DSL device function
    ptx = link.LinkInput(link.export_device(softsign, [f32, f32], arch).encode(), "PTX", "dsl_softsign.ptx")
    cubin = link.link([CPP_USER, ptx], arch)
    print(f"C++->DSL: linked softsign_kernel with dsl_softsign into a {len(cubin)}-byte cubin")

    if not bridge.gpu_available():
        print("no GPU: link checks only")
        return
    dx, dout = bridge.from_host(x), bridge.zeros(n, "float32")
    link.load_linked(gelu, dx, dout, lto=True)(dx, dout)
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.tanh(0.7978845608 * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(dout.to_host(), ref, rtol=1e-5, atol=2e-6)
    mod = bridge.load_module(cubin, name="softsign")
    k = np.float32(0.5)
    dout2 = bridge.zeros(n, "float32")
    bridge.unsafe_launch(mod.softsign_kernel, ((n + 255) // 256,), (256,), dx, k, dout2, np.int32(n))
    np.testing.assert_allclose(dout2.to_host(), x64 / (1 + 0.5 * np.abs(x64)), rtol=1e-6, atol=1e-7)
    print("PASS: DSL->C++ and C++->DSL linked kernels match NumPy")


if __name__ == "__main__":
    main()
