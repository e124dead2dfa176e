# The backend switches SHARDGRAPH_WITH_<BACKEND> and the INTERFACE target of each backend.
#
# Each switch takes AUTO (default), ON or OFF:
#   AUTO  build the backend when its dependency is found; otherwise say once why it was skipped;
#   ON    a missing dependency stops the configure with the same where/why/how;
#   OFF   skip the backend without a word.

# shardgraph_backend_switch(<backend> <mode-out>): declares SHARDGRAPH_WITH_<BACKEND> and returns its
# value normalised to AUTO, ON or OFF.
function(shardgraph_backend_switch backend mode_out)
  string(TOUPPER "${backend}" upper)
  set(switch "SHARDGRAPH_WITH_${upper}")
  set(${switch} AUTO CACHE STRING "Build the ${backend} backend: AUTO (when its dependency is found), ON or OFF")
  set_property(CACHE ${switch} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${switch}}" value)
  if(value STREQUAL "AUTO")
    set(mode AUTO)
  elseif(value MATCHES "^(ON|YES|TRUE|Y|1)$")
    set(mode ON)
  elseif(value MATCHES "^(OFF|NO|FALSE|N|0)$")
    set(mode OFF)
  else()
    message(FATAL_ERROR "shardgraph: ${switch}: '${${switch}}' is not a valid value. "
                        "use -D${switch}=AUTO, ON or OFF")
  endif()
  set(${mode_out} ${mode} PARENT_SCOPE)
endfunction()

# shardgraph_backend_unavailable(<backend> <mode> <why> <how>): reports a backend that cannot be
# built: a fatal error when it was asked for (ON), one message when AUTO.
function(shardgraph_backend_unavailable backend mode why how)
  string(TOUPPER "${backend}" upper)
  set(kind backend)
  if(backend STREQUAL "text")
    set(kind component)
  endif()
  if(mode STREQUAL "ON")
    message(FATAL_ERROR "shardgraph: ${kind} '${backend}' (-DSHARDGRAPH_WITH_${upper}=ON): ${why}. "
                        "${how}; or build without it: -DSHARDGRAPH_WITH_${upper}=OFF")
  elseif(mode STREQUAL "AUTO")
    message(NOTICE "shardgraph: ${kind} '${backend}' skipped: ${why}. "
                   "${how}; -DSHARDGRAPH_WITH_${upper}=OFF skips it silently")
  endif()
endfunction()

# shardgraph_add_backend(<backend> [VERSION <text>] [LINK <targets...>]): the INTERFACE target
# shardgraph_<backend>, used as shardgraph::<backend> (its one spelling, here and when installed).
# Its headers live in backends/<backend>/include/shardgraph/<backend>/; the folder need not exist
# yet, since an INTERFACE target's build include folders are not checked.
function(shardgraph_add_backend backend)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "VERSION" "LINK")
  set(target shardgraph_${backend})
  add_library(${target} INTERFACE)
  add_library(shardgraph::${backend} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${backend})
  target_include_directories(${target} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/backends/${backend}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} INTERFACE shardgraph::core ${arg_LINK})
  set_property(GLOBAL APPEND PROPERTY SHARDGRAPH_ENABLED_BACKENDS ${backend})
  set_property(GLOBAL PROPERTY SHARDGRAPH_BACKEND_VERSION_${backend} "${arg_VERSION}")
endfunction()

# shardgraph_backend_summary(<out>): one line naming the built backends (with the version of what
# they use) and those not built, e.g.
#   "core, cpu (Eigen 3.4.0), threads, mpi (MPI 3.1); not built: cuda, nccl, kokkos"
function(shardgraph_backend_summary out)
  get_property(enabled GLOBAL PROPERTY SHARDGRAPH_ENABLED_BACKENDS)
  set(built core)
  set(not_built)
  foreach(backend cpu threads mpi cuda nccl kokkos text)
    if(backend IN_LIST enabled)
      get_property(version GLOBAL PROPERTY SHARDGRAPH_BACKEND_VERSION_${backend})
      if(version)
        list(APPEND built "${backend} (${version})")
      else()
        list(APPEND built "${backend}")
      endif()
    else()
      list(APPEND not_built ${backend})
    endif()
  endforeach()
  list(JOIN built ", " line)
  if(not_built)
    list(JOIN not_built ", " not_built)
    string(APPEND line "; not built: ${not_built}")
  endif()
  set(${out} "${line}" PARENT_SCOPE)
endfunction()

# shardgraph_disabled_backends(<out> <targets...>): the backends among <targets> (spelled
# shardgraph::<backend>) that are not built in this configuration; empty when all are.
function(shardgraph_disabled_backends out)
  set(disabled)
  foreach(target IN LISTS ARGN)
    if(target MATCHES "^shardgraph::(.+)$" AND NOT TARGET ${target})
      list(APPEND disabled ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} ${disabled} PARENT_SCOPE)
endfunction()

# shardgraph_skip_without_backends(<out> <what> <targets...>): <out> is TRUE, with the configure
# message "shardgraph: <what> skipped: backend '<b>' is not built", when a backend among <targets>
# is not built (shardgraph_disabled_backends); FALSE when all are. The caller then adds nothing.
function(shardgraph_skip_without_backends out what)
  shardgraph_disabled_backends(disabled ${ARGN})
  set(${out} FALSE PARENT_SCOPE)
  if(disabled)
    string(REPLACE ";" "', '" disabled "${disabled}")
    message(STATUS "shardgraph: ${what} skipped: backend '${disabled}' is not built")
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()
