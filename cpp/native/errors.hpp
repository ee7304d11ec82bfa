// Turning validator errors into the Python exception classes of bridge/errors.py.
#pragma once
#include <pybind11/pybind11.h>
#include "kernelbridge/contract.hpp"

namespace kb::native {
// Raise the bridge.errors class for e.code with e.message (throws pybind11::error_already_set).
[[noreturn]] void throw_contract_error(const kb::Error& e, const std::string& kernel);
}  // namespace kb::native
