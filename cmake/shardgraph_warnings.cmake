# shardgraph_target_warnings(<target>): the project's warning policy, applied only to its own tests,
# examples and benches. The INTERFACE targets that users link carry no warning flags, so a newer
# compiler can never break a user's build through them.
function(shardgraph_target_warnings target)
  if(MSVC)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:/W4;/WX;/permissive->")
    return()
  endif()
  set(cxx_flags -Wall -Wextra -Wpedantic -Werror)
  set(host_flags -Wall -Wextra -Werror)
  # GCC 12 reports `"literal" + std::string&&` as overlapping memcpy at -O2 and above
  # (-Wrestrict false positive in libstdc++, GCC bug 105329): silenced for GCC 12 only.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND cxx_flags -Wno-restrict)
    list(APPEND host_flags -Wno-restrict)
  endif()
  # nvcc: its own diagnostics become errors and the host compiler gets the C++ flags but -Wpedantic,
  # which flags the GNU line markers of nvcc's generated host code.
  # Eigen's headers (the cpu backend, in GPU tests that compare with it) draw nvcc's notes on their
  # __host__ __device__ annotations (20012-20015): silenced, as they are Eigen's, not ours.
  list(JOIN host_flags "," host_flags)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings;-diag-suppress=20012,20013,20014,20015;-Xcompiler=${host_flags}>")
endfunction()
