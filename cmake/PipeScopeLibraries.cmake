# How PipeScope's libraries are built and found.
#
# costmodels, sim and exec are shared libraries, in <build>/lib, so that one
# copy of each serves the command, the app, the tests and the backends, and so
# that the executor can come in several builds, one per x86-64 level (below).
# The command finds them through its RUNPATH ($ORIGIN/../lib once installed).

set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
set(CMAKE_INSTALL_RPATH "$ORIGIN/../lib")
# The build tree's run paths are relative too ($ORIGIN/../lib): a copy of the
# command and its libraries runs wherever it is put (the tests move one away
# from the backend libraries).
set(CMAKE_BUILD_RPATH_USE_ORIGIN ON)

# The executor's kernels for each processor from one portable build: exec/compute
# (what computes an op) is built once for the x86-64 baseline and once for each
# level listed here, each copy in <lib>/glibc-hwcaps/<level>/ under the same name. At start-up the
# dynamic loader (glibc 2.33 and later) takes the copy of the highest level
# this processor supports, so the same binary uses AVX2 and FMA (x86-64-v3) or
# AVX-512 (x86-64-v4) where they exist and runs anywhere. Empty builds the
# baseline only (the sanitizer builds).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(_pipescope_default_levels "x86-64-v3;x86-64-v4")
else()
  set(_pipescope_default_levels "")
endif()
set(PIPESCOPE_EXEC_LEVELS "${_pipescope_default_levels}" CACHE STRING
    "x86-64 levels the executor is also built for, picked at start-up (empty: baseline only)")

# Every library that builds with Eigen agrees on its alignment, whatever
# instruction set it is compiled for: Eigen otherwise aligns heap blocks to 16
# bytes with SSE and to 32 with AVX, and a matrix allocated by one copy and
# freed by another would be freed wrongly.
set(PIPESCOPE_EIGEN_ABI EIGEN_MAX_ALIGN_BYTES=64 EIGEN_MAX_STATIC_ALIGN_BYTES=64)

# pipescope_shared_library(<target>): calls inside the library bind to the
# library's own functions, as they would in a static library: its ordinary
# functions at compile time (no interposition through the PLT), and its
# template and inline functions (Eigen's kernels among them) at link time, so
# that a program defining the same instantiations, compiled for another
# instruction set, cannot take their place.
function(pipescope_shared_library target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-fno-semantic-interposition>)
  target_link_options(${target} PRIVATE -Wl,-Bsymbolic-functions)
  # Every symbol a library uses comes from itself or from what it links: a
  # call into a library it may not use fails here, at its link. (The
  # sanitizers' runtimes are linked into programs only, so their builds
  # leave it out.)
  if(NOT PIPESCOPE_SANITIZE)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
endfunction()
