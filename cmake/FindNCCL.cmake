# FindNCCL: locates the NVIDIA Collective Communications Library.
#
# Result: the imported target NCCL::NCCL (headers + libnccl), and the variables NCCL_FOUND,
# NCCL_VERSION (from nccl.h), NCCL_INCLUDE_DIR, NCCL_LIBRARY.
#
# Searched, in order: NCCL_ROOT and NCCL_HOME (CMake or environment variables), the CUDA toolkit
# (CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH, /usr/local/cuda), then the system folders
# (/usr/include, /usr/lib/x86_64-linux-gnu, ...). Set NCCL_USE_STATIC=ON to prefer libnccl_static.a.
include(FindPackageHandleStandardArgs)
include("${CMAKE_CURRENT_LIST_DIR}/shardgraph_find_helpers.cmake")

shardgraph_find_hints(_nccl_hints CUDA VARS NCCL_ROOT NCCL_HOME CUDAToolkit_ROOT CUDA_HOME CUDA_PATH)

find_path(NCCL_INCLUDE_DIR
  NAMES nccl.h
  HINTS ${_nccl_hints}
  PATH_SUFFIXES include
  PATHS /usr/include /usr/local/include)

if(NCCL_USE_STATIC)
  set(_nccl_names nccl_static nccl)
else()
  set(_nccl_names nccl nccl_static)
endif()
find_library(NCCL_LIBRARY
  NAMES ${_nccl_names}
  HINTS ${_nccl_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu
  PATHS /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib /usr/local/lib)

set(_nccl_header)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  set(_nccl_header "${NCCL_INCLUDE_DIR}/nccl.h")
  shardgraph_version_from_header(NCCL_VERSION "${_nccl_header}" NCCL_ MAJOR MINOR PATCH)
endif()

find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR _nccl_header
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  shardgraph_imported_library(NCCL::NCCL "${NCCL_LIBRARY}" "${NCCL_INCLUDE_DIR}")
endif()

mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
unset(_nccl_hints)
unset(_nccl_header)
unset(_nccl_names)
