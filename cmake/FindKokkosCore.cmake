# FindKokkosCore: locates the Kokkos core library (headers + libkokkoscore).
#
# Result: the imported target KokkosCore::KokkosCore and the variables KokkosCore_FOUND,
# KokkosCore_VERSION, KokkosCore_INCLUDE_DIR, KokkosCore_LIBRARY.
#
# Why a module of our own: Debian's Trilinos packaging of Kokkos 3.4 (libtrilinos-kokkos-dev) ships a
# KokkosConfig.cmake that points at /usr/lib/include and a static libdl, so find_package(Kokkos) yields
# a target that does not compile. This module reads the headers (/usr/include/trilinos/Kokkos_Core.hpp)
# and the library (libtrilinos_kokkoscore or libkokkoscore) directly.
# A Kokkos found earlier in the same project (a working target Kokkos::kokkos) is used as is.
# Hints: KokkosCore_ROOT, Kokkos_ROOT, KOKKOS_ROOT (CMake or environment variables).
include(FindPackageHandleStandardArgs)

if(TARGET Kokkos::kokkos)
  set(KokkosCore_VERSION "${Kokkos_VERSION}")
  find_package_handle_standard_args(KokkosCore
    REQUIRED_VARS Kokkos_FOUND
    VERSION_VAR KokkosCore_VERSION)
  if(KokkosCore_FOUND AND NOT TARGET KokkosCore::KokkosCore)
    add_library(KokkosCore::KokkosCore INTERFACE IMPORTED)
    set_target_properties(KokkosCore::KokkosCore PROPERTIES INTERFACE_LINK_LIBRARIES Kokkos::kokkos)
  endif()
  return()
endif()

include("${CMAKE_CURRENT_LIST_DIR}/shardgraph_find_helpers.cmake")
shardgraph_find_hints(_kokkos_hints VARS KokkosCore_ROOT Kokkos_ROOT KOKKOS_ROOT)

find_path(KokkosCore_INCLUDE_DIR
  NAMES Kokkos_Core.hpp
  HINTS ${_kokkos_hints}
  PATH_SUFFIXES include include/trilinos trilinos kokkos)

find_library(KokkosCore_LIBRARY
  NAMES kokkoscore trilinos_kokkoscore
  HINTS ${_kokkos_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)

# KOKKOS_VERSION is major * 10000 + minor * 100 + patch (KokkosCore_config.h).
if(KokkosCore_INCLUDE_DIR AND EXISTS "${KokkosCore_INCLUDE_DIR}/KokkosCore_config.h")
  file(STRINGS "${KokkosCore_INCLUDE_DIR}/KokkosCore_config.h" _kokkos_version_line
       REGEX "^#define KOKKOS_VERSION[ \t]+[0-9]+")
  string(REGEX REPLACE ".*KOKKOS_VERSION[ \t]+([0-9]+).*" "\\1" _kokkos_version "${_kokkos_version_line}")
  if(_kokkos_version MATCHES "^[0-9]+$")
    math(EXPR _kokkos_major "${_kokkos_version} / 10000")
    math(EXPR _kokkos_minor "${_kokkos_version} / 100 % 100")
    math(EXPR _kokkos_patch "${_kokkos_version} % 100")
    set(KokkosCore_VERSION "${_kokkos_major}.${_kokkos_minor}.${_kokkos_patch}")
  endif()
endif()

find_package_handle_standard_args(KokkosCore
  REQUIRED_VARS KokkosCore_LIBRARY KokkosCore_INCLUDE_DIR
  VERSION_VAR KokkosCore_VERSION)

if(KokkosCore_FOUND AND NOT TARGET KokkosCore::KokkosCore)
  find_package(Threads QUIET)
  shardgraph_imported_library(KokkosCore::KokkosCore "${KokkosCore_LIBRARY}" "${KokkosCore_INCLUDE_DIR}")
  # A static libkokkoscore needs these itself; for the shared one they are harmless.
  if(TARGET Threads::Threads)
    set_property(TARGET KokkosCore::KokkosCore APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(CMAKE_DL_LIBS)
    set_property(TARGET KokkosCore::KokkosCore APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${CMAKE_DL_LIBS})
  endif()
endif()

mark_as_advanced(KokkosCore_INCLUDE_DIR KokkosCore_LIBRARY)
unset(_kokkos_hints)
unset(_kokkos_version_line)
unset(_kokkos_version)
unset(_kokkos_major)
unset(_kokkos_minor)
unset(_kokkos_patch)
