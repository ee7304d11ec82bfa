// bridge._native: the parts of the runtime that must be fast or shared with C++ (see docs/architecture.md).
#include "intake_fast.hpp"
#include "native.hpp"

PYBIND11_MODULE(_native, m) {
  m.doc() = "kernelbridge native runtime: contract validator, array intake, launch hot path";
  kb::native::register_contract(m);
  kb::native::register_arrays(m);
  kb::native::register_driver(m);
  kb::native::register_launch(m);
  kb::native::register_cpp_example(m);
  kb::native::fast::register_fast_intake(m);
}
