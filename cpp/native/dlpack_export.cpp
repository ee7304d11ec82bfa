// DLPack export of bridge.Array: a capsule whose manager_ctx keeps the array (and so its memory) alive.
//
// Why in C++: the deleter may be called by a consumer from any thread without the GIL, so it must be a
// plain C function that takes the GIL itself before dropping the Python reference.
#include <cstring>
#include <string>

#include "intake.hpp"
#include "kernelbridge/dlpack/dlpack.h"

namespace py = pybind11;

namespace kb::native {
namespace {

// One allocation per exported capsule: the managed tensor plus the shape/strides it points into.
template <class Managed>
struct Export {
  Managed managed{};
  PyObject* array = nullptr;  // strong reference, dropped by the deleter
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

template <class Managed>
void release(Managed* self) {
  auto* e = static_cast<Export<Managed>*>(self->manager_ctx);
  if (Py_IsInitialized()) {  // at interpreter exit the reference is simply left behind
    PyGILState_STATE s = PyGILState_Ensure();
    Py_XDECREF(e->array);
    PyGILState_Release(s);
  }
  delete e;
}

void deleter_versioned(DLManagedTensorVersioned* self) { release(self); }
void deleter_legacy(DLManagedTensor* self) { release(self); }

// Capsule destructors: free only when no consumer took ownership (a consumer renames to "used_...").
void capsule_versioned_dtor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dltensor_versioned")) return;
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
  if (m && m->deleter) m->deleter(m);
}
void capsule_legacy_dtor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

[[noreturn]] void buffer_error(const std::string& msg) {
  PyErr_SetString(PyExc_BufferError, msg.c_str());
  throw py::error_already_set();
}

DLDevice to_dl_device(const kb::ArrayView& v) {
  switch (v.device_type) {
    case kb::DeviceType::cpu: return DLDevice{kDLCPU, 0};
    case kb::DeviceType::cuda: return DLDevice{kDLCUDA, v.device_id};
    case kb::DeviceType::cuda_host: return DLDevice{kDLCUDAHost, 0};
    case kb::DeviceType::cuda_managed: return DLDevice{kDLCUDAManaged, v.device_id};
    default: buffer_error("cannot export an array of an unknown device type through DLPack");
  }
}

template <class Managed>
Export<Managed>* fill(py::handle array, const kb::ArrayView& v) {
  uint8_t code = 0, bits = 0;
  if (!dtype_to_dlpack(v.dtype, code, bits)) {
    buffer_error(std::string("dtype ") + kb::dtype_long_name(v.dtype) + " has no DLPack type code");
  }
  auto* e = new Export<Managed>();
  DLTensor& t = e->managed.dl_tensor;
  int64_t item = v.itemsize();
  for (int i = 0; i < v.ndim; ++i) {
    e->shape[i] = v.shape[i];
    if (v.strides[i] % item != 0) {
      delete e;
      buffer_error("stride " + std::to_string(v.strides[i]) + " bytes of axis " + std::to_string(i) +
                   " is not a multiple of the item size " + std::to_string(item) +
                   "; DLPack strides count elements");
    }
    e->strides[i] = v.strides[i] / item;
  }
  try {
    t.device = to_dl_device(v);
  } catch (...) {
    delete e;
    throw;
  }
  t.data = reinterpret_cast<void*>(v.ptr);
  t.byte_offset = 0;
  t.ndim = v.ndim;
  t.dtype = DLDataType{code, bits, 1};
  t.shape = e->shape;
  t.strides = e->strides;
  e->managed.manager_ctx = e;
  e->array = array.ptr();
  Py_INCREF(e->array);
  return e;
}

}  // namespace

py::capsule make_dlpack_capsule(py::handle array, bool versioned, bool readonly_flag) {
  PyTypeObject* base = array_base_type();
  if (!base || !PyObject_TypeCheck(array.ptr(), base)) {
    throw py::type_error(std::string("make_dlpack_capsule: expected a bridge.Array, got ") +
                         Py_TYPE(array.ptr())->tp_name);
  }
  const kb::ArrayView& v = array_base_of(array.ptr()).view;
  bool subbyte = kb::dtype_bits(v.dtype) < 8;
  if (versioned) {
    auto* e = fill<DLManagedTensorVersioned>(array, v);
    e->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    e->managed.deleter = deleter_versioned;
    e->managed.flags = (readonly_flag ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                       (subbyte ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0);
    PyObject* cap = PyCapsule_New(&e->managed, "dltensor_versioned", capsule_versioned_dtor);
    if (!cap) { deleter_versioned(&e->managed); throw py::error_already_set(); }
    return py::reinterpret_steal<py::capsule>(cap);
  }
  if (readonly_flag) {
    buffer_error("a read-only array can only be exported through versioned DLPack: the consumer must "
                 "pass max_version >= (1, 0) (legacy DLPack cannot mark memory read-only)");
  }
  if (subbyte) {
    buffer_error(std::string(kb::dtype_long_name(v.dtype)) + " is stored one element per byte, which "
                 "only versioned DLPack can signal: the consumer must pass max_version >= (1, 0)");
  }
  auto* e = fill<DLManagedTensor>(array, v);
  e->managed.deleter = deleter_legacy;
  PyObject* cap = PyCapsule_New(&e->managed, "dltensor", capsule_legacy_dtor);
  if (!cap) { deleter_legacy(&e->managed); throw py::error_already_set(); }
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace kb::native
