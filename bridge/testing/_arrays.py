"""Random argument values and array layouts for generated launches, on the host or a device.

Why arrays are built as a base allocation plus a view recipe: the same recipe (slices, then an axis
permutation) gives the same strides on NumPy, bridge, CuPy and torch arrays, so a launch generated and
validated on the host keeps its layout when it is copied to a device, and the base lets the checks see
whether a kernel wrote outside its view.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bridge import dtypes as _dtypes

ARRAY_LIBRARIES = ("numpy", "bridge", "cupy", "torch")
_ALIGN = 256                      # host bases are aligned like device allocations

# value generator: (rng, shape, numpy dtype) -> array of that shape (or a scalar when shape == ())
ValueFn = Callable[[np.random.Generator, tuple, np.dtype], Any]


@dataclass(frozen=True)
class Recipe:
    """A view of a base array: `base[index]`, then `.transpose(axes)` when axes is not None."""
    base_shape: tuple[int, ...]
    index: tuple[slice, ...]
    axes: tuple[int, ...] | None
    layout: str                   # what it is, for reports: C, F, strided, reversed

    def apply(self, base: Any, library: str = "numpy") -> Any:
        view = base[self.index] if self.index else base
        if self.axes is not None:
            view = view.permute(*self.axes) if library == "torch" else view.transpose(self.axes)
        return view


def layouts_for(spec: dict, shape: tuple[int, ...], library: str) -> list[str]:
    """The layouts an array argument may take: C or F when declared, else all of them (torch views
    cannot have negative strides)."""
    declared = spec.get("layout", "any")
    if declared in ("C", "F"):
        return [declared]
    out = ["C", "strided", "reversed", "F"] if len(shape) >= 2 else ["C", "strided", "reversed"]
    if library == "torch":
        out.remove("reversed")
    return out


def _guard(rest: tuple[int, ...], itemsize: int) -> int:
    """Rows of guard zone after a contiguous view: at least 64 bytes, so a kernel writing past the end
    of its array writes into memory the checks can see."""
    row = int(np.prod(rest, dtype=np.int64)) * itemsize
    return 1 if row == 0 else max(1, -(-64 // row))


def recipe(shape: tuple[int, ...], layout: str, itemsize: int = 4) -> Recipe:
    """How to cut a view of `layout` out of a base. Contiguous views (C, F) are followed by a guard
    zone in the base; strided ones have gaps between their elements."""
    nd = len(shape)
    if nd == 0:
        return Recipe((), (), None, "C")
    if layout == "F":
        rev = tuple(reversed(shape))
        base = (rev[0] + _guard(rev[1:], itemsize),) + rev[1:]
        return Recipe(base, (slice(0, rev[0]),), tuple(reversed(range(nd))), "F")
    if layout == "strided":      # every other element of the last axis (and of the first, for 2-D+)
        base = list(shape)
        base[-1] = 2 * shape[-1]
        index = [slice(None)] * nd
        index[-1] = slice(None, None, 2)
        if nd >= 2:
            base[0] = 2 * shape[0]
            index[0] = slice(None, None, 2)
        return Recipe(tuple(base), tuple(index), None, "strided")
    if layout == "reversed":     # negative strides on the first and last axes
        index = [slice(None)] * nd
        index[0] = slice(None, None, -1)
        index[-1] = slice(None, None, -1)
        return Recipe(tuple(shape), tuple(index), None, "reversed")
    base = (shape[0] + _guard(shape[1:], itemsize),) + tuple(shape[1:])
    return Recipe(base, (slice(0, shape[0]),), None, "C")


def numpy_dtype(name: str) -> np.dtype:
    return _dtypes.to_numpy(name)


def random_values(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values suited to the dtype: finite non-zero floats of magnitude 1/4..4 (either sign when the
    type has one), non-zero integers of small magnitude (so sums and products stay in range), random
    booleans."""
    dt = numpy_dtype(name)
    if name == "bool":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        hi = min(int(info.max), 10 if dt.itemsize == 1 else 1000)
        mag = rng.integers(1, hi + 1, shape)
        if dt.kind == "i":
            mag = mag * rng.choice(np.array([-1, 1]), shape)
        return mag.astype(dt)
    if dt.kind == "c":
        part = np.float32 if dt.itemsize == 8 else np.float64
        re = random_values(rng, "f32" if part is np.float32 else "f64", shape)
        im = random_values(rng, "f32" if part is np.float32 else "f64", shape)
        return (re + 1j * im).astype(dt)
    mag = rng.uniform(0.25, 4.0, shape)
    if name not in ("f8e8m0fnu",):           # unsigned exponent-only type: positive values only
        mag = mag * rng.choice(np.array([-1.0, 1.0]), shape)
    out = np.asarray(mag).astype(dt)
    as64 = out.astype(np.float64)
    bad = (as64 == 0) | ~np.isfinite(as64)
    if np.any(bad):
        out = np.where(bad, np.asarray(1.0).astype(dt), out).astype(dt)
    return out


def aligned_empty(shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """A C-contiguous host array whose data pointer is 256-byte aligned (as device allocations are)."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    raw = np.empty(n * dt.itemsize + _ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off:off + n * dt.itemsize].view(dt).reshape(shape)


@dataclass
class ArrayRecord:
    """One generated array argument: the pristine host base (never handed to a kernel) and the view."""
    name: str
    spec: dict
    base: np.ndarray
    recipe: Recipe
    readonly: bool

    @property
    def written(self) -> bool:
        return self.spec.get("access", "read") != "read"

    def mask(self) -> np.ndarray:
        """True where the view's elements live in the base."""
        m = np.zeros(self.base.shape, dtype=bool)
        self.recipe.apply(m)[...] = True
        return m

    def host_view(self) -> tuple[np.ndarray, np.ndarray]:
        """(view, base): a fresh NumPy view over a copy of the base (read-only when the argument is)."""
        base = aligned_empty(self.base.shape, self.base.dtype)
        base[...] = self.base
        view = self.recipe.apply(base)
        if self.readonly:
            view.flags.writeable = False
        return view, base

    def device_view(self, library: str) -> tuple[Any, Any]:
        """(view, base) on the current device in `library` (bridge, cupy or torch)."""
        import bridge
        dev_base = bridge.from_host(self.base)
        if library == "cupy":
            import cupy
            dev_base = cupy.from_dlpack(dev_base)
        elif library == "torch":
            import torch
            dev_base = torch.from_dlpack(dev_base)
        view = self.recipe.apply(dev_base, library)
        if library == "bridge" and self.readonly:
            view = bridge.Array(ptr=view.ptr, shape=list(view.shape), strides=list(view.strides),
                                dtype=view.dtype_tag, device_type=view.device_type,
                                device_id=view.device_id, readonly=True, owner=view,
                                stream=getattr(view, "_stream", None))
        return view, dev_base


def scalar_value(name: str, value: int | None, rng: np.random.Generator) -> Any:
    """A typed NumPy scalar: the solved size for integer scalars, a random value otherwise."""
    dt = numpy_dtype(name)
    if value is not None:
        return dt.type(value)
    return random_values(rng, name, ()).reshape(()).astype(dt)[()]


def to_host(obj: Any) -> np.ndarray:
    """A C-contiguous NumPy copy of any array the bridge accepts (NumPy, bridge, CuPy, torch)."""
    if isinstance(obj, np.ndarray):
        return np.array(obj, order="C", copy=True)
    import bridge
    return bridge.asarray(obj).to_host()
