# find_package(kernelbridge CONFIG) entry point. Locate this directory with
#   python -c "import bridge; print(bridge.cmake_dir())"
# and pass it as -Dkernelbridge_DIR=<dir> (or list it in CMAKE_PREFIX_PATH / find_package PATHS).
# Provides kernelbridge_add_cuda_module(), kernelbridge_find_nvcc(), kernelbridge_locate() and
# KERNELBRIDGE_INCLUDE_DIR.
include("${CMAKE_CURRENT_LIST_DIR}/kernelbridge.cmake")
set(kernelbridge_FOUND TRUE)
