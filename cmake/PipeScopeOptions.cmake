# Warnings, sanitizers and the AUTO/ON/OFF resolution of the optional parts.

add_library(pipescope_warnings INTERFACE)
# C++ sources get the full set; CUDA sources pass the common ones to their host
# compiler (nvcc knows none of them itself). A switch over an enum that misses
# one of its values is an error: a schedule, op kind or format added later
# must be handled wherever one is switched on, not fall through to a default.
target_compile_options(pipescope_warnings INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror=switch>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
# A unity build includes a library's .cpp files into one unit, where gcc takes
# each included file for a header and warns of every class of its that uses a
# type of its anonymous namespace (-Wsubobject-linkage): right for a header
# included by several units, wrong for a .cpp included once.
if(CMAKE_UNITY_BUILD)
  target_compile_options(pipescope_warnings INTERFACE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-subobject-linkage>)
endif()

# Sanitizers instrument the C++ code; CUDA sources (device code, and their host
# side compiled by nvcc) are left as they are.
if(PIPESCOPE_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${PIPESCOPE_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${PIPESCOPE_SANITIZE})
endif()

# pipescope_resolve_option(<var> <found>): turns AUTO into ON or OFF by whether the
# dependency was found, and fails when ON was asked for and it was not.
function(pipescope_resolve_option var found what)
  if(${var} STREQUAL "AUTO")
    if(${found})
      set(${var}_ENABLED ON PARENT_SCOPE)
    else()
      set(${var}_ENABLED OFF PARENT_SCOPE)
    endif()
  elseif(${var})
    if(NOT ${found})
      message(FATAL_ERROR "${var}=ON but ${what} was not found")
    endif()
    set(${var}_ENABLED ON PARENT_SCOPE)
  else()
    set(${var}_ENABLED OFF PARENT_SCOPE)
  endif()
endfunction()

include(CheckLanguage)
if(NOT PIPESCOPE_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
endif()
set(_cuda_found OFF)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_found ON)
endif()
pipescope_resolve_option(PIPESCOPE_WITH_CUDA _cuda_found "the CUDA toolkit")

set(_qt_found OFF)
if(NOT PIPESCOPE_WITH_GUI STREQUAL "OFF")
  find_package(Qt6 QUIET COMPONENTS Widgets Charts Svg Concurrent)
  if(Qt6_FOUND)
    set(_qt_found ON)
  endif()
endif()
pipescope_resolve_option(PIPESCOPE_WITH_GUI _qt_found "Qt 6 (Widgets, Charts, Svg, Concurrent)")

set(_mpi_found OFF)
if(NOT PIPESCOPE_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(_mpi_found ON)
  endif()
endif()
pipescope_resolve_option(PIPESCOPE_WITH_MPI _mpi_found "OpenMPI")

# The Python module (python/): AUTO builds it when the Python that CMake finds
# (Python_EXECUTABLE) has nanobind, as the environment of scripts/python-venv.sh
# does.
set(_python_found OFF)
if(NOT PIPESCOPE_WITH_PYTHON STREQUAL "OFF")
  find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                    RESULT_VARIABLE _no_nanobind OUTPUT_QUIET ERROR_QUIET)
    if(NOT _no_nanobind)
      set(_python_found ON)
    endif()
  endif()
endif()
pipescope_resolve_option(PIPESCOPE_WITH_PYTHON _python_found "Python 3.9+ with its headers and nanobind")

message(STATUS "PipeScope: CUDA ${PIPESCOPE_WITH_CUDA_ENABLED}, GUI ${PIPESCOPE_WITH_GUI_ENABLED}, MPI ${PIPESCOPE_WITH_MPI_ENABLED}, Python ${PIPESCOPE_WITH_PYTHON_ENABLED}"
               " (CUDA: kernels, CudaDevice and selftest)")
