// Turning Python / NumPy / ml_dtypes scalars into kb::ArgValue, the validator's view of a scalar.
//
// Why shared: the validate() binding and the launcher's hot path must read scalars identically, so
// the same value is accepted, range-checked and packed the same way everywhere.
#pragma once
#include <Python.h>
#include "kernelbridge/contract.hpp"

namespace kb::native {
// Fills `v` (kind scalar) from `o`. Returns true when `o` is a scalar: Python bool/int/float/complex or
// a NumPy / ml_dtypes scalar; unusable scalars (complex, ...) come back with scalar_kind none and
// scalar_dtype set, so the validator reports a dtype error. Returns false for anything else (an array
// or another object; v.type_name is set for messages). Never leaves a Python error set.
// v.type_name points into the type object of `o`: keep `o` alive while `v` is used.
bool argvalue_from_scalar(PyObject* o, kb::ArgValue& v);
}  // namespace kb::native
