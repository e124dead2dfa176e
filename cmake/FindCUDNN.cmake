# FindCUDNN: locates NVIDIA cuDNN 9 (its backend graph API: cudnn.h and libcudnn).
#
# Result: the imported target CUDNN::CUDNN, and the variables CUDNN_FOUND, CUDNN_VERSION (from
# cudnn_version.h), CUDNN_INCLUDE_DIR, CUDNN_LIBRARY.
#
# Searched, in order: CUDNN_ROOT (CMake or environment variable), the CUDA toolkit
# (CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH, /usr/local/cuda), then the system folders (Debian and
# Ubuntu's libcudnn9-dev puts cudnn.h in /usr/include/x86_64-linux-gnu).
include(FindPackageHandleStandardArgs)
include("${CMAKE_CURRENT_LIST_DIR}/shardgraph_find_helpers.cmake")

shardgraph_find_hints(_cudnn_hints CUDA VARS CUDNN_ROOT CUDAToolkit_ROOT CUDA_HOME CUDA_PATH)

find_path(CUDNN_INCLUDE_DIR
  NAMES cudnn_version.h
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES include
  PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu /usr/include /usr/local/include)
find_library(CUDNN_LIBRARY
  NAMES cudnn
  HINTS ${_cudnn_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu
  PATHS /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib /usr/local/lib)

set(_cudnn_header)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  set(_cudnn_header "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  shardgraph_version_from_header(CUDNN_VERSION "${_cudnn_header}" CUDNN_ MAJOR MINOR PATCHLEVEL)
endif()

find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR _cudnn_header
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND)
  shardgraph_imported_library(CUDNN::CUDNN "${CUDNN_LIBRARY}" "${CUDNN_INCLUDE_DIR}")
endif()

mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
unset(_cudnn_hints)
unset(_cudnn_header)
