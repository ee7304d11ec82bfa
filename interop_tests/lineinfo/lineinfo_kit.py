"""Helpers of the line-table tests: marker lines read from the kernel files, PTX directive parsing,
and the one normalisation a line table is allowed to add to PTX."""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "lineinfo_kernels.py"
DEVICE = HERE / "lineinfo_device.py"

# What NVPTX adds for a DebugDirectivesOnly compile unit, and nothing else: `.loc`/`.file`
# directives, the labels it puts around them, and one empty `.debug_macinfo` section.
_DEBUG_LINE = re.compile(r"^\s*(\.loc\s.*|\.file\s.*|\.section\s+\.debug_macinfo\s*\{\s*\}"
                         r"|\$L__(func_begin|func_end|tmp)\d+:)\s*$")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.MULTILINE)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)", re.MULTILINE)


def marker_line(path: Path, name: str) -> int:
    """1-based number of the line of `path` carrying `# LINE:<name>` (exactly one)."""
    hits = [n for n, text in enumerate(path.read_text().splitlines(), 1)
            if re.search(rf"#\s*LINE:{re.escape(name)}\s*$", text)]
    assert len(hits) == 1, f"marker LINE:{name} in {path}: {hits}"
    return hits[0]


def files(ptx: str) -> dict[int, str]:
    """`.file` number -> path."""
    return {int(n): p for n, p in _FILE.findall(ptx)}


def locs(ptx: str) -> set[tuple[str, int]]:
    """(path, line) of every `.loc` directive."""
    names = files(ptx)
    return {(names.get(int(f), f"<file {f}>"), int(line)) for f, line, _ in _LOC.findall(ptx)}


def without_line_tables(ptx: str) -> str:
    return "\n".join(line for line in ptx.split("\n") if not _DEBUG_LINE.match(line))


def has_debug_trace(ptx: str) -> bool:
    return bool(re.search(r"^\s*\.(loc|file)\s|\.section\s+\.debug|\$L__(func_begin|tmp)|, debug\b",
                          ptx, re.MULTILINE))


# ------------------------------------------------------------------ the same kernel, lineinfo on / off
def simt_variant(kernel, lineinfo: bool):
    """A @simt.kernel with the options of `kernel` except `lineinfo`."""
    from dataclasses import replace

    from dsl.simt.kernel import SimtKernel
    return SimtKernel(kernel.pyfunc, replace(kernel.options, lineinfo=lineinfo))


def tile_variant(kernel, lineinfo: bool):
    """A @tile.kernel with the options of `kernel` except `lineinfo`."""
    from dsl import tile
    return tile.kernel(num_warps=kernel.num_warps, persistent=kernel.persistent,
                       lineinfo=lineinfo)(kernel.pyfunc)


def zoo_ptx(case, arch: str, lineinfo: bool) -> str:
    import numpy as np
    launch = case.make(np.random.default_rng(7), case.sizes[0])
    return simt_variant(case.kernel, lineinfo).compile(*launch.args, arch=arch).ptx


def tile_cases() -> dict:
    """The tile kernels of interop_tests/dsl_tile (the cases its PTX test assembles) plus a
    tensor-core GEMM that takes wgmma on sm_90 (-> sm_90a) and mma.sync on sm_80."""
    import ml_dtypes
    import numpy as np

    from dsl import tile
    from interop_tests.dsl_tile import tile_kernels_lib as K
    z, f32, f16 = np.zeros, np.float32, np.float16
    part = tile.partition
    return {
        "add": (K.add, (z(10, f32), z(10, f32), part(z(10, f32), (1024,)))),
        "saxpy": (K.saxpy, (2.0, z(10, f32), z(10, f32), part(z(10, f32), (1024,)))),
        "softmax": (K.softmax, (z((4, 100), f32), part(z((4, 100), f32), (1, 128)))),
        "layernorm": (K.layernorm, (z((4, 100), f32), z(100, f32), z(100, f32), 1e-5,
                                    part(z((4, 100), f32), (2, 128)))),
        "block_sum": (K.block_sum, (z(10, f32), part(z(1, f32), (1,)), 4096)),
        "transpose": (K.transpose, (z((4, 100), f32), part(z((100, 4), f32), (32, 32)))),
        "gemm_f16": (K.gemm, (z((4, 4), f16), z((4, 4), f16), part(z((4, 4), f32), (64, 64)), 32)),
        "gemm_bf16": (K.gemm, (z((4, 4), ml_dtypes.bfloat16), z((4, 4), ml_dtypes.bfloat16),
                               part(z((4, 4), f32), (64, 64)), 32)),
        "gemm_tf32": (K.gemm, (z((4, 4), f32), z((4, 4), f32), part(z((4, 4), f32), (64, 64)), 16)),
        "gemm_bias_relu": (K.gemm_bias_relu, (z((4, 4), f16), z((4, 4), f16), z(4, f32),
                                              part(z((4, 4), f32), (64, 64)), 32)),
        "gemm_f16_tensor_cores": (K.gemm, (z((256, 256), f16), z((256, 256), f16),
                                           part(z((256, 256), f32), (128, 128)), 32)),
    }


def tile_ptx(name: str, arch: str, lineinfo: bool) -> str:
    kernel, args = tile_cases()[name]
    return tile_variant(kernel, lineinfo).compile(args, arch).ptx


def ptx_target(ptx: str) -> str:
    m = re.search(r"^\.target\s+(sm_\w+)", ptx, re.MULTILINE)
    assert m, "PTX without .target"
    return m.group(1)


def ptxas_cubin(ptx: str, arch: str, out: Path) -> None:
    """Assemble with ptxas for exactly `arch` (sm_90a included); fails the test on a ptxas error."""
    import subprocess

    from dsl.backend.ptxas import find_ptxas
    src = out.with_suffix(".ptx")
    src.write_text(ptx)
    proc = subprocess.run([find_ptxas(), f"-arch={arch}", str(src), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"ptxas -arch={arch} rejected the PTX:\n{proc.stderr}"


def cubin_text_sections(cubin: bytes) -> dict[str, bytes]:
    """{name: bytes} of a 64-bit little-endian ELF's `.text.*` sections: the kernels' machine code,
    instruction encodings exactly (what cuobjdump -sass prints, without running it)."""
    import struct
    assert cubin[:6] == b"\x7fELF\x02\x01", "not a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = heads[shstrndx][4], heads[shstrndx][5]
    names = cubin[names_at:names_at + names_size]

    def name(off: int) -> str:
        return names[off:names.index(b"\0", off)].decode()
    return {name(h[0]): cubin[h[4]:h[4] + h[5]] for h in heads if name(h[0]).startswith(".text.")}
