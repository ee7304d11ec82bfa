// Registration entry points of the parts of bridge._native; each lives in its own .cpp file.
#pragma once
#include <pybind11/pybind11.h>

namespace kb::native {
void register_contract(pybind11::module_& m);   // contract_bindings.cpp: Contract, validate()
void register_arrays(pybind11::module_& m);     // array_bindings.cpp: ArrayBase, intake, DLPack export
void register_driver(pybind11::module_& m);     // driver_api.cpp: dlopen'd libcuda status
void register_launch(pybind11::module_& m);     // launcher.cpp: Launcher, Dispatcher, fault records
void register_cpp_example(pybind11::module_& m); // cpp_entry_example.cpp: cpp_example_saxpy (C++ entry point example)
}  // namespace kb::native
