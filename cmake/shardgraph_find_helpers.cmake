# Helpers of the find modules next to this file.
#
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

# shardgraph_version_from_header(<out> <header> <prefix> <part>...): "1.2.3" from the header's
# "#define <prefix><part> <number>" lines, one number per part, in the order given; empty when the
# header is missing.
function(shardgraph_version_from_header out header prefix)
  set(version "")
  if(EXISTS "${header}")
    list(JOIN ARGN "|" parts)
    file(STRINGS "${header}" lines REGEX "^#define ${prefix}(${parts})[ \t]+[0-9]+")
    set(numbers)
    foreach(part IN LISTS ARGN)
      string(REGEX REPLACE ".*#define ${prefix}${part}[ \t]+([0-9]+).*" "\\1" number "${lines}")
      list(APPEND numbers "${number}")
    endforeach()
    list(JOIN numbers "." version)
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# shardgraph_imported_library(<target> <library> <include_dir>): the imported target of a found
# library (its file and its headers' folder), unless it exists already.
function(shardgraph_imported_library target library include_dir)
  if(NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${library}"
      INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
  endif()
endfunction()
