# shardgraph_find_hints(<out> [CUDA] VARS <name>...): the folders to search for a dependency, from
# each named CMake variable and environment variable that is set, in the order given; with CUDA,
# then the CUDA toolkit's own folders (CUDAToolkit_LIBRARY_ROOT, /usr/local/cuda). Used by the
# find modules next to this file.
function(shardgraph_find_hints out)
  cmake_parse_arguments(PARSE_ARGV 1 arg "CUDA" "" "VARS")
  set(hints)
  foreach(var IN LISTS arg_VARS)
    if(DEFINED ${var})
      list(APPEND hints "${${var}}")
    endif()
    if(DEFINED ENV{${var}})
      list(APPEND hints "$ENV{${var}}")
    endif()
  endforeach()
  if(arg_CUDA)
    if(CUDAToolkit_LIBRARY_ROOT)
      list(APPEND hints "${CUDAToolkit_LIBRARY_ROOT}")
    endif()
    list(APPEND hints /usr/local/cuda)
  endif()
  set(${out} "${hints}" PARENT_SCOPE)
endfunction()
