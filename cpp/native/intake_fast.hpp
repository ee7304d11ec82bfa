// Fast paths of the one intake for the producers users pass most: torch tensors read through
// PyTorch's stable C shim (AOTInductor's `aoti_torch_*` functions in libtorch) instead of ~8 Python
// attribute reads, CuPy arrays through their Cython C fields (offsets self-checked on probe arrays), and
// the current CuPy / torch streams read through C entry points instead of a Python call per launch.
//
// Why it is safe: nothing is cached per object (a tensor resized or re-strided in place is read again
// at the next launch); every entry point is resolved at run time from the libraries the producer has
// already loaded, never capped to a version; a missing symbol, a failed self-check or an unusual object
// (a tensor or ndarray subclass, a complex tensor, another device type) falls back to the attribute path.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "kernelbridge/array_view.hpp"

namespace kb::native::fast {

// A torch.Tensor (exact type, or nn.Parameter) read through the C shim. false: not handled here (the
// caller uses the attribute path). On true, `view` holds pointer, shape, byte strides, dtype and device.
bool torch_view(PyObject* obj, kb::ArrayView& view);

// An exact cupy.ndarray read through its C fields (offsets found and self-checked once per process).
// false: not handled here. On true, `view` holds pointer, shape, byte strides and device (not the
// dtype), and `dtype` the ndarray's NumPy dtype object (borrowed).
bool cupy_view(PyObject* obj, kb::ArrayView& view, PyObject*& dtype);

// The current torch / CuPy stream of device `dev` through their C entry points. false: unavailable.
bool torch_stream(int dev, uint64_t& out);
bool cupy_stream(int dev, uint64_t& out);

void register_fast_intake(pybind11::module_& m);
void resolve_imported();   // the fast paths of the frameworks already imported, resolved now

}  // namespace kb::native::fast
