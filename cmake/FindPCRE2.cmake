# FindPCRE2: locates PCRE2's 8-bit library, whose Unicode classes (\p{L}, \p{N}, ...) the
# tokenizers of shardgraph::text use (Debian: libpcre2-dev).
#
# Result: the imported target PCRE2::8bit (headers + libpcre2-8), and the variables PCRE2_FOUND,
# PCRE2_VERSION (from pcre2.h), PCRE2_INCLUDE_DIR, PCRE2_LIBRARY.
# Searched, in order: PCRE2_ROOT (CMake or environment variable), then the system folders.
include(FindPackageHandleStandardArgs)
include("${CMAKE_CURRENT_LIST_DIR}/shardgraph_find_helpers.cmake")

shardgraph_find_hints(_pcre2_hints VARS PCRE2_ROOT)

find_path(PCRE2_INCLUDE_DIR NAMES pcre2.h HINTS ${_pcre2_hints} PATH_SUFFIXES include)
find_library(PCRE2_LIBRARY NAMES pcre2-8 HINTS ${_pcre2_hints} PATH_SUFFIXES lib lib64)

set(_pcre2_header)
if(PCRE2_INCLUDE_DIR AND EXISTS "${PCRE2_INCLUDE_DIR}/pcre2.h")
  set(_pcre2_header "${PCRE2_INCLUDE_DIR}/pcre2.h")
  shardgraph_version_from_header(PCRE2_VERSION "${_pcre2_header}" PCRE2_ MAJOR MINOR)
endif()

find_package_handle_standard_args(PCRE2
  REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR _pcre2_header
  VERSION_VAR PCRE2_VERSION)

if(PCRE2_FOUND)
  shardgraph_imported_library(PCRE2::8bit "${PCRE2_LIBRARY}" "${PCRE2_INCLUDE_DIR}")
endif()

mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
unset(_pcre2_hints)
unset(_pcre2_header)
