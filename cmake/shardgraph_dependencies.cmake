# What each backend needs from outside, found in one place for both the source tree (CMakeLists.txt)
# and an installed package (shardgraphConfig.cmake), so that both say the same thing when it is missing.
#
#   shardgraph_find_backend_dependency(<backend> <found-out> <version-out> <why-out> <how-out>)
#
# Looks for the dependency of <backend> (cpu threads mpi cuda nccl kokkos) quietly. On success the
# dependency's imported targets exist in the calling directory, <found-out> is TRUE and <version-out>
# reads like "Eigen 3.4.0". On failure <why-out> says what is missing and <how-out> how to get it,
# ready for "shardgraph: <where>: <why>. <how>".
# The find modules shipped next to this file (FindNCCL.cmake, FindKokkosCore.cmake) are put on
# CMAKE_MODULE_PATH only for the duration of the call.

set(_shardgraph_dependency_modules "${CMAKE_CURRENT_LIST_DIR}")

function(shardgraph_find_backend_dependency backend found_out version_out why_out how_out)
  list(PREPEND CMAKE_MODULE_PATH "${_shardgraph_dependency_modules}")
  set(found FALSE)
  set(version "")
  set(why "")
  set(how "")

  if(backend STREQUAL "cpu")
    find_package(Eigen3 3.3 QUIET NO_MODULE)
    if(TARGET Eigen3::Eigen)
      set(found TRUE)
      set(version "Eigen ${Eigen3_VERSION}")
    else()
      set(why "Eigen 3.3 or newer not found (no Eigen3Config.cmake)")
      set(how "install libeigen3-dev (tools/install_deps.sh) or set Eigen3_DIR")
    endif()

  elseif(backend STREQUAL "threads")
    find_package(Threads QUIET)
    if(TARGET Threads::Threads)
      set(found TRUE)
    else()
      set(why "no thread library found (find_package(Threads))")
      set(how "install a toolchain with POSIX threads")
    endif()

  elseif(backend STREQUAL "mpi")
    find_package(MPI QUIET COMPONENTS CXX)
    if(TARGET MPI::MPI_CXX)
      set(found TRUE)
      if(MPI_CXX_VERSION)
        set(version "MPI ${MPI_CXX_VERSION}")
      endif()
    else()
      set(why "MPI for C++ not found (no mpicxx)")
      set(how "install libopenmpi-dev openmpi-bin (tools/install_deps.sh) or set MPI_HOME")
    endif()

  elseif(backend STREQUAL "cuda")
    find_package(CUDAToolkit QUIET)
    if(TARGET CUDA::cudart AND TARGET CUDA::cublasLt)
      set(found TRUE)
      set(version "CUDA ${CUDAToolkit_VERSION}")
      # cuDNN is optional: with it, causal attention may run on its fused kernels (CUDNN::CUDNN).
      find_package(CUDNN 9.6 QUIET)
      if(TARGET CUDNN::CUDNN)
        string(APPEND version ", cuDNN ${CUDNN_VERSION}")
      endif()
    elseif(CUDAToolkit_FOUND)
      set(why "the CUDA toolkit in ${CUDAToolkit_LIBRARY_ROOT} has no cuBLASLt")
      set(how "install the toolkit's cuBLAS (libcublas-dev) or set CUDAToolkit_ROOT to a complete toolkit")
    else()
      set(why "CUDA toolkit not found (no nvcc on PATH, no /usr/local/cuda)")
      set(how "install the CUDA toolkit and put its bin/ on PATH, or set CUDAToolkit_ROOT")
    endif()

  elseif(backend STREQUAL "nccl")
    find_package(NCCL QUIET)
    if(TARGET NCCL::NCCL)
      set(found TRUE)
      set(version "NCCL ${NCCL_VERSION}")
    else()
      if(NOT NCCL_INCLUDE_DIR OR NOT EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
        set(why "nccl.h not found")
      else()
        set(why "libnccl not found (nccl.h is in ${NCCL_INCLUDE_DIR})")
      endif()
      set(how "install libnccl-dev or set NCCL_ROOT to the folder holding include/nccl.h and lib/libnccl.so")
    endif()

  elseif(backend STREQUAL "kokkos")
    find_package(KokkosCore QUIET)
    if(TARGET KokkosCore::KokkosCore)
      set(found TRUE)
      set(version "Kokkos ${KokkosCore_VERSION}")
    elseif(KokkosCore_INCLUDE_DIR)
      set(why "Kokkos_Core.hpp found in ${KokkosCore_INCLUDE_DIR} but no libkokkoscore")
      set(how "install libtrilinos-kokkos-dev (tools/install_deps.sh) or set KokkosCore_ROOT")
    else()
      set(why "Kokkos_Core.hpp not found")
      set(how "install libtrilinos-kokkos-dev (tools/install_deps.sh) or set KokkosCore_ROOT")
    endif()

  else()
    message(FATAL_ERROR "shardgraph: shardgraph_find_backend_dependency: unknown backend '${backend}'. "
                        "use one of cpu threads mpi cuda nccl kokkos")
  endif()

  set(${found_out} ${found} PARENT_SCOPE)
  set(${version_out} "${version}" PARENT_SCOPE)
  set(${why_out} "${why}" PARENT_SCOPE)
  set(${how_out} "${how}" PARENT_SCOPE)
endfunction()
