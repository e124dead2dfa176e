# Every public header compiles on its own: one generated translation unit per header, holding only
# `#include <that header>`, built in the default build as an OBJECT library (ccache caches it), so
# a header that misses an include, or leans on one that its includer happened to make first, fails
# the build. Included by tests/CMakeLists.txt.
#
#   shardgraph_add_header_test(<name> INCLUDE_DIR <dir> LINK <target> [UNDER <folder>] [EXCLUDE <folder>])
#     The object library header_test_<name>: a TU for every <dir>/shardgraph/**/*.hpp (only those
#     in <dir>/<folder> with UNDER, none of those in <dir>/<folder> with EXCLUDE), compiled
#     with <target>'s include directories and definitions and the project's warnings (-Werror).
#     A header that declares device code (__global__, __device__, a kernel launch, a .cuh kernel
#     file), or includes a header of <dir> that does, only nvcc can compile: its TU is a .cu,
#     compiled as CUDA; every other header, cuda's and nccl's host headers included, is compiled
#     as C++; device code is lowered to PTX only (cmake/shardgraph_compile_check.cmake).
include(shardgraph_compile_check)
include(shardgraph_warnings)

# The headers (relative to <dir>) that only nvcc compiles: those declaring device code, and those
# including one of them (#include <...> of a header of <dir>), to the end of the chain.
function(_shardgraph_device_headers out dir)
  set(device)
  set(host)
  foreach(header IN LISTS ARGN)
    file(RELATIVE_PATH relative "${dir}" "${header}")
    file(STRINGS "${header}" device_code REGEX "__global__|__device__|<<<|\\.cuh[\">]")
    if(device_code)
      list(APPEND device "${relative}")
    else()
      list(APPEND host "${relative}")
      file(STRINGS "${header}" lines REGEX "^#include <shardgraph/[^>]*\\.hpp>")
      string(REGEX REPLACE "#include <([^>]*)>[^;]*" "\\1" "includes_${relative}" "${lines}")
    endif()
  endforeach()
  set(changed TRUE)
  while(changed)
    set(changed FALSE)
    foreach(relative IN LISTS host)
      foreach(included IN LISTS "includes_${relative}")
        if(included IN_LIST device)
          list(APPEND device "${relative}")
          list(REMOVE_ITEM host "${relative}")
          set(changed TRUE)
          break()
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(${out} "${device}" PARENT_SCOPE)
endfunction()

function(shardgraph_add_header_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "INCLUDE_DIR;LINK;UNDER;EXCLUDE" "")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_INCLUDE_DIR OR NOT arg_LINK)
    message(FATAL_ERROR "shardgraph: shardgraph_add_header_test(${name}): expected INCLUDE_DIR <dir> "
                        "LINK <target>, got '${ARGN}'. fix the call in tests/CMakeLists.txt")
  endif()
  if(NOT TARGET ${arg_LINK})
    return()
  endif()
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS "${arg_INCLUDE_DIR}/shardgraph/*.hpp")
  if(arg_UNDER)
    list(FILTER headers INCLUDE REGEX "^${arg_INCLUDE_DIR}/${arg_UNDER}/")
  endif()
  if(arg_EXCLUDE)
    list(FILTER headers EXCLUDE REGEX "^${arg_INCLUDE_DIR}/${arg_EXCLUDE}/")
  endif()
  _shardgraph_device_headers(device_headers "${arg_INCLUDE_DIR}" ${headers})
  set(sources)
  foreach(header IN LISTS headers)
    file(RELATIVE_PATH relative "${arg_INCLUDE_DIR}" "${header}")
    set(extension cpp)
    if(relative IN_LIST device_headers)
      set(extension cu)
    endif()
    set(source "${CMAKE_CURRENT_BINARY_DIR}/header_test/${name}/${relative}.${extension}")
    file(CONFIGURE OUTPUT "${source}" CONTENT "#include <${relative}>\n")
    list(APPEND sources "${source}")
  endforeach()
  add_library(header_test_${name} OBJECT ${sources})
  target_link_libraries(header_test_${name} PRIVATE ${arg_LINK})
  shardgraph_target_warnings(header_test_${name})
  shardgraph_cuda_ptx_only(header_test_${name})
endfunction()
