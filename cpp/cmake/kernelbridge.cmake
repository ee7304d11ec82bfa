# kernelbridge.cmake — build CUDA C++ modules that kernelbridge can load with their launch contracts.
#
#   include(<dir>/kernelbridge.cmake)            # or: find_package(kernelbridge CONFIG REQUIRED)
#   kernelbridge_add_cuda_module(my_kernels
#       SOURCES kernels/a.cu kernels/b.cu
#       ARCHS 80 90                              # SASS for each, plus PTX of the highest (default 80 90)
#       [OUTPUT_DIR <dir>]                       # default: ${CMAKE_CURRENT_BINARY_DIR}
#       [INCLUDE_DIRS <dir>...] [DEFINES <NAME[=value]>...] [OPTIONS <nvcc option>...]
#       [COMPRESS_MODE none|speed|size|balance|default]   # default none (see below)
#       [TARGET <target-name>]                   # default: <name>
#       [INSTALL_DESTINATION <dir>])
#
# Produces <OUTPUT_DIR>/<name>.fatbin through `nvcc -fatbin` (a custom command: no CUDA language
# support, no GPU and no CUDA runtime library are needed) and a target (default <name>) built by `all`.
# The fatbin path is the target property KERNELBRIDGE_FATBIN. Several SOURCES are compiled as ONE
# translation unit (a generated file that #includes them), so the module keeps whole-program
# optimisation and its PTX; names with internal linkage must then not collide between the files.
# The include directory holding kernelbridge/kernel_contract.cuh is added automatically.
# COMPRESS_MODE defaults to none so that bridge.fatbin can read every entry without a zstd module
# (only passed to nvcc >= 12.8, which knows the option).
#
# nvcc is found by kernelbridge's one toolkit locator (bridge/toolkit.py, run with Python), the same one
# the DSL and `python -m dsl doctor` use: -DKB_NVCC=<path> (or $KB_NVCC), else CMAKE_CUDA_COMPILER, else
# KB_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, PATH, NVIDIA's wheels, /usr/local/cuda. Every KB_* override
# (KB_CUDA_HOME, KB_NVCC, KB_CUDA_INCLUDE, ...) is read from the environment and from -D cache variables
# alike. The old spelling -DKERNELBRIDGE_NVCC still works, with a deprecation warning.
# kernelbridge_locate(<item> <var>) gives any item of the locator (nvcc, ptxas, cuda-include, ...).
include_guard(GLOBAL)

if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR "kernelbridge.cmake needs CMake >= 3.20 (DEPFILE support), this is ${CMAKE_VERSION}")
endif()

get_filename_component(KERNELBRIDGE_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
set(KERNELBRIDGE_DEFAULT_ARCHS 80 90)

# The locator script: bridge/cmake/../toolkit.py when installed, cpp/cmake/../../bridge/toolkit.py in a
# source checkout.
set(KERNELBRIDGE_TOOLKIT_PY "")
foreach(_kb_candidate "${CMAKE_CURRENT_LIST_DIR}/../toolkit.py" "${CMAKE_CURRENT_LIST_DIR}/../../bridge/toolkit.py")
  if(EXISTS "${_kb_candidate}")
    get_filename_component(KERNELBRIDGE_TOOLKIT_PY "${_kb_candidate}" ABSOLUTE)
    break()
  endif()
endforeach()
set(KERNELBRIDGE_OVERRIDE_VARS KB_CUDA_HOME KB_NVCC KB_PTXAS KB_CUOBJDUMP KB_NVDISASM KB_COMPUTE_SANITIZER
    KB_LIBDEVICE KB_CUDA_INCLUDE)

# The Python that runs the locator: Python_EXECUTABLE / Python3_EXECUTABLE when the project has one.
function(_kernelbridge_python out_var)
  foreach(var Python_EXECUTABLE Python3_EXECUTABLE)
    if(${var})
      set(${out_var} "${${var}}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(${out_var} "${Python3_EXECUTABLE}" PARENT_SCOPE)
endfunction()

# kernelbridge_locate(<item> <var>): <var> = path of locator item <item> (nvcc, ptxas, cuobjdump,
# nvdisasm, compute-sanitizer, libdevice, cuda-include) or <var>-NOTFOUND; <var>_BY = how it was found;
# <var>_PROBLEM / <var>_HINT = what went wrong and how to get it. Remembered per configure run.
function(kernelbridge_locate item var)
  set(env "")
  if(DEFINED KERNELBRIDGE_NVCC AND NOT DEFINED KB_NVCC)
    get_property(warned GLOBAL PROPERTY _KERNELBRIDGE_NVCC_DEPRECATION)
    if(NOT warned)
      message(DEPRECATION "kernelbridge: KERNELBRIDGE_NVCC is deprecated, use KB_NVCC (the one spelling "
                          "the DSL and CMake share)")
      set_property(GLOBAL PROPERTY _KERNELBRIDGE_NVCC_DEPRECATION TRUE)
    endif()
    set(KB_NVCC "${KERNELBRIDGE_NVCC}")
  endif()
  foreach(name IN LISTS KERNELBRIDGE_OVERRIDE_VARS)
    if(DEFINED ${name})
      list(APPEND env "${name}=${${name}}")
    endif()
  endforeach()
  string(MD5 key "${item};${env};$ENV{PATH};$ENV{CUDA_HOME};$ENV{CUDA_PATH}")
  get_property(memo GLOBAL PROPERTY "_KERNELBRIDGE_LOCATED_${key}")
  if(NOT memo)
    _kernelbridge_python(python)
    set(out "${CMAKE_BINARY_DIR}/CMakeFiles/kernelbridge_locate_${key}.cmake")
    if(NOT python OR NOT KERNELBRIDGE_TOOLKIT_PY)
      set(memo "" "not found" "no Python interpreter (or no bridge/toolkit.py) to run the toolkit locator"
               "pass -DPython_EXECUTABLE=<python> or -DKB_NVCC=<path>")
    else()
      execute_process(
        COMMAND "${CMAKE_COMMAND}" -E env ${env} "${python}" -c
                "import importlib.util as u, sys; s = u.spec_from_file_location('kb_toolkit', sys.argv[1]); m = u.module_from_spec(s); sys.modules['kb_toolkit'] = m; s.loader.exec_module(m); sys.exit(m._cmake_main(sys.argv[2:]))"
                "${KERNELBRIDGE_TOOLKIT_PY}" --cmake "${out}" "${item}"
        WORKING_DIRECTORY "${CMAKE_BINARY_DIR}" RESULT_VARIABLE rc ERROR_VARIABLE err)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "kernelbridge: the toolkit locator failed (${python} ${KERNELBRIDGE_TOOLKIT_PY}):\n${err}")
      endif()
      string(MAKE_C_IDENTIFIER "${item}" id)
      string(TOUPPER "${id}" id)
      include("${out}")
      set(memo "${KB_LOCATED_${id}}" "${KB_LOCATED_${id}_BY}" "${KB_LOCATED_${id}_PROBLEM}"
               "${KB_LOCATED_${id}_HINT}")
    endif()
    set_property(GLOBAL PROPERTY "_KERNELBRIDGE_LOCATED_${key}" "${memo}")
  endif()
  list(GET memo 0 path)
  list(GET memo 1 by)
  list(GET memo 2 problem)
  list(GET memo 3 hint)
  if(path)
    set(${var} "${path}" PARENT_SCOPE)
  else()
    set(${var} "${var}-NOTFOUND" PARENT_SCOPE)
  endif()
  set(${var}_BY "${by}" PARENT_SCOPE)
  set(${var}_PROBLEM "${problem}" PARENT_SCOPE)
  set(${var}_HINT "${hint}" PARENT_SCOPE)
endfunction()

# kernelbridge_find_nvcc(<out-var>): path of nvcc, or <out-var>-NOTFOUND (+ <out-var>_BY/_PROBLEM/_HINT).
function(kernelbridge_find_nvcc out_var)
  if(CMAKE_CUDA_COMPILER AND NOT DEFINED KB_NVCC AND NOT DEFINED KERNELBRIDGE_NVCC)
    set(${out_var} "${CMAKE_CUDA_COMPILER}" PARENT_SCOPE)
    set(${out_var}_BY "CMAKE_CUDA_COMPILER" PARENT_SCOPE)
    set(${out_var}_PROBLEM "" PARENT_SCOPE)
    set(${out_var}_HINT "" PARENT_SCOPE)
    return()
  endif()
  kernelbridge_locate(nvcc found)
  foreach(suffix "" _BY _PROBLEM _HINT)
    set(${out_var}${suffix} "${found${suffix}}" PARENT_SCOPE)
  endforeach()
  if(NOT found)
    set(${out_var} "${out_var}-NOTFOUND" PARENT_SCOPE)
  endif()
endfunction()

# nvcc's "release X.Y" as X.Y (cached per nvcc path).
function(_kernelbridge_nvcc_version nvcc out_var)
  string(MAKE_C_IDENTIFIER "${nvcc}" key)
  if(NOT DEFINED _KERNELBRIDGE_NVCC_VERSION_${key})
    execute_process(COMMAND "${nvcc}" --version OUTPUT_VARIABLE text ERROR_QUIET RESULT_VARIABLE rc)
    set(version 0.0)
    if(rc EQUAL 0 AND text MATCHES "release ([0-9]+\\.[0-9]+)")
      set(version "${CMAKE_MATCH_1}")
    endif()
    set(_KERNELBRIDGE_NVCC_VERSION_${key} "${version}" CACHE INTERNAL "nvcc version")
  endif()
  set(${out_var} "${_KERNELBRIDGE_NVCC_VERSION_${key}}" PARENT_SCOPE)
endfunction()

function(kernelbridge_add_cuda_module name)
  cmake_parse_arguments(PARSE_ARGV 1 KB "" "OUTPUT_DIR;COMPRESS_MODE;INSTALL_DESTINATION;TARGET"
                        "SOURCES;ARCHS;INCLUDE_DIRS;DEFINES;OPTIONS")
  if(KB_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kernelbridge_add_cuda_module(${name}): unknown arguments: ${KB_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT KB_SOURCES)
    message(FATAL_ERROR "kernelbridge_add_cuda_module(${name}): SOURCES is required (one or more .cu files)")
  endif()
  if(NOT KB_ARCHS)
    set(KB_ARCHS ${KERNELBRIDGE_DEFAULT_ARCHS})
  endif()
  if(NOT KB_OUTPUT_DIR)
    set(KB_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  if(NOT KB_TARGET)
    set(KB_TARGET ${name})
  endif()
  if(NOT KB_COMPRESS_MODE)
    set(KB_COMPRESS_MODE none)
  endif()

  kernelbridge_find_nvcc(nvcc)
  if(NOT nvcc)
    message(FATAL_ERROR "kernelbridge_add_cuda_module(${name}): nvcc not found (${nvcc_PROBLEM}); "
                        "to get it: ${nvcc_HINT}")
  endif()

  # -gencode per arch (SASS), plus PTX for the numerically highest arch (forward compatibility).
  set(gencode "")
  set(highest "")
  set(highest_num -1)
  foreach(arch IN LISTS KB_ARCHS)
    if(NOT arch MATCHES "^([0-9]+)[af]?$")
      message(FATAL_ERROR "kernelbridge_add_cuda_module(${name}): ARCHS entry '${arch}' is not an SM number like 80, 90 or 90a")
    endif()
    list(APPEND gencode -gencode "arch=compute_${arch},code=sm_${arch}")
    if(CMAKE_MATCH_1 GREATER highest_num)
      set(highest_num ${CMAKE_MATCH_1})
      set(highest ${arch})
    endif()
  endforeach()
  list(APPEND gencode -gencode "arch=compute_${highest},code=compute_${highest}")

  set(sources "")
  foreach(src IN LISTS KB_SOURCES)
    get_filename_component(abs "${src}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND sources "${abs}")
  endforeach()
  list(LENGTH sources nsources)
  if(nsources EQUAL 1)
    set(main_source "${sources}")
  else()
    set(main_source "${KB_OUTPUT_DIR}/${name}.kb_unity.cu")
    set(text "// generated by kernelbridge_add_cuda_module(${name}): one translation unit\n")
    foreach(abs IN LISTS sources)
      string(APPEND text "#include \"${abs}\"\n")
    endforeach()
    file(CONFIGURE OUTPUT "${main_source}" CONTENT "${text}" @ONLY)
  endif()

  set(flags -fatbin -O3 -std=c++17 "-I${KERNELBRIDGE_INCLUDE_DIR}")
  foreach(dir IN LISTS KB_INCLUDE_DIRS)
    get_filename_component(abs "${dir}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND flags "-I${abs}")
  endforeach()
  foreach(def IN LISTS KB_DEFINES)
    list(APPEND flags "-D${def}")
  endforeach()
  _kernelbridge_nvcc_version("${nvcc}" nvcc_version)
  if(nvcc_version VERSION_GREATER_EQUAL 12.8)
    list(APPEND flags "-compress-mode=${KB_COMPRESS_MODE}")
  endif()
  list(APPEND flags ${KB_OPTIONS})

  set(output "${KB_OUTPUT_DIR}/${name}.fatbin")
  set(depfile "${KB_OUTPUT_DIR}/${name}.fatbin.d")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${KB_OUTPUT_DIR}"
    COMMAND "${nvcc}" ${flags} ${gencode} -MD -MF "${depfile}" -o "${output}" "${main_source}"
    DEPENDS ${sources} "${KERNELBRIDGE_INCLUDE_DIR}/kernelbridge/kernel_contract.cuh"
    DEPFILE "${depfile}"
    COMMENT "kernelbridge: ${name}.fatbin (SASS sm ${KB_ARCHS}, PTX compute_${highest})"
    VERBATIM)
  add_custom_target(${KB_TARGET} ALL DEPENDS "${output}")
  set_target_properties(${KB_TARGET} PROPERTIES KERNELBRIDGE_FATBIN "${output}")
  if(KB_INSTALL_DESTINATION)
    install(FILES "${output}" DESTINATION "${KB_INSTALL_DESTINATION}")
  endif()
endfunction()
