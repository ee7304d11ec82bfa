"""Intake cost per array (host µs): `bridge.asarray` of CuPy arrays, torch tensors, bridge arrays, a
DLPack-only producer and a CUDA-Array-Interface-only producer, next to `torch.from_dlpack` and
`cupy.from_dlpack` of the same arrays, in one process, all on one stream (`bridge.use_stream`).

Every conversion is checked zero-copy (same data pointer, shape) before it is timed. No bars: the
numbers say what a launch pays per array argument on each path.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from _bench_kit import gpu_or_note
from _common import Report, host_us, parse_args, try_import


class DLPackOnly:
    """A producer exposing only the DLPack protocol (forces the generic DLPack path)."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._obj.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._obj.__dlpack_device__()


class CAIOnly:
    """A producer exposing only `__cuda_array_interface__` (forces the CAI path)."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj
        self.__cuda_array_interface__ = obj.__cuda_array_interface__


def data_ptr(x: Any) -> int:
    """Device address of the first element for bridge, CuPy and torch arrays."""
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    if hasattr(x, "data") and hasattr(x.data, "ptr"):
        return int(x.data.ptr)
    return int(x.ptr)


def measure(rep: Report, name: str, convert: Callable[[], Any], src_ptr: int, shape: tuple, n: int) -> None:
    """Check that `convert()` is a zero-copy view, then time it."""
    try:
        out = convert()
        got = (data_ptr(out), tuple(out.shape))
        if got != (src_ptr, shape):
            raise AssertionError(f"{name}: not a zero-copy view: got (ptr, shape) {got}, expected "
                                 f"{(src_ptr, shape)}")
        rep.row(name, host_us(convert, n), "us")
    except Exception as exc:  # noqa: BLE001 - a path that fails is reported as a row, not dropped
        rep.row(name, None, "us", note=f"{type(exc).__name__}: {exc}"[:300])
        if name.startswith("bridge"):
            raise


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("array intake cost (host µs per conversion, zero-copy)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    torch = try_import("torch", rep.missing)
    cp = try_import("cupy", rep.missing)
    n = 2000 if args.quick else 10000
    shape = (64, 48)
    try:
        with bridge.use_stream(bridge.Stream()):
            b = bridge.zeros(shape, "float32")
            measure(rep, "bridge.asarray(bridge.Array)", lambda: bridge.asarray(b), b.ptr, shape, n)
            if torch is not None:
                t = torch.rand(shape, device="cuda")
                tp = data_ptr(t)
                measure(rep, "bridge.asarray(torch.Tensor)", lambda: bridge.asarray(t), tp, shape, n)
                dl = DLPackOnly(t)
                measure(rep, "bridge.asarray(DLPack-only producer)", lambda: bridge.asarray(dl), tp, shape, n)
                measure(rep, "torch.from_dlpack(bridge.Array)", lambda: torch.from_dlpack(b), b.ptr, shape, n)
                if cp is not None:
                    measure(rep, "cupy.from_dlpack(torch.Tensor)", lambda: cp.from_dlpack(t), tp, shape, n)
            if cp is not None:
                c = cp.random.rand(*shape, dtype=cp.float32)
                cptr = data_ptr(c)
                measure(rep, "bridge.asarray(cupy.ndarray)", lambda: bridge.asarray(c), cptr, shape, n)
                cai = CAIOnly(c)
                measure(rep, "bridge.asarray(CAI-only producer)", lambda: bridge.asarray(cai), cptr, shape, n)
                measure(rep, "cupy.from_dlpack(bridge.Array)", lambda: cp.from_dlpack(b), b.ptr, shape, n)
                measure(rep, "cupy.asarray(CAI-only producer)", lambda: cp.asarray(cai), cptr, shape, n)
                if torch is not None:
                    measure(rep, "torch.from_dlpack(cupy.ndarray)", lambda: torch.from_dlpack(c), cptr, shape, n)
            bridge.synchronize()
    finally:
        rep.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
