"""Device-function linking through nvJitLink: DSL PTX + CUDA C++ (.cu/.ptx/.ltoir/.o/.fatbin) → cubin.

Why nvJitLink: it is the toolkit's own device linker, ships as a pip package (`nvidia-nvjitlink`,
through `cuda.bindings.nvjitlink`) and runs without a GPU, so CI proves that a link produces a cubin.
Both directions use it:

* DSL → C++: a kernel calls `simt.extern_device("f", "f32(f32)", link=["f.cu"])`; `link_kernel`
  compiles the kernel to PTX, compiles `.cu` inputs with nvcc (`-rdc=true`, LTO-IR with `-dlto` when
  `lto=True`, else PTX) and links everything for one arch.
* C++ → DSL: `export_device(fn, signature, arch)` emits a `@simt.device(export="c_name")` function as
  PTX that a CUDA C++ kernel declares `extern "C" __device__` and links the same way (`link`), or
  passes to nvcc as a `.ptx` input of a relocatable build.

With LTO (`lto=True`) the C++ side is LTO-IR and nvJitLink optimises across its functions; the DSL side
stays PTX (LLVM's NVPTX backend emits no NVVM LTO-IR), so calls into DSL code are not inlined.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from dsl.backend.toolkit import locate
from dsl.errors import DslLinkError
from dsl.userfile import load_user_file

__all__ = ["LinkError", "LinkInput", "LinkedKernel", "available", "find_nvcc", "compile_cu", "link",
           "link_kernel", "load_linked", "export_device", "main"]

_KINDS = {".ptx": "PTX", ".ltoir": "LTOIR", ".o": "OBJECT", ".fatbin": "FATBIN", ".cubin": "CUBIN",
          ".a": "LIBRARY"}


class LinkError(DslLinkError, RuntimeError):
    """nvJitLink or nvcc refused the inputs; the message carries the tool's log."""


@dataclass(frozen=True)
class LinkInput:
    """One image handed to nvJitLink: bytes, kind (PTX, LTOIR, OBJECT, FATBIN, CUBIN, LIBRARY), name."""
    data: bytes
    kind: str
    name: str


@dataclass(frozen=True)
class LinkedKernel:
    """A linked kernel: the cubin, its entry name and the contract JSON the bridge validates with."""
    cubin: bytes
    name: str
    contract_json: str
    arch: str


def _nvjitlink() -> Any:
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise LinkError("nvJitLink is not available: install the `link` extra "
                        "(pip install 'kernelbridge[link]', i.e. cuda-bindings + nvidia-nvjitlink)") from e
    return nvjitlink


def available() -> bool:
    """True when nvJitLink can be loaded (no GPU needed)."""
    try:
        _nvjitlink().version()
        return True
    except Exception:
        return False


def _arch_number(arch: str | int) -> str:
    s = str(arch).strip()
    for prefix in ("sm_", "compute_", "lto_"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    if not s[:-1].isdigit() and not s.isdigit():
        raise ValueError(f"arch must look like 'sm_90' (or 90, '90a'), got {arch!r}")
    return s


def find_nvcc() -> str | None:
    """nvcc as the one toolkit locator finds it (bridge.toolkit: KB_NVCC, KB_CUDA_HOME, then
    cuda.pathfinder's search, then PATH and /usr/local/cuda), or None."""
    return locate("nvcc").path


def _include_dir() -> str:
    return str(Path(__file__).resolve().parent.parent / "cpp" / "include")


def compile_cu(path: str | os.PathLike, arch: str | int, *, lto: bool = False,
               include_dirs: Sequence[str] = (), options: Sequence[str] = ()) -> LinkInput:
    """Compile one `.cu` file for `arch` as relocatable device code: LTO-IR (`lto`) or PTX."""
    found = locate("nvcc")
    nvcc = found.path
    if nvcc is None:
        raise LinkError(f"compiling {os.fspath(path)!r} needs nvcc, which is {found.describe()}")
    num = _arch_number(arch)
    src = os.path.abspath(os.fspath(path))
    if not os.path.exists(src):
        raise FileNotFoundError(f"link input {src!r} does not exist")
    incs = [f"-I{d}" for d in (_include_dir(), *include_dirs)]
    with tempfile.TemporaryDirectory(prefix="kb_link_") as tmp:
        if lto:
            out = os.path.join(tmp, "out.ltoir")
            cmd = [nvcc, "-std=c++17", "-O3", "-rdc=true", "-dlto", "-dc", f"-arch=lto_{num}", "-fatbin",
                   *incs, *options, "-o", out, src]
            kind = "FATBIN"       # a fatbin holding the LTO-IR entry: nvJitLink unpacks it
        else:
            out = os.path.join(tmp, "out.ptx")
            cmd = [nvcc, "-std=c++17", "-O3", "-rdc=true", "-ptx", f"-arch=compute_{num}", *incs, *options,
                   "-o", out, src]
            kind = "PTX"
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise LinkError(f"nvcc failed on {src} ({' '.join(cmd)}):\n{r.stderr.strip()}")
        return LinkInput(Path(out).read_bytes(), kind, os.path.basename(src))


def _as_input(item: Any, arch: str, lto: bool) -> LinkInput:
    if isinstance(item, LinkInput):
        return item
    path = os.fspath(item)
    suffix = os.path.splitext(path)[1]
    if suffix == ".cu":
        return compile_cu(path, arch, lto=lto)
    kind = _KINDS.get(suffix)
    if kind is None:
        raise ValueError(f"link input {path!r}: unknown kind; use .cu, {', '.join(_KINDS)} or a LinkInput")
    if not os.path.exists(path):
        raise FileNotFoundError(f"link input {path!r} does not exist")
    return LinkInput(Path(path).read_bytes(), kind, os.path.basename(path))


def _log(nj: Any, handle: int, which: str) -> str:
    size = getattr(nj, f"get_{which}_log_size")(handle)
    if not size:
        return ""
    buf = bytearray(size)
    getattr(nj, f"get_{which}_log")(handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace").strip()


def link(inputs: Iterable[Any], arch: str | int, *, lto: bool = False,
         options: Sequence[str] = ()) -> bytes:
    """Link `inputs` (paths or LinkInputs; `.cu` compiled first) into one cubin for `arch`.

    `lto=True` compiles `.cu` inputs to LTO-IR and passes `-lto` so nvJitLink optimises across them."""
    nj = _nvjitlink()
    num = _arch_number(arch)
    items = [_as_input(i, num, lto) for i in inputs]
    if not items:
        raise ValueError("link: no inputs")
    opts = [f"-arch=sm_{num}", "-O3", *(["-lto"] if lto or any(i.kind == "LTOIR" for i in items) else []),
            *options]
    handle = nj.create(len(opts), opts)
    try:
        for it in items:
            try:
                nj.add_data(handle, int(getattr(nj.InputType, it.kind)), it.data, len(it.data), it.name)
            except Exception as e:
                raise LinkError(f"nvJitLink refused input {it.name!r} ({it.kind}): {e}\n"
                                f"{_log(nj, handle, 'error')}") from None
        try:
            nj.complete(handle)
        except Exception as e:
            raise LinkError(f"nvJitLink failed to link {[i.name for i in items]} for sm_{num}: {e}\n"
                            f"{_log(nj, handle, 'error')}") from None
        size = nj.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nj.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nj.destroy(handle)


def link_kernel(kernel: Any, *args: Any, arch: str = "sm_90", lto: bool = False,
                extra: Sequence[Any] = ()) -> LinkedKernel:
    """Compile a @simt.kernel for `args` and link it with its extern functions' inputs (+ `extra`)."""
    from dsl.simt.extern import link_inputs
    ck = kernel.compile(*args, arch=arch)
    paths = link_inputs(kernel.build(*args))
    ptx = LinkInput(ck.ptx.encode(), "PTX", f"{ck.name}.ptx")
    cubin = link([ptx, *paths, *extra], arch, lto=lto)
    return LinkedKernel(cubin, ck.name, ck.contract_json, f"sm_{_arch_number(arch)}")


_loaded: dict[tuple, Any] = {}   # documented cache: (kernel id, signature, cc) -> bridge.Kernel


def load_linked(kernel: Any, *args: Any, lto: bool = False) -> Any:
    """A `bridge.Kernel` for the linked cubin on the current device (cached); call it like any kernel."""
    import bridge
    from bridge.device import current_device
    cc = current_device().cc
    arch = f"sm_{cc[0]}{cc[1]}"
    key = (id(kernel), tuple(kernel.signature(*args)), arch, lto)
    k = _loaded.get(key)
    if k is None:
        lk = link_kernel(kernel, *args, arch=arch, lto=lto)
        mod = bridge.load_module(lk.cubin, contracts={lk.name: lk.contract_json}, name=lk.name)
        k = _loaded[key] = mod.get_kernel(lk.name)
    return k


def export_device(fn: Any, signature: Sequence[Any], arch: str = "sm_90") -> str:
    """PTX defining `@simt.device(export="c_name")` function `fn` for scalar `signature`, callable from
    CUDA C++ as `extern "C" __device__ <ret> c_name(<params>)` once linked (see `link`)."""
    from dsl.backend.builder import BuildOptions, ModuleBuilder
    from dsl.backend.codegen import LlvmIR, emit_ptx, optimize
    from dsl.backend.target import parse_arch
    from dsl.frontend.context import BuildContext
    from dsl.frontend.lower import lower_function
    from dsl.ir import nodes as N
    from dsl.ir import types as irt
    from dsl.options import KernelOptions
    from dsl.simt.extern import _scalar
    export = getattr(fn, "export", None)
    if not export:
        raise ValueError(f"export_device: {fn!r} has no C name; declare it @simt.device(export=\"c_name\")")
    sig = [_scalar(t, f"parameter #{i}") for i, t in enumerate(signature)]
    options = KernelOptions(boundscheck=False)
    dev = lower_function(fn.pyfunc, sig, BuildContext(options), is_kernel=False)
    if not isinstance(dev.return_type, (irt.ScalarType, irt.VoidType)):
        raise TypeError(f"export_device: {export} must return a scalar or nothing, got {dev.return_type}")
    dev.export_name = export
    # The builder emits one kernel per module: an empty anchor kernel, plus the exported function.
    anchor = N.Function(f"__kb_export_anchor_{export}", [], irt.VOID, [], is_kernel=True)
    mb = ModuleBuilder(anchor, BuildOptions(arch_cc=parse_arch(arch)))
    mb.function_for(dev)
    module = mb.build()
    llvm_mod = optimize(LlvmIR(str(module), frozenset(mb.keep)), arch)
    return emit_ptx(llvm_mod, arch)



def main(argv: Sequence[str] | None = None) -> int:
    """`python -m dsl.link export FILE.py::fn --signature f32,f32 --arch sm_90 -o fn.ptx`
    `python -m dsl.link link a.cu b.ptx ... --arch sm_90 [--lto] -o out.cubin` (for build systems)."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python -m dsl.link", description="DSL <-> CUDA C++ device linking")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="emit a @simt.device(export=...) function as PTX")
    ex.add_argument("target", help="FILE.py::function")
    ex.add_argument("--signature", required=True, help="parameter dtypes, e.g. f32,f32")
    ex.add_argument("--arch", default="sm_90")
    ex.add_argument("-o", "--output", required=True)
    lk = sub.add_parser("link", help="link .cu/.ptx/.ltoir/.o/.fatbin/.cubin/.a inputs into one cubin")
    lk.add_argument("inputs", nargs="+")
    lk.add_argument("--arch", default="sm_90")
    lk.add_argument("--lto", action="store_true", help="compile .cu inputs to LTO-IR and link with -lto")
    lk.add_argument("-o", "--output", required=True)
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "export":
            path, _, name = ns.target.rpartition("::")
            if not path or not name:
                raise ValueError(f"target {ns.target!r} must be FILE.py::function")
            fn = getattr(load_user_file(path, "_kb_link_"), name, None)
            if fn is None:
                raise ValueError(f"{path} has no function {name!r}")
            sig = [s.strip() for s in ns.signature.split(",") if s.strip()]
            Path(ns.output).write_text(export_device(fn, sig, ns.arch))
        else:
            Path(ns.output).write_bytes(link(ns.inputs, ns.arch, lto=ns.lto))
    except (LinkError, ValueError, TypeError, FileNotFoundError) as e:
        print(f"dsl.link: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
