// The ONE array-intake path of kernelbridge (docs/architecture.md "Array views").
//
// Why one path: the launcher (hot path) and bridge.asarray must read bridge.Array, CuPy, PyTorch, any
// DLPack producer and any CUDA-Array-Interface producer the same way, zero-copy, with the same errors.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "kernelbridge/array_view.hpp"

namespace kb::native {

struct IntakeInfo {
  pybind11::object keepalive;    // what must stay referenced while the view is used (obj, or a capsule owner)
  bool has_producer_stream = false;
  uint64_t producer_stream = 0;  // raw CUstream handle where the producer may still have work
  // which bridge stream of that handle it is (kb::rt::stream_generation); ~0: the one living now
  uint64_t producer_generation = ~uint64_t{0};
};

// Per-launch memo: the current CuPy / torch streams are looked up at most once per device per launch.
// Create one on the stack for one launch (all arguments) and pass it to every intake() call.
struct IntakeMemo {
  static constexpr int kSlots = 8;
  int cupy_dev[kSlots];  uint64_t cupy_stream[kSlots];  int n_cupy = 0;
  int torch_dev[kSlots]; uint64_t torch_stream[kSlots]; int n_torch = 0;
};

// The C++ object behind bridge.Array (_native.ArrayBase): a view plus what keeps its memory alive.
struct ArrayBase {
  kb::ArrayView view;
  pybind11::object owner;        // allocation, producer object or DLPack owner capsule (None: unowned)
  bool has_stream = false;       // a foreign producer's stream to order after, when known
  uint64_t stream = 0;
  uint64_t stream_generation = 0;   // kb::rt::stream_generation of `stream` when it was taken
};

// An array cut into tiles of a static shape (the tile model's partition). The Dispatcher passes the
// array itself to the kernel and puts the tile shape into the argument signature key; the contract's
// tile grid (grid_from.tile) gives one block per tile. The array is read again at every launch.
struct Tiling {
  pybind11::object array;
  int ndim = 0;
  int64_t tile[kMaxDims] = {};
  kb::ArrayView view;            // the array as it was when the tiling was made (for its properties)
};
// The pybind11 type object of Tiling (set by register_arrays); nullptr before registration.
PyTypeObject* tiling_type();

// true: obj is array-like and `view` is filled. false: obj is not array-like (the caller treats it as a
// scalar). Throws pybind11::error_already_set (bridge.errors.DTypeError, ValueError, BufferError,
// TypeError) for malformed producers. consumer_stream: the raw stream the caller will use, passed to
// __dlpack__(stream=...) (0 is sent as 1 = legacy default); -1 = do not synchronise.
bool intake(PyObject* obj, kb::ArrayView& view, IntakeInfo& info, int64_t consumer_stream,
            IntakeMemo* memo = nullptr);

// The pybind11 type object of ArrayBase (set by register_arrays); nullptr before registration.
PyTypeObject* array_base_type();
// The ArrayBase inside `obj`, which passed PyObject_TypeCheck against array_base_type() (intake.cpp).
ArrayBase& array_base_of(PyObject* obj);

// CAI gives no device id: the driver part may install a resolver (pointer -> device ordinal, -1 if
// unknown). Without one, CAI views report device_id -1 and bridge.asarray resolves it in Python.
using PointerDeviceFn = int (*)(uint64_t ptr);
void set_pointer_device_resolver(PointerDeviceFn fn);

// DLPack dtype mapping (codes from the vendored dlpack.h). dtype_from_dlpack returns DType::invalid
// for anything unsupported (including lanes != 1).
kb::DType dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes);
bool dtype_to_dlpack(kb::DType t, uint8_t& code, uint8_t& bits);
// NumPy/CAI typestr ("<f4", "|b1", ...) of `n` bytes -> DType; invalid when unknown, of non-native
// byte order, or with any byte past the type (a NUL included: "<f4\0junk" is not float32).
kb::DType dtype_from_typestr(const char* s, size_t n);
const char* dtype_typestr(kb::DType t);  // nullptr when the type has no typestr (bf16, float8, ...)

// Raise a class of bridge.errors (e.g. "DTypeError") with `message`.
[[noreturn]] void raise_bridge_error(const char* cls, const std::string& message);

// ---- hardening helpers (shared by intake, the launcher and the contract bindings) -----------------------

// Errors intake may translate: Exceptions other than MemoryError (KeyboardInterrupt, SystemExit and
// MemoryError always propagate as they are).
bool translatable(const pybind11::error_already_set& err);

// "RuntimeError: boom" for an exception object, without ever raising.
std::string exception_text(PyObject* exc);

// `text` as a Python str, decoding bytes that are not UTF-8 as \xNN escapes: C++ messages quote user
// bytes, and a message must never turn into a UnicodeDecodeError.
pybind11::str utf8_str(const std::string& text);

// LayoutError unless `view` passes kb::ArrayView::overflow_reason() (element count, byte extent and
// address range within 64 bits) and, when it has elements, its data pointer is not NULL (an empty
// array may have none); `producer` names where the view came from ("DLPack tensor", ...).
void check_view_extent(const kb::ArrayView& view, const char* producer);
// The LayoutError for a view with elements but a NULL data pointer (check_view_extent raises it, and
// DLPack intake for a NULL `data` that a byte_offset moved off address 0).
[[noreturn]] void raise_null_data(const kb::ArrayView& view, const char* producer);

// In a failed intake of argument `pos` of `kernel`: re-raise `err` as a LaunchContractError subclass
// whose message starts "kernel: argument 'name' (#pos): ". A LaunchContractError keeps its class; any
// other Exception becomes ArgumentKindError; the original is __cause__. MemoryError and BaseExceptions
// that are not Exceptions (KeyboardInterrupt, ...) propagate unchanged.
[[noreturn]] void raise_for_argument(pybind11::error_already_set& err, const std::string& kernel, int pos,
                                     const std::string& name);

// The kernel a launch configuration is for, computed only when an error message needs it: a known
// name (a Launcher's contract), or the __name__ of a Dispatcher's miss-callback owner.
struct KernelName {
  const std::string* name = nullptr;
  PyObject* miss_callback = nullptr;  // borrowed
  std::string get() const;
};

// grid / block of a launch: None -> zeros (derive / default); an int -> (n, 1, 1); a tuple or list of
// 1..3 ints, padded with 1. Integers beyond int64 saturate (the validator then reports the range).
// Errors are GridSizeError / BlockSizeError naming the kernel (the *TypeError subclasses for a wrong
// type or number of dimensions); what: "grid" or "block".
void parse_launch_dims(PyObject* obj, const char* what, int64_t out[3], const KernelName& kernel);

// shared_mem of a launch: None -> -1 (the contract's); else an int (SharedMemoryError otherwise),
// non-negative unless negative_ok (_native.validate leaves negative values to the validator).
int64_t parse_shared_mem(PyObject* obj, const KernelName& kernel, bool negative_ok = false);

// DLPack export (dlpack_export.cpp): a "dltensor_versioned" or legacy "dltensor" capsule of `array`
// (an ArrayBase instance) whose manager_ctx keeps `array` alive until the consumer's deleter runs.
pybind11::capsule make_dlpack_capsule(pybind11::handle array, bool versioned, bool readonly_flag);

}  // namespace kb::native
